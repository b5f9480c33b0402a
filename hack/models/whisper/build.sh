#!/usr/bin/env bash
# Build the tiny Whisper test model: a random-weight Whisper (~450k parameters, a byte-level BPE trained here with
# Whisper's special and timestamp tokens, no model hub), exported with optimum-intel for WhisperPipeline (~25 s).
#
#   hack/models/whisper/build.sh               tiny-whisper
#   hack/models/whisper/build.sh bench         also tiny-whisper-bench (whisper-tiny's sizes, ~30M parameters: the
#                                              encoder and decoder of openai/whisper-tiny, a small vocabulary)
#   hack/models/whisper/build.sh NAME...       only the named models
#
# Output: ${OVSERVE_MODELS:-/var/cache/ovserve/models}/<name>, world-readable. Stamped like hack/models/build.sh
# but with a key of these files only: building or changing them never rebuilds the generative models (and
# their builder's changes never rebuild these). Uses the same cached exporter venv and the same build lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
. "$root/hack/versions.env"
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
VENV=${OVSERVE_EXPORT_VENV:-$OVSERVE_CACHE/venv-export}
REQ="$here/../requirements-export.txt"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { printf '[models %s] %s\n' "$(date +%T)" "$*" >&2; }

DEFAULT=(tiny-whisper)
targets=()
for a in "$@"; do
  case $a in
    all) targets+=("${DEFAULT[@]}") ;;
    bench) targets+=(tiny-whisper-bench) ;;
    tiny-whisper|tiny-whisper-bench) targets+=("$a") ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown model: $a" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${DEFAULT[@]}")

key=$(cat "$here/build.sh" "$here"/*.py "$REQ" | sha256sum | cut -c1-16)
fresh() { [ "$(cat "$MODELS/$1/.ovserve-stamp" 2>/dev/null)" = "$key" ]; }

ensure_venv() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import optimum.exporters.openvino, torch' >/dev/null 2>&1; then
    return 0
  fi
  log "creating the exporter venv $VENV (torch + optimum-intel, ~3 GB download, a few minutes)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q -r "$REQ" >&2
  sha256sum "$REQ" | cut -c1-16 > "$VENV/.ovserve-req"
}

work=""
cleanup() { [ -z "$work" ] || rm -rf "$work"; }
trap cleanup EXIT

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

PY() {
  "$VENV/bin/python" "$@" >>"$work/build.log" 2>&1 || { tail -n 60 "$work/build.log" >&2; return 1; }
}

build_one() {
  local name=$1 out="$work/$1"
  log "building $name"
  case $name in
    tiny-whisper)
      PY "$here/make_hf.py" "$work/hf-whisper"
      PY "$here/export_ov.py" "$work/hf-whisper" "$out" ;;
    tiny-whisper-bench)
      PY "$here/make_hf.py" "$work/hf-whisper-bench" --d-model 384 --layers 4 --heads 6 --ffn 1536
      PY "$here/export_ov.py" "$work/hf-whisper-bench" "$out" ;;
  esac
  publish "$name" "$out"
}

todo=()
for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
if [ ${#todo[@]} -eq 0 ]; then
  log "up to date in $MODELS: ${targets[*]}"
  exit 0
fi
mkdir -p "$MODELS"; chmod a+rx "$MODELS"
exec 9>"$MODELS/.build.lock"
if ! flock -n 9; then
  log "waiting for another model build to finish"
  flock 9
fi
todo=()
for t in "${targets[@]}"; do fresh "$t" || todo+=("$t"); done
[ ${#todo[@]} -gt 0 ] || { log "up to date in $MODELS: ${targets[*]}"; exit 0; }
ensure_venv
work=$(mktemp -d "$MODELS/.build.XXXXXX")
for t in "${todo[@]}"; do build_one "$t"; done
log "done: ${targets[*]} in $MODELS"
