#!/usr/bin/env bash
# A bench-only control plane for the operator's scale benchmark (benchmarks/operator_bench.py --scale):
# etcd, kube-apiserver, controller-manager, scheduler and kwok (simulated nodes and pods, no kubelet, no
# containers) in a network namespace of its own, so it never touches the shared test cluster (hack/cluster.sh):
# other namespace, other state directory, other processes; the same ports are private to each namespace.
#
#   hack/scale/cluster.sh up       start (idempotent); needs hack/build-binaries.sh and hack/build-kwok.sh
#   hack/scale/cluster.sh down     stop everything it started and delete its state (etcd data included)
#   hack/scale/cluster.sh status   component pids and the apiserver's readiness (exit 1 when not healthy)
#   hack/scale/cluster.sh exec CMD run CMD inside the namespace with KUBECONFIG set and kubectl on PATH
#
# Simulated pods get their IPs from their node's spec.podCIDR (10.250.<node>.0/24, set by the benchmark). The
# whole 10.250.0.0/16 is routed as local inside the namespace, so one process listening on 0.0.0.0:8000 there
# (the benchmark's status responder, benchmarks/scale_harness.py) answers GET /v1/status for every simulated
# pod: the operator's readback really goes over TCP to each pod's address.
# Environment: OVSERVE_SCALE_DIR (state, default /tmp/ovserve-scale), OVSERVE_SCALE_NETNS (default ovserve-scale).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../versions.env
. "$here/versions.env"
ST=${OVSERVE_SCALE_DIR:-/tmp/ovserve-scale}
NS=${OVSERVE_SCALE_NETNS:-ovserve-scale}
POD_RANGE=10.250.0.0/16
IN="nsenter --net=/var/run/netns/$NS"
KC="$BIN_DIR/kubectl --kubeconfig $ST/kubeconfig"
COMPONENTS="etcd apiserver controller-manager scheduler kwok"
log() { printf '[scale-cluster %s] %s\n' "$(date +%T)" "$*" >&2; }

alive() { [ -f "$ST/$1.pid" ] && kill -0 "$(cat "$ST/$1.pid")" 2>/dev/null; }
start() { local n=$1; shift; alive "$n" && return; $IN "$@" >> "$ST/logs/$n.log" 2>&1 9>&- & echo $! > "$ST/$n.pid"; }
wait_until() { # seconds what cmd...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out after ${t}s waiting for $what"; tail -n 20 "$ST"/logs/*.log >&2; return 1
}

credentials() {
  [ -f "$ST/kubeconfig" ] && return
  mkdir -p "$ST/pki"; (
  cd "$ST/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.crt -days 365 \
    -subj /CN=ovserve-scale-apiserver -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  # One static admin token: this control plane lives for one benchmark run, inside its own namespace.
  token=$(openssl rand -hex 24); echo "$token,admin,admin,system:masters" > tokens.csv
  chmod 600 ./*.key tokens.csv
  cat > "$ST/kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: scale, cluster: {server: "https://127.0.0.1:6443", certificate-authority: $ST/pki/apiserver.crt}}]
users: [{name: admin, user: {token: "$token"}}]
contexts: [{name: scale, context: {cluster: scale, user: admin}}]
current-context: scale
K
  chmod 600 "$ST/kubeconfig" )
}

# kwok's stock Stages with the pod start delays (1 s + up to 5 s jitter) removed: the figures are the control
# plane's and the operator's, not a simulated image pull.
kwok_config() {
  python3 - "$KWOK_BIN_DIR/stages" > "$ST/kwok.yaml" <<'PY'
import pathlib, sys
import yaml
docs = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
         "options": {"enablePodsOnNodeSyncStreamWatch": True, "podPlayStageParallelism": 8,
                     "nodePlayStageParallelism": 2, "nodeLeaseParallelism": 2}}]
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.yaml")):
    stage = yaml.safe_load(f.read_text())
    if stage["metadata"]["name"] in ("pod-create", "pod-ready", "pod-init-container-running",
                                     "pod-init-container-completed"):
        stage["spec"].pop("delay", None)
    docs.append(stage)
print(yaml.safe_dump_all(docs, sort_keys=False))
PY
}

up() {
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [ -x "$BIN_DIR/$b" ] || { log "missing $BIN_DIR/$b: run hack/build-binaries.sh"; exit 1; }
  done
  [ -x "$KWOK_BIN_DIR/kwok" ] || { log "missing $KWOK_BIN_DIR/kwok: run hack/build-kwok.sh (make kwok)"; exit 1; }
  mkdir -p "$ST/logs"
  if [ ! -e "/var/run/netns/$NS" ]; then ip netns add "$NS"; $IN ip link set lo up; fi
  grep -q "local $POD_RANGE" <<<"$($IN ip route show table local)" || $IN ip route add local $POD_RANGE dev lo
  credentials; kwok_config
  # Bench data, not a cluster to keep: no fsync waits beyond etcd's defaults, a quota that 10,000 objects fit.
  start etcd "$BIN_DIR/etcd" --data-dir "$ST/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --log-level warn \
    --quota-backend-bytes 8589934592
  wait_until 30 etcd $IN curl -sf http://127.0.0.1:2379/health
  start apiserver "$BIN_DIR/kube-apiserver" --etcd-servers http://127.0.0.1:2379 --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 --secure-port 6443 --tls-cert-file "$ST/pki/apiserver.crt" \
    --tls-private-key-file "$ST/pki/apiserver.key" --token-auth-file "$ST/pki/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$ST/pki/sa.pub" \
    --service-account-signing-key-file "$ST/pki/sa.key" --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode RBAC
  wait_until 90 kube-apiserver $IN $KC get --raw /readyz
  # The defaults (20-50 requests/s per client) would make the control plane, not the operator, the bottleneck.
  start controller-manager "$BIN_DIR/kube-controller-manager" --kubeconfig "$ST/kubeconfig" \
    --authentication-kubeconfig "$ST/kubeconfig" --authorization-kubeconfig "$ST/kubeconfig" --bind-address 127.0.0.1 \
    --service-account-private-key-file "$ST/pki/sa.key" --root-ca-file "$ST/pki/apiserver.crt" --leader-elect=false \
    --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle' --kube-api-qps 400 --kube-api-burst 800 \
    --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10
  start scheduler "$BIN_DIR/kube-scheduler" --kubeconfig "$ST/kubeconfig" --authentication-kubeconfig "$ST/kubeconfig" \
    --authorization-kubeconfig "$ST/kubeconfig" --bind-address 127.0.0.1 --leader-elect=false \
    --kube-api-qps 400 --kube-api-burst 800
  # Nodes labelled type=kwok (the benchmark creates them): kwok manages those only.
  start kwok "$KWOK_BIN_DIR/kwok" --kubeconfig "$ST/kubeconfig" --config "$ST/kwok.yaml" \
    --manage-nodes-with-label-selector type=kwok --node-lease-duration-seconds 40 --server-address 127.0.0.1:10247
  wait_until 60 "default ServiceAccount" $IN $KC get serviceaccount default -n default
  log "up: KUBECONFIG=$ST/kubeconfig inside netns $NS (hack/scale/cluster.sh exec ...)"
}

down() {
  for n in kwok scheduler controller-manager apiserver etcd; do
    [ -f "$ST/$n.pid" ] || continue; pid=$(cat "$ST/$n.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$ST/$n.pid"
  done
  [ -e "/var/run/netns/$NS" ] && ip netns del "$NS"
  rm -rf "$ST"
  log "down: $ST removed"
}

status() {
  local rc=0
  for c in $COMPONENTS; do
    if alive "$c"; then printf '%-20s running (pid %s)\n' "$c" "$(cat "$ST/$c.pid")"
    else printf '%-20s stopped\n' "$c"; rc=1; fi
  done
  [ $rc = 0 ] && $IN $KC get --raw /readyz >/dev/null 2>&1 || rc=1
  return $rc
}

case ${1:-} in
  up) up;;
  down) down;;
  status) status;;
  exec) shift; export KUBECONFIG=$ST/kubeconfig PATH=$BIN_DIR:$PATH; exec $IN "$@";;
  *) echo "usage: $0 up|down|status|exec CMD..." >&2; exit 2;;
esac
