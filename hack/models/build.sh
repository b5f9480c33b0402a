#!/usr/bin/env bash
# Build the tiny OpenVINO test models (random weights, locally trained tokenizer, no model hub).
#
#   hack/models/build.sh            tiny-llm tiny-llm-nosdpa tiny-llm-stateless tiny-vlm tiny-vlm-nosdpa
#   hack/models/build.sh bench      also tiny-bench (~91M parameters, fp32 IR ~350 MB) for benchmarks
#   hack/models/build.sh NAME...    only the named models
#
# Output: ${OVSERVE_MODELS:-/var/cache/ovserve/models}/<name>, world-readable (pods run as uid 10001).
# Idempotent: each model dir holds .ovserve-stamp with a hash of these scripts and the exporter pins;
# a model is rebuilt only when its stamp is missing or differs. Exporting needs torch + optimum-intel:
# they live in the cached build-only venv ${OVSERVE_CACHE}/venv-export (created here when missing,
# from requirements-export.txt), never in the serving image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
. "$root/hack/versions.env"
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
VENV=${OVSERVE_EXPORT_VENV:-$OVSERVE_CACHE/venv-export}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { printf '[models %s] %s\n' "$(date +%T)" "$*" >&2; }

DEFAULT=(tiny-llm tiny-llm-nosdpa tiny-llm-stateless tiny-vlm tiny-vlm-nosdpa)
targets=()
for a in "$@"; do
  case $a in
    all) targets+=("${DEFAULT[@]}") ;;
    bench) targets+=(tiny-bench) ;;
    tiny-llm|tiny-llm-nosdpa|tiny-llm-stateless|tiny-vlm|tiny-vlm-nosdpa|tiny-bench) targets+=("$a") ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown model: $a" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${DEFAULT[@]}")

key=$(cat "$here/build.sh" "$here"/*.py "$here/requirements-export.txt" | sha256sum | cut -c1-16)

ensure_venv() {
  local req_key; req_key=$(sha256sum "$here/requirements-export.txt" | cut -c1-16)
  if [ -x "$VENV/bin/python" ] && { [ "$(cat "$VENV/.ovserve-req" 2>/dev/null)" = "$req_key" ] \
       || "$VENV/bin/python" -c 'import optimum.exporters.openvino, torch' >/dev/null 2>&1; }; then
    return 0
  fi
  log "creating the exporter venv $VENV (torch + optimum-intel, ~3 GB download, a few minutes)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q -r "$here/requirements-export.txt" >&2
  echo "$req_key" > "$VENV/.ovserve-req"
  log "exporter venv ready"
}

fresh() { [ "$(cat "$MODELS/$1/.ovserve-stamp" 2>/dev/null)" = "$key" ]; }

work=""
cleanup() { [ -z "$work" ] || rm -rf "$work"; }
trap cleanup EXIT

# publish NAME SRC_DIR: stamp it and move it into place atomically (replacing an old build)
publish() {
  local name=$1 src=$2
  echo "$key" > "$src/.ovserve-stamp"
  chmod -R a+rX "$src"
  rm -rf "$MODELS/$name.old"
  [ ! -e "$MODELS/$name" ] || mv "$MODELS/$name" "$MODELS/$name.old"
  mv "$src" "$MODELS/$name"
  rm -rf "$MODELS/$name.old"
  log "built $name ($(du -sh "$MODELS/$name" | cut -f1))"
}

# exporter chatter goes to a log; on failure its tail is shown, otherwise only our progress lines
_progress="^(llm|llava):|^  (openvino_.*ops:|exported |built in |[a-z_]+: decomposed )"
PY() {
  "$VENV/bin/python" "$@" >>"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log" >&2; return 1; }
  grep -h -E "$_progress" "$work/build.log" | tail -n +$((${_shown:-0} + 1)) >&2 || true
  _shown=$(grep -c -h -E "$_progress" "$work/build.log" || true)
}

build_one() {
  local name=$1 out="$work/$1"
  log "building $name"
  case $name in
    tiny-llm)
      PY "$here/make_hf.py" llm "$work/hf-llm"
      PY "$here/export_ov.py" "$work/hf-llm" "$out" ;;
    tiny-llm-stateless)
      [ -d "$work/hf-llm" ] || PY "$here/make_hf.py" llm "$work/hf-llm"
      PY "$here/export_ov.py" "$work/hf-llm" "$out" --task text-generation ;;
    tiny-llm-nosdpa)
      ensure_model tiny-llm
      PY "$here/decompose_sdpa.py" "$MODELS/tiny-llm" "$out" openvino_model ;;
    tiny-vlm)
      PY "$here/make_hf.py" llava "$work/hf-llava"
      PY "$here/export_ov.py" "$work/hf-llava" "$out" --task image-text-to-text ;;
    tiny-vlm-nosdpa)
      ensure_model tiny-vlm
      PY "$here/decompose_sdpa.py" "$MODELS/tiny-vlm" "$out" openvino_language_model ;;
    tiny-bench)
      PY "$here/make_hf.py" llm "$work/hf-bench" --hidden 1024 --inter 2816 --layers 8 --heads 16 --kv 4 \
        --max-pos 2048
      PY "$here/export_ov.py" "$work/hf-bench" "$out" ;;
  esac
  rm -f "$out/.ovserve-stamp"
  publish "$name" "$out"
}

ensure_model() { fresh "$1" || build_one "$1"; }

todo=()
for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
if [ ${#todo[@]} -eq 0 ]; then
  log "up to date in $MODELS: ${targets[*]}"
  exit 0
fi
mkdir -p "$MODELS"; chmod a+rx "$MODELS"
# one builder at a time (tests and people may run this concurrently); re-check after waiting
exec 9>"$MODELS/.build.lock"
if ! flock -n 9; then
  log "waiting for another build.sh to finish"
  flock 9
fi
todo=()
for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
if [ ${#todo[@]} -eq 0 ]; then
  log "up to date in $MODELS: ${targets[*]}"
  exit 0
fi
ensure_venv
work=$(mktemp -d "$MODELS/.build.XXXXXX")
for t in "${todo[@]}"; do ensure_model "$t"; done
chmod a+rx "$MODELS"
log "done: ${targets[*]} in $MODELS"
