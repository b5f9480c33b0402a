#!/usr/bin/env bash
# Build images with buildah (no Docker) and import them into the local node's containerd.
#   hack/images.sh pause     localhost/pause:1, the pod sandbox image (static C binary in a scratch image)
#   hack/images.sh base      localhost/ovserve-base:1, a debootstrap'ed Debian with python3 (~4 min, cached)
#   hack/images.sh project   localhost/ovserve:dev from the Dockerfile on that base; rebuilt only when
#                            Dockerfile, constraints.txt, pyproject.toml, runtime/ or operator/ change
#   hack/images.sh standin   localhost/ovserve-standin:1, a hostile stand-in runtime (hack/standin) on the base
#   hack/images.sh epp       localhost/ovserve-epp:v1.5.0, GIE's endpoint picker (the static binary `make routing`
#                            builds) in a scratch image, for spec.routing.picker on this cluster (docs/routing.md)
#   hack/images.sh all
# Images are imported into the cluster's containerd when it runs (OVSERVE_CLUSTER_DIR), else only built; into
# node2's too while it runs (hack/node2.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/.." && pwd)
. "$here/versions.env"
ST=${OVSERVE_CLUSTER_DIR:-/tmp/ovserve-cluster}
SOCK=$ST/containerd.sock
IMG_CACHE=$OVSERVE_CACHE/images; mkdir -p "$IMG_CACHE" "$ST/images"
# One build at a time on this machine: buildah's tags are shared by every checkout and cluster, so two
# concurrent builds of localhost/ovserve:dev could import each other's image.
exec 8>"$IMG_CACHE/images.lock"; flock 8
PROJECT_IMAGE=${OVSERVE_IMAGE:-localhost/ovserve:dev}
BASE_IMAGE=localhost/ovserve-base:1
log() { printf '[images %s] %s\n' "$(date +%T)" "$*" >&2; }
have() { buildah inspect --type image "$1" >/dev/null 2>&1; }
ctr_() { ctr -a "$SOCK" -n k8s.io "$@"; }

# import IMAGE KEY: load into containerd unless the same KEY was imported into this cluster already
import() {
  import_into "$1" "$2"
  # node2 (hack/node2.sh), while its containerd runs: the same images as node1
  if [ -S "$ST/node2/containerd.sock" ]; then SOCK=$ST/node2/containerd.sock STAMPS=$ST/node2/images import_into "$1" "$2"; fi
}
import_into() {
  local img=$1 key=$2 stamps=${STAMPS:-$ST/images} stamp
  stamp="$stamps/$(echo "$1" | tr '/:' '__').imported"
  [ -S "$SOCK" ] && ctr_ version >/dev/null 2>&1 || { log "containerd not running: $img built, not imported"; return 0; }
  if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && ctr_ images ls -q | grep -qx "$img"; then return 0; fi
  local tar="$IMG_CACHE/import-$$.tar"
  buildah push -q "$img" "oci-archive:$tar:$img" >/dev/null
  ctr_ images import --no-unpack=false "$tar" >/dev/null
  rm -f "$tar"; mkdir -p "$stamps"; echo "$key" > "$stamp"
  log "imported $img into ${STAMPS:+node2}${STAMPS:-the node}"
}

pause() {
  local key; key=$(sha256sum "$here/pause/pause.c" | cut -c1-16)
  if ! have localhost/pause:1 || [ "$(buildah inspect -f '{{index .OCIv1.Config.Labels "ovserve.dev/input"}}' localhost/pause:1 2>/dev/null)" != "$key" ]; then
    log "building localhost/pause:1"
    gcc -static -Os -o "$IMG_CACHE/pause" "$here/pause/pause.c"
    local c; c=$(buildah from scratch)
    buildah copy -q "$c" "$IMG_CACHE/pause" /pause >/dev/null
    buildah config --entrypoint '["/pause"]' --user 65535:65535 --label "ovserve.dev/input=$key" "$c"
    buildah commit -q "$c" localhost/pause:1 >/dev/null; buildah rm "$c" >/dev/null
  fi
  import localhost/pause:1 "$key"
}

mirror() { # the Debian mirror apt already uses here (no other network)
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true; } \
    | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true
}

base() {
  have "$BASE_IMAGE" || build_base
  import "$BASE_IMAGE" "$(buildah inspect -f '{{.FromImageDigest}}' "$BASE_IMAGE")"
}

build_base() {
  local rootfs="$IMG_CACHE/base-rootfs-$DEBIAN_SUITE" m; m=$(mirror); m=${m:-http://deb.debian.org/debian}
  if [ ! -f "$rootfs/.complete" ]; then
    log "debootstrap $DEBIAN_SUITE from $m (~4 min, once)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$DEBIAN_SUITE" "$rootfs" "$m" \
      > "$IMG_CACHE/debootstrap.log" 2>&1 || { tail -n 20 "$IMG_CACHE/debootstrap.log" >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs/.complete"
  fi
  log "committing $BASE_IMAGE"
  local c; c=$(buildah from scratch); local mnt; mnt=$(buildah mount "$c")
  tar -C "$rootfs" --exclude=./.complete -cf - . | tar -C "$mnt" -xf -
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/bin:/usr/bin:/bin --cmd /bin/sh "$c"
  buildah commit -q "$c" "$BASE_IMAGE" >/dev/null; buildah rm "$c" >/dev/null
}

standin() {
  base
  local img=localhost/ovserve-standin:1 key; key=$(sha256sum "$here/standin/ovserve-runtime" | cut -c1-16)
  if [ "$(buildah inspect -f '{{index .OCIv1.Config.Labels "ovserve.dev/input"}}' "$img" 2>/dev/null)" != "$key" ]; then
    log "building $img"
    local c; c=$(buildah from "$BASE_IMAGE")
    buildah copy -q --chmod 0755 "$c" "$here/standin/ovserve-runtime" /usr/local/bin/ovserve-runtime >/dev/null
    buildah config --user 10001:10001 --cmd '["ovserve-runtime"]' --label "ovserve.dev/input=$key" "$c"
    buildah commit -q "$c" "$img" >/dev/null; buildah rm "$c" >/dev/null
  fi
  import "$img" "$key"
  echo "$img"
}

project_key() { # hash of everything the image is built from
  (cd "$root" && { sha256sum Dockerfile constraints.txt pyproject.toml
    find runtime operator -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -not -path '*.egg-info*' | LC_ALL=C sort | xargs sha256sum; } \
    | sha256sum | cut -c1-16)
}

project() {
  base
  local key; key=$(project_key)
  if [ "$(buildah inspect -f '{{index .OCIv1.Config.Labels "ovserve.dev/input"}}' "$PROJECT_IMAGE" 2>/dev/null)" != "$key" ]; then
    log "building $PROJECT_IMAGE (input $key)"
    local t0=$SECONDS
    (cd "$root" && buildah bud -q --layers --network host \
      -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      --build-arg "BASE=$BASE_IMAGE" --label "ovserve.dev/input=$key" -t "$PROJECT_IMAGE" . ) >&2
    log "built $PROJECT_IMAGE in $((SECONDS - t0))s"
  fi
  import "$PROJECT_IMAGE" "$key"
  echo "$PROJECT_IMAGE"
}

epp() {
  local bin; bin=$(ls -d "$OVSERVE_CACHE"/bin/routing-gie-*/epp 2>/dev/null | head -n1)
  [ -x "$bin" ] || { log "no epp binary: run make routing first"; exit 1; }
  local img=localhost/ovserve-epp:v1.5.0 key; key=$(sha256sum "$bin" | cut -c1-16)
  if [ "$(buildah inspect -f '{{index .OCIv1.Config.Labels "ovserve.dev/input"}}' "$img" 2>/dev/null)" != "$key" ]; then
    log "building $img"
    local c; c=$(buildah from scratch)
    buildah copy -q "$c" "$bin" /epp >/dev/null
    # the upstream image is distroless (nonroot 65532); the EPP makes its TLS certificate in memory
    buildah config --entrypoint '["/epp"]' --user 65532:65532 --label "ovserve.dev/input=$key" "$c"
    buildah commit -q "$c" "$img" >/dev/null; buildah rm "$c" >/dev/null
  fi
  import "$img" "$key"
  echo "$img"
}

case ${1:-} in
  pause) pause;; base) base;; project) project;; standin) standin;; epp) epp;;
  all) pause; project;;
  key) project_key;;
  *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2;;
esac
