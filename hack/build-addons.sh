#!/usr/bin/env bash
# Build the cluster's autoscaling add-ons from the Go module proxy, outside git, each binary only when missing:
#   KEDA's operator and metrics API server (keda-adapter), with KEDA's CRDs and ClusterRole -> $KEDA_BIN_DIR
#   Prometheus with Kubernetes service discovery, and promtool (alert rule tests)           -> $PROM_BIN_DIR
# (Debian's prometheus package is built without kubernetes_sd_configs, so it cannot discover pods.)
# Each is built inside a copy of its own module so that its replace directives and go.sum apply.
# Cold on 2 shared cores: ~1.5 GB of modules (every scaler's and every SD's cloud SDK), 10-20 min per binary
# at -p=1 (KEDA_GOFLAGS / GOFLAGS override).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
# shellcheck source=gobuild.sh
. "$here/gobuild.sh"

mkdir -p "$KEDA_BIN_DIR" "$PROM_BIN_DIR"
if ! { [ -x "$KEDA_BIN_DIR/keda-operator" ] && [ -x "$KEDA_BIN_DIR/keda-adapter" ] && [ -d "$KEDA_BIN_DIR/rbac" ]; }; then
  src=$(module_src github.com/kedacore/keda/v2 "v$KEDA_VERSION"); cd "$src"
  # KEDA's CRDs and its operator's ClusterRole/Role (namespace keda), as released with these binaries.
  rm -rf "$KEDA_BIN_DIR/crds" "$KEDA_BIN_DIR/rbac"; mkdir -p "$KEDA_BIN_DIR/crds" "$KEDA_BIN_DIR/rbac"
  cp config/crd/bases/*.yaml "$KEDA_BIN_DIR/crds/"; cp config/rbac/role.yaml "$KEDA_BIN_DIR/rbac/"
  ld="-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION -X github.com/kedacore/keda/v2/version.GitCommit=release"
  build "$KEDA_BIN_DIR" keda-operator ./cmd/operator "$ld"
  build "$KEDA_BIN_DIR" keda-adapter ./cmd/adapter "$ld"
fi
if [ ! -x "$PROM_BIN_DIR/prometheus" ]; then
  src=$(module_src github.com/prometheus/prometheus "$PROM_MODULE_VERSION"); cd "$src"
  # No builtinassets tag: the web UI is not embedded (the HTTP API, all Prometheus needs here, is).
  ld="-s -w -X github.com/prometheus/common/version.Version=$PROM_VERSION -X github.com/prometheus/common/version.Branch=release"
  build "$PROM_BIN_DIR" prometheus ./cmd/prometheus "$ld"
fi
if [ ! -x "$PROM_BIN_DIR/promtool" ]; then
  # promtool (`promtool test rules`: the chart's alerts are unit-tested against their own series, issue 41),
  # from the same module copy and Go build cache as prometheus
  src=$(module_src github.com/prometheus/prometheus "$PROM_MODULE_VERSION"); cd "$src"
  ld="-s -w -X github.com/prometheus/common/version.Version=$PROM_VERSION -X github.com/prometheus/common/version.Branch=release"
  build "$PROM_BIN_DIR" promtool ./cmd/promtool "$ld"
fi
log "KEDA $KEDA_VERSION in $KEDA_BIN_DIR, Prometheus $PROM_VERSION in $PROM_BIN_DIR"
