#!/usr/bin/env bash
# Build the fake Intel GPU device plugin into $OVSERVE_CACHE/bin (outside git).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../versions.env"
mkdir -p "$OVSERVE_CACHE/bin"
cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$OVSERVE_CACHE/bin/fake-gpu-plugin.tmp" .
mv "$OVSERVE_CACHE/bin/fake-gpu-plugin.tmp" "$OVSERVE_CACHE/bin/fake-gpu-plugin"
