#!/usr/bin/env bash
# Packs the serving benchmark for the 16-core device machine (docs/benchmarks.md): one call measures the
# runtime of an older revision ("old") and the working tree's ("new") side by side, HTTP vs the raw pipeline,
# on a small real-shaped model and the overhead-bound tiny one.
#
#   hack/bench/device.sh [--old REV] [--dest DIR] [--reps N] [--streams LIST] [--threads N] [MODEL_DIR...]
#
#   --old REV      the revision whose runtime/ovserve_runtime is "old" (default cd02626: main before the
#                  HTTP-layer redesign); "new" is the working tree's runtime/ovserve_runtime
#   --dest DIR     the bundle, inside the repo and ignored (default .devbench); carried by the device call
#   MODEL_DIR      default: bench-qwen-small (built by hack/models/bench-qwen.sh when missing) and tiny-llm,
#                  from $OVSERVE_MODELS (/var/cache/ovserve/models)
#
# Run from the repository root (the one the device call sends). It writes DIR/run.sh, the whole device-side
# command, and prints the `run` call to make: command `cd DIR && bash run.sh`, carry [DIR]. run.sh unpacks the
# cp312 OpenVINO wheels, checks that both runtimes import, runs benchmarks/runtime_bench.py with
# --runtime old=src-old --runtime new=src and writes under $OUT: results.json (all figures), tables.md (the
# bench's tables), summary.md (hack/bench/device_table.py: the docs table), env.txt (the machine), log.
# Locally (a dry run) set OVSERVE_BENCH_PYTHON to a Python that has OpenVINO (the venv) and
# OVSERVE_BENCH_SITE=none, and OUT to a scratch folder: the cp312 wheels load only under Python 3.12.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
. hack/versions.env
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
old=cd02626 dest=.devbench reps=3 streams=16,64,256 threads=16 tokens=64 limit=420
models=()
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "unknown flag: $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
case $dest in /*|..*) echo "--dest must be a folder inside the repository (it is carried): $dest" >&2; exit 2 ;; esac
mkdir -p "$dest"; git check-ignore -q "$dest" || { echo "$dest is not ignored by git: add it to .gitignore" >&2; exit 2; }
oldsha=$(git rev-parse --verify "$old^{commit}")
if [ ${#models[@]} -eq 0 ]; then
  hack/models/bench-qwen.sh bench-qwen-small  # a no-op when its stamp is current
  models=("$MODELS/bench-qwen-small" "$MODELS/tiny-llm")
fi
for m in "${models[@]}"; do
  [ -f "$m/openvino_model.xml" ] || { echo "no model at $m (tiny-llm: hack/models/build.sh tiny-llm)" >&2; exit 1; }
done

# the wheels, the working tree's runtime (src/), ./ovserve-runtime and the models: the shared packer
bash "$root/../shared/device/bundle.sh" "$dest" "${models[@]}" >/dev/null
# the old revision's runtime beside it (src-old/)
rm -rf "$dest/src-old"; mkdir -p "$dest/src-old"
git archive "$oldsha" runtime/ovserve_runtime | tar -x -C "$dest/src-old" --strip-components=1
cp benchmarks/runtime_bench.py hack/bench/device_table.py "$dest/"
names=$(for m in "${models[@]}"; do printf 'models/%s,' "$(basename "$m")"; done); names=${names%,}
dirty=$(git status --porcelain -- runtime/ovserve_runtime | wc -l)
python3 - "$dest/manifest.json" <<EOF
import json, sys
json.dump({
    "old": {"rev": "$old", "sha": "$oldsha", "source": "src-old"},
    "new": {"sha": "$(git rev-parse HEAD)", "uncommitted_runtime_files": $dirty, "source": "src"},
    "models": "$names".split(","), "streams": "$streams", "reps": $reps, "threads": $threads,
    "max_tokens": $tokens, "packed": "$(date -u +%FT%TZ)",
}, open(sys.argv[1], "w"), indent=1)
EOF

cat > "$dest/run.sh" <<EOF
#!/usr/bin/env bash
# The device-side command (written by hack/bench/device.sh): cd into the bundle and \`bash run.sh\`.
# Results under \$OUT: results.json, tables.md, summary.md, env.txt, manifest.json, log.
set -uo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd); cd "\$here"
OUT=\${OUT:-\$here/out}; mkdir -p "\$OUT"
PY=\${OVSERVE_BENCH_PYTHON:-python3}
site=\${OVSERVE_BENCH_SITE:-/tmp/site}
cp manifest.json "\$OUT/"
main() {
{ date -u; nproc; grep -m1 'model name' /proc/cpuinfo; grep -m1 -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '
  echo; free -g | head -2; "\$PY" --version
  "\$PY" -c 'import os; os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)); print("SCHED_BATCH allowed")' \
    || echo "SCHED_BATCH refused: the runtime's HTTP threads stay SCHED_OTHER"; } > "\$OUT/env.txt" 2>&1
if [ "\$site" != none ]; then
  mkdir -p "\$site" && tar xJf ov312.tar.xz -C "\$site" || { echo "unpacking the wheels failed"; return 1; }
  export PYTHONPATH=\$site:\$here/src
else
  export PYTHONPATH=\$here/src
fi
for src in src-old src; do  # each runtime imports (a missing package shows here, not after minutes)
  PYTHONPATH=\$here/\$src:\$PYTHONPATH "\$PY" -c 'import ovserve_runtime.cli as c, openvino_genai as g; print(c.__file__, g.__version__)' \
    >> "\$OUT/env.txt" 2>&1 || echo "runtime \$src does not import: see env.txt"
done
t0=\$(date +%s)
timeout -k 10 \${OVSERVE_BENCH_LIMIT:-$limit} env PYTHONUNBUFFERED=1 "\$PY" runtime_bench.py --models $names \\
  --streams \${OVSERVE_BENCH_STREAMS:-$streams} --reps \${OVSERVE_BENCH_REPS:-$reps} --threads \${OVSERVE_BENCH_THREADS:-$threads} \\
  --max-tokens \${OVSERVE_BENCH_TOKENS:-$tokens} --client-policy \${OVSERVE_BENCH_CLIENT_POLICY:-other} \\
  --runtime old=src-old --runtime new=src \\
  --json-out "\$OUT/results.json" > "\$OUT/tables.md"
rc=\$?
echo "runtime_bench exit \$rc after \$((\$(date +%s) - t0)) s"
[ -f "\$OUT/results.json" ] && "\$PY" device_table.py "\$OUT/results.json" > "\$OUT/summary.md" && cat "\$OUT/summary.md"
return \$rc
}
main 2>&1 | tee "\$OUT/log"
exit \${PIPESTATUS[0]}
EOF
chmod +x "$dest/run.sh"
size=$(du -sb "$dest" | cut -f1)
tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
others=$(git ls-files -z --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total=$((size + tree + ${others:-0}))
echo "bundle $dest: $((size / 1048576)) MiB; with the tracked and untracked files that travel: $((total / 1048576)) MiB of 64" >&2
[ "$total" -lt $((64 * 1048576)) ] || { echo "too large for the device call (64 MiB)" >&2; exit 1; }
echo "device call: run(command='cd $dest && bash run.sh', carry=['$dest'], timeout_s=540)" >&2
