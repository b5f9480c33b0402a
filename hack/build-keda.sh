#!/usr/bin/env bash
# Build KEDA's operator and metrics API server (keda-adapter) from the Go module proxy into $KEDA_BIN_DIR
# (outside git), and keep its CRDs next to them. Built inside a copy of KEDA's own module so its replace
# directives and go.sum apply. Each binary is built only when missing. Cold on 2 shared cores: the module
# download is ~1.5 GB (every scaler's cloud SDK) and each binary takes 10-20 min at -p=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
log() { printf '[build-keda %s] %s\n' "$(date +%T)" "$*"; }
command -v go >/dev/null || { echo "go is required (Go >= 1.26 for KEDA $KEDA_VERSION)" >&2; exit 1; }
mkdir -p "$KEDA_BIN_DIR"
[ -x "$KEDA_BIN_DIR/keda-operator" ] && [ -x "$KEDA_BIN_DIR/keda-adapter" ] && [ -d "$KEDA_BIN_DIR/rbac" ] \
  && { log "KEDA $KEDA_VERSION ready in $KEDA_BIN_DIR"; exit 0; }

W="$OVSERVE_CACHE/gobuild/keda-$KEDA_VERSION"
if [ ! -f "$W/src/go.mod" ]; then
  log "downloading github.com/kedacore/keda/v2@v$KEDA_VERSION"
  dir=$(go mod download -json "github.com/kedacore/keda/v2@v$KEDA_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$W"; mkdir -p "$W"; cp -r "$dir" "$W/src.tmp"; chmod -R u+w "$W/src.tmp"; mv "$W/src.tmp" "$W/src"
fi
cd "$W/src"
# KEDA's CRDs and its operator's ClusterRole/Role (namespace keda), as released with these binaries.
rm -rf "$KEDA_BIN_DIR/crds" "$KEDA_BIN_DIR/rbac"; mkdir -p "$KEDA_BIN_DIR/crds" "$KEDA_BIN_DIR/rbac"
cp config/crd/bases/*.yaml "$KEDA_BIN_DIR/crds/"; cp config/rbac/role.yaml "$KEDA_BIN_DIR/rbac/"
ld="-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION -X github.com/kedacore/keda/v2/version.GitCommit=release"
# Modest parallelism: this machine is shared (override with KEDA_GOFLAGS).
export GOFLAGS="${KEDA_GOFLAGS:--p=1} -buildvcs=false"
for pair in keda-operator:./cmd/operator keda-adapter:./cmd/adapter; do
  name=${pair%%:*} pkg=${pair#*:}
  [ -x "$KEDA_BIN_DIR/$name" ] && continue
  log "building $name v$KEDA_VERSION"
  CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags="$ld" -o "$KEDA_BIN_DIR/$name.tmp" "$pkg"
  mv "$KEDA_BIN_DIR/$name.tmp" "$KEDA_BIN_DIR/$name"
done
log "KEDA $KEDA_VERSION ready in $KEDA_BIN_DIR"
