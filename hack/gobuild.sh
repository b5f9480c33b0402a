#!/usr/bin/env bash
# Shared by hack/build-addons.sh and hack/build-kwok.sh (sourced, after versions.env): build a Go binary from the
# module proxy inside a writable copy of its own module (its replace directives and go.sum apply), outside git.
# Cold builds are slow on this shared machine: GOFLAGS default to -p=1 (ADDONS_GOFLAGS overrides).
command -v go >/dev/null || { echo "go is required (Go >= 1.26)" >&2; exit 1; }
export GOFLAGS="${ADDONS_GOFLAGS:--p=1} -buildvcs=false"   # modest parallelism: this machine is shared
log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%T)" "$*" >&2; }

module_src() { # module version -> prints a writable copy of the module's source
  local W="$OVSERVE_CACHE/gobuild/$(basename "$1")-$2"
  if [ ! -f "$W/src/go.mod" ]; then
    log "downloading $1@$2"
    local dir; dir=$(go mod download -json "$1@$2" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
    rm -rf "$W"; mkdir -p "$W"; cp -r "$dir" "$W/src.tmp"; chmod -R u+w "$W/src.tmp"; mv "$W/src.tmp" "$W/src"
  fi
  echo "$W/src"
}

build() { # dest-dir name package ldflags (run inside the module copy); only when missing
  [ -x "$1/$2" ] && return
  log "building $2"
  CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags="$4" -o "$1/$2.tmp" "$3"
  mv "$1/$2.tmp" "$1/$2"
}
