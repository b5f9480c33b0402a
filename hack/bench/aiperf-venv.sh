#!/usr/bin/env bash
# Print the path of the pinned aiperf executable (NVIDIA AIPerf, the load tool that
# `benchmarks/runtime_bench.py --aiperf` runs as a second opinion), creating its cached venv when missing:
#   hack/bench/aiperf-venv.sh        -> ${OVSERVE_CACHE}/venv-aiperf/bin/aiperf on stdout
# The venv (${OVSERVE_AIPERF_VENV:-$OVSERVE_CACHE/venv-aiperf}, ~1.2 GB, no torch) is installed from
# requirements-aiperf.txt and stamped with its hash; it is kept out of the project venv, git and the image.
# Needs PyPI the first time; exits 1 with a message (and pip's output on stderr) when it cannot install.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
. "$root/hack/versions.env"
VENV=${OVSERVE_AIPERF_VENV:-$OVSERVE_CACHE/venv-aiperf}
req=$here/requirements-aiperf.txt
key=$(sha256sum "$req" | cut -c1-16)
pin=$(grep -E '^aiperf==' "$req" | cut -d= -f3)
log() { printf '[aiperf-venv %s] %s\n' "$(date +%T)" "$*" >&2; }

ready() {
  [ -x "$VENV/bin/aiperf" ] || return 1
  [ "$(cat "$VENV/.ovserve-req" 2>/dev/null)" = "$key" ] && return 0
  # a venv made by hand with the pinned version (no stamp yet) is adopted, not reinstalled
  [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiperf"))' 2>/dev/null)" = "$pin" ] \
    && echo "$key" > "$VENV/.ovserve-req"
}

if ! ready; then
  mkdir -p "$(dirname "$VENV")"
  # one installer at a time (two benchmarks may start together); re-check after waiting
  exec 9>"$VENV.lock"
  flock 9
  if ! ready; then
    log "creating $VENV (aiperf==$pin from PyPI, ~1.2 GB, a few minutes)"
    python3 -m venv --clear "$VENV"
    if ! { "$VENV/bin/pip" install -q --upgrade pip >&2 && "$VENV/bin/pip" install -q -r "$req" >&2; }; then
      rm -f "$VENV/.ovserve-req"
      log "could not install aiperf==$pin into $VENV (is PyPI reachable?)"
      exit 1
    fi
    echo "$key" > "$VENV/.ovserve-req"
    log "aiperf venv ready"
  fi
fi
echo "$VENV/bin/aiperf"
