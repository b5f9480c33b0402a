#!/usr/bin/env bash
# Opt-in benchmark models, never built by `make models` or the tests:
#   hack/models/bench-qwen.sh [bench-qwen]   -> ${OVSERVE_MODELS:-/var/cache/ovserve/models}/bench-qwen
#       Qwen2.5-0.5B shape (896 hidden, 24 layers, 14/2 heads, 4864 inter, 151936 vocab), int8 IR ~0.5 GB;
#       peak memory ~6 GB, a few minutes.
#   hack/models/bench-qwen.sh bench-qwen-small   -> .../bench-qwen-small
#       the same architecture at ~25M parameters (512 hidden, 8 layers, 8/2 heads, 1280 inter, 8192 vocab),
#       int8 IR ~26 MB: small enough for the device bundle (hack/bench/device.sh), about a minute.
#   hack/models/bench-qwen.sh bench-qwen-draft   -> .../bench-qwen-draft
#       bench-qwen's speculative draft (runtime_bench.py --speculative --models bench-qwen --draft
#       bench-qwen-draft): the same vocabulary (151936) and the same locally trained tokenizer (the BPE training
#       is deterministic, so the runtime's draft tokenizer check finds it identical), 2 layers, 256 hidden,
#       4/2 heads, 512 inter, ~40M parameters (nearly all embeddings); under a minute. With random weights its
#       proposals are accepted almost always: it repeats the last token, and bench-qwen's greedy output repeats one.
#   hack/models/bench-qwen.sh bench-qwen-int4   -> .../bench-qwen-int4
#       bench-qwen's weights in 4 bits (nncf INT4_SYM, group 128, data-free; nncf keeps the embeddings int8):
#       the 4-bit class against llama.cpp's q4_0 (docs/benchmarks.md, issue 45). bench-qwen-int8sym: INT8_SYM.
#   hack/models/bench-qwen.sh bench-qwen-draft-untied   -> .../bench-qwen-draft-untied
#       the same draft with its own random output head (~80M parameters): its proposals are almost never
#       accepted, the price of speculation with a draft that is never right.
# Random weights, a locally trained BPE tokenizer, int8 weights. No model hub. Needs the exporter venv that
# build.sh creates (run `hack/models/build.sh` once first). Kept apart from build.sh so that it does not
# change the stamps of the default test models; each variant has its own stamp.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
. "$root/hack/versions.env"
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
VENV=${OVSERVE_EXPORT_VENV:-$OVSERVE_CACHE/venv-export}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
name=${1:-bench-qwen}
mode=int8_asym
case $name in
  bench-qwen) shape=() ;;
  bench-qwen-int4) shape=(); mode=int4_sym ;;
  bench-qwen-int8sym) shape=(); mode=int8_sym ;;
  bench-qwen-small) shape=(--hidden 512 --inter 1280 --layers 8 --heads 8 --kv 2 --vocab 8192) ;;
  bench-qwen-draft) shape=(--hidden 256 --inter 512 --layers 2 --heads 4 --kv 2) ;;
  bench-qwen-draft-untied) shape=(--hidden 256 --inter 512 --layers 2 --heads 4 --kv 2 --untied) ;;
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  *) echo "unknown benchmark model: $name (bench-qwen, bench-qwen-int4, bench-qwen-int8sym, bench-qwen-small, bench-qwen-draft, bench-qwen-draft-untied)" >&2; exit 2 ;;
esac
key=$( { echo "$name ${shape[*]} $mode"; cat "$here/bench-qwen.sh" "$here"/bench/*.py "$here/requirements-export.txt"; } \
  | sha256sum | cut -c1-16)
if [ "$(cat "$MODELS/$name/.ovserve-stamp" 2>/dev/null)" = "$key" ]; then
  echo "up to date: $MODELS/$name" >&2; exit 0
fi
[ -x "$VENV/bin/python" ] || { echo "no exporter venv at $VENV: run hack/models/build.sh first" >&2; exit 1; }
mkdir -p "$MODELS"
exec 9>"$MODELS/.build.lock"; flock 9
work=$(mktemp -d "$MODELS/.build.XXXXXX"); trap 'rm -rf "$work"' EXIT
"$VENV/bin/python" "$here/bench/make_qwen_shape.py" "$work/hf" "${shape[@]}" >&2
"$VENV/bin/python" "$here/bench/export_int8.py" "$work/hf" "$work/$name" --mode "$mode" >"$work/export.log" 2>&1 \
  || { tail -n 60 "$work/export.log" >&2; exit 1; }
echo "$key" > "$work/$name/.ovserve-stamp"
chmod -R a+rX "$work/$name"
rm -rf "$MODELS/$name"; mv "$work/$name" "$MODELS/$name"
echo "built $MODELS/$name ($(du -sh "$MODELS/$name" | cut -f1))" >&2
