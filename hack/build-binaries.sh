#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, etcd and
# helm from Go modules into $BIN_DIR (outside git). Each binary is built only when missing, so a
# re-run is a no-op. Cold on 2 cores: ~15 min for Kubernetes, ~1 min etcd, ~7 min helm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
mkdir -p "$BIN_DIR"
log() { printf '[build-binaries %s] %s\n' "$(date +%T)" "$*"; }
command -v go >/dev/null || { echo "go is required (Go >= 1.24) to build the control plane" >&2; exit 1; }

k8s_cmds="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
missing=""
for c in $k8s_cmds; do [ -x "$BIN_DIR/$c" ] || missing="$missing $c"; done
if [ -n "$missing" ]; then
  W="$OVSERVE_CACHE/gobuild/k8s-$K8S_VERSION"; mkdir -p "$W"; cd "$W"
  if [ ! -f go.sum ]; then
    log "resolving k8s.io/kubernetes v$K8S_VERSION (module download, minutes when cold)"
    rm -f go.mod; go mod init k8sbuild >/dev/null 2>&1
    gomod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    echo "require k8s.io/kubernetes v$K8S_VERSION" >> go.mod
    # k8s.io/kubernetes points its staging modules at ./staging: use their published v0.x twins.
    grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$gomod" \
      | awk -v v="v0.${K8S_VERSION#1.}" '{print "replace " $1 " => " $1 " " v}' >> go.mod
    { echo '//go:build tools'; echo 'package tools'
      for c in $k8s_cmds; do echo "import _ \"k8s.io/kubernetes/cmd/$c\""; done; } > tools.go
    go mod tidy >/dev/null 2>&1 || go mod tidy -e
  fi
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  for c in $missing; do
    log "building $c v$K8S_VERSION"
    CGO_ENABLED=0 go build -trimpath -ldflags="$ld" -o "$BIN_DIR/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$BIN_DIR/$c.tmp" "$BIN_DIR/$c"
  done
fi

if [ ! -x "$BIN_DIR/etcd" ]; then
  # etcd's go.mod carries replace directives, so `go install pkg@v` refuses: build from a scratch module.
  W="$OVSERVE_CACHE/gobuild/etcd-$ETCD_VERSION"; mkdir -p "$W"; cd "$W"
  if [ ! -f go.sum ]; then
    rm -f go.mod; go mod init etcdbuild >/dev/null 2>&1
    printf '//go:build tools\npackage tools\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1; go mod tidy >/dev/null 2>&1
  fi
  log "building etcd v$ETCD_VERSION"
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=release" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
fi

if [ ! -x "$BIN_DIR/helm" ]; then
  log "building helm v$HELM_VERSION (~7 min cold)"
  W="$OVSERVE_CACHE/gobuild/helm-$HELM_VERSION"; mkdir -p "$W"
  GOBIN="$W" CGO_ENABLED=0 go install -trimpath \
    -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
  mv "$W/helm" "$BIN_DIR/helm"
fi
log "binaries ready in $BIN_DIR"
