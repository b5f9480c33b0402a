#!/usr/bin/env bash
# Host packages the local cluster and the image build need (Debian bookworm). A no-op when present.
set -euo pipefail
pkgs="containerd runc containernetworking-plugins iptables buildah debootstrap iproute2 curl openssl gcc libc6-dev conntrack util-linux"
missing=$(for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
[ -z "$missing" ] && exit 0
echo "[install-deps] apt-get install $missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq $missing >/dev/null
