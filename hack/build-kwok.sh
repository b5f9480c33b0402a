#!/usr/bin/env bash
# Build kwok (sigs.k8s.io/kwok, simulated nodes and pods without a kubelet) from the Go module proxy, outside git,
# only when missing -> $KWOK_BIN_DIR/kwok. Optional: only the operator's scale benchmark (make scale-bench,
# hack/scale/cluster.sh) uses it. Cold on 2 shared cores: a few minutes at -p=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
# shellcheck source=gobuild.sh
. "$here/gobuild.sh"

mkdir -p "$KWOK_BIN_DIR"
if ! { [ -x "$KWOK_BIN_DIR/kwok" ] && [ -d "$KWOK_BIN_DIR/stages" ]; }; then
  src=$(module_src sigs.k8s.io/kwok "v$KWOK_VERSION"); cd "$src"
  # kwok's stock Stages (what a simulated node and pod go through), as released with this binary.
  rm -rf "$KWOK_BIN_DIR/stages"; mkdir -p "$KWOK_BIN_DIR/stages"
  cp kustomize/stage/node/fast/node-initialize.yaml kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    kustomize/stage/pod/general/pod-*.yaml "$KWOK_BIN_DIR/stages/"
  build "$KWOK_BIN_DIR" kwok ./cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
fi
log "kwok $KWOK_VERSION in $KWOK_BIN_DIR"
