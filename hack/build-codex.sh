#!/usr/bin/env bash
# The Codex CLI for tests/runtime/test_agent_clients.py only (never in the image): `npm install` of the pinned
# @openai/codex, whose npm package ships its Linux binary, cached outside git. Idempotent: a no-op when the pinned
# version is there. Prints the binary's path on stdout (the test fixture reads the last line).
#
#   hack/build-codex.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/versions.env"
dir=$OVSERVE_CACHE/codex
bin=$dir/node_modules/.bin/codex
if ! "$bin" --version 2>/dev/null | grep -qx "codex-cli $CODEX_VERSION"; then
  if ! command -v npm >/dev/null; then
    echo "[codex] apt-get install nodejs npm" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "[codex] npm install @openai/codex@$CODEX_VERSION into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --save-exact --no-audit --no-fund --loglevel=error "@openai/codex@$CODEX_VERSION" >&2
  "$bin" --version >&2
fi
echo "$bin"
