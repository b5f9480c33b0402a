#!/usr/bin/env bash
# Build the draft models for speculative-decoding tests beside the tiny models (random weights, no hub).
#
#   hack/models/draft/build.sh        tiny-llm-draft tiny-llm-draft-othertok
#
#   tiny-llm-draft           a smaller Llama (1 layer, hidden 32) with tiny-llm's tokenizer (the same
#                            deterministic training): a usable draft for tiny-llm
#   tiny-llm-draft-othertok  the same shape with a tokenizer trained to another vocabulary: an unusable
#                            draft (DraftModelIncompatible)
#
# Output: ${OVSERVE_MODELS:-/var/cache/ovserve/models}/<name>. Its own stamp (a hash of this folder, make_hf.py,
# export_ov.py and the exporter pins), so adding or changing these models never rebuilds the tiny models of
# ../build.sh (whose stamp hashes only ../*.py and ../build.sh). Same exporter venv as ../build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); models_dir=$(cd "$here/.." && pwd); root=$(cd "$here/../../.." && pwd)
. "$root/hack/versions.env"
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
VENV=${OVSERVE_EXPORT_VENV:-$OVSERVE_CACHE/venv-export}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { printf '[draft-models %s] %s\n' "$(date +%T)" "$*" >&2; }

ALL=(tiny-llm-draft tiny-llm-draft-othertok)
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  case $t in tiny-llm-draft|tiny-llm-draft-othertok) ;; *) echo "unknown draft model: $t" >&2; exit 2 ;; esac
done
key=$(cat "$here"/*.sh "$here"/*.py "$models_dir/make_hf.py" "$models_dir/export_ov.py" \
  "$models_dir/requirements-export.txt" | sha256sum | cut -c1-16)
fresh() { [ "$(cat "$MODELS/$1/.ovserve-stamp" 2>/dev/null)" = "$key" ]; }

todo=(); for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
[ ${#todo[@]} -gt 0 ] || { log "up to date in $MODELS: ${targets[*]}"; exit 0; }
mkdir -p "$MODELS"; chmod a+rx "$MODELS"
exec 9>"$MODELS/.build-draft.lock"; flock 9
todo=(); for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
[ ${#todo[@]} -gt 0 ] || { log "up to date in $MODELS: ${targets[*]}"; exit 0; }
[ -x "$VENV/bin/python" ] || { log "no exporter venv at $VENV: run hack/models/build.sh first"; exit 1; }
work=$(mktemp -d "$MODELS/.build-draft.XXXXXX"); trap 'rm -rf "$work"' EXIT
for t in "${todo[@]}"; do
  log "building $t"
  case $t in
    tiny-llm-draft) "$VENV/bin/python" "$models_dir/make_hf.py" llm "$work/hf-$t" --hidden 32 --inter 64 --layers 1 \
                      --heads 2 --kv 1 >>"$work/build.log" 2>&1 ;;
    tiny-llm-draft-othertok) "$VENV/bin/python" "$here/make_othertok.py" "$work/hf-$t" >>"$work/build.log" 2>&1 ;;
  esac || { tail -n 40 "$work/build.log" >&2; exit 1; }
  "$VENV/bin/python" "$models_dir/export_ov.py" "$work/hf-$t" "$work/$t" >>"$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log" >&2; exit 1; }
  echo "$key" > "$work/$t/.ovserve-stamp"; chmod -R a+rX "$work/$t"
  rm -rf "$MODELS/$t.old"; [ ! -e "$MODELS/$t" ] || mv "$MODELS/$t" "$MODELS/$t.old"
  mv "$work/$t" "$MODELS/$t"; rm -rf "$MODELS/$t.old"
  log "built $t ($(du -sh "$MODELS/$t" | cut -f1))"
done
