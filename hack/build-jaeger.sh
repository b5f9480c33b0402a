#!/usr/bin/env bash
# Build Jaeger's all-in-one (v1: OTLP/HTTP and gRPC receivers, in-memory storage, the query API on 16686) from the
# Go module proxy, outside git, only when missing -> $JAEGER_BIN_DIR/jaeger-all-in-one. The tracing e2e test runs it
# as a local process in the cluster's network namespace (tests/operator/test_tracing_e2e.py). No UI assets are
# embedded (the query HTTP API, all the test reads, is). Cold on 2 shared cores: several minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
# shellcheck source=gobuild.sh
. "$here/gobuild.sh"

mkdir -p "$JAEGER_BIN_DIR"
if [ ! -x "$JAEGER_BIN_DIR/jaeger-all-in-one" ]; then
  src=$(module_src github.com/jaegertracing/jaeger "v$JAEGER_VERSION"); cd "$src"
  ld="-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$JAEGER_VERSION"
  build "$JAEGER_BIN_DIR" jaeger-all-in-one ./cmd/all-in-one "$ld"
fi
log "Jaeger $JAEGER_VERSION in $JAEGER_BIN_DIR"
