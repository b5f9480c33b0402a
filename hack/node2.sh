#!/usr/bin/env bash
# A second real node (node2) for the cluster of hack/cluster.sh, started only when asked: its own network
# namespace ($OVSERVE_NETNS-node2), containerd, kubelet, kube-proxy and pod network (10.244.1.0/24), joined to the
# running cluster. A veth pair links the two namespaces (node1's side 10.245.2.1, node2 10.245.2.2), routes carry
# pod traffic both ways: pods on the two nodes reach each other, and the cluster's namespace (where the tests and
# the operator run) reaches node2's pods and Services. node2 registers with the taint
# ovserve.dev/test-node2=true:NoSchedule, so only pods that tolerate it land there: the shared cluster's other
# tests never see it. The images node1 has (localhost/*) are copied into node2's containerd at `up`, and
# hack/images.sh imports new builds into both nodes while node2 runs.
#
#   hack/cluster.sh node2 up              start (idempotent; a partial node2 is restarted); waits for Ready
#   hack/cluster.sh node2 down            stop it, delete the Node object, remove its namespace (images kept)
#   hack/cluster.sh node2 reset           down, then delete its state (containerd images included)
#   hack/cluster.sh node2 status          pids and readiness (exit 1 when not healthy)
#   hack/cluster.sh node2 images          copy node1's localhost/* images that node2 lacks or has older
#   hack/cluster.sh node2 stop-kubelet    kill its kubelet (SIGTERM); containers and kube-proxy keep running: the
#                                         Node goes Unknown after the controller-manager's grace period (50 s)
#   hack/cluster.sh node2 start-kubelet   start it again and wait for Ready
#   hack/cluster.sh node2 kill            node lost: SIGKILL its kubelet, kube-proxy, containerd and every
#                                         container (pod IPs answer nothing); `node2 up` brings it back
#   hack/cluster.sh node2 partition | heal   cut / restore its link (pods keep running, unreachable both ways)
#   hack/cluster.sh node2 drain [ARGS]    kubectl drain node2 (evictions: PodDisruptionBudgets are honoured);
#                                         default args --ignore-daemonsets --delete-emptydir-data --timeout=120s
#   hack/cluster.sh node2 uncordon
# Pods for node2: tolerations [{key: ovserve.dev/test-node2, operator: Exists, effect: NoSchedule}] and, to
# land there for sure, nodeSelector {kubernetes.io/hostname: node2}. Once node2 has started, the cluster's namespace
# forwards IPv4 (net.ipv4.ip_forward=1 there: node1's pods reach node2's through it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
ST=${OVSERVE_CLUSTER_DIR:-/tmp/ovserve-cluster}
NS=${OVSERVE_NETNS:-ovserve}
NAME=node2
NS2=$NS-$NAME
N2=$ST/$NAME
IP=10.245.0.1 IP2=10.245.2.2 GW2=10.245.2.1 PODS2=10.244.1.0/24 VETH=veth-$NAME
TAINT_KEY=ovserve.dev/test-node2
P=$ST/pki; L=$N2/logs
IN="nsenter --net=/var/run/netns/$NS"     # the cluster's namespace (apiserver, node1)
IN2="nsenter --net=/var/run/netns/$NS2"   # node2's (trap: not `ip netns exec`, it remounts /sys)
KC="$BIN_DIR/kubectl --kubeconfig $P/admin.kubeconfig"
SOCK=$N2/containerd.sock
log() { printf '[node2 %s] %s\n' "$(date +%T)" "$*" >&2; }

alive() { [ -f "$N2/$1.pid" ] && kill -0 "$(cat "$N2/$1.pid")" 2>/dev/null; }
# Daemons must not inherit a lock (fds 7-9 of this script, images.sh and cluster.sh).
start() { local n=$1; shift; alive "$n" && return; $IN2 "$@" >> "$L/$n.log" 2>&1 7>&- 8>&- 9>&- & echo $! > "$N2/$n.pid"; }
stop() { # name signal
  [ -f "$N2/$1.pid" ] || return 0; local pid; pid=$(cat "$N2/$1.pid")
  if kill -"${2:-TERM}" "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$N2/$1.pid"
}
lock() { mkdir -p "$N2"; exec 7>"$N2.lock"; flock -w 600 7 || { log "another hack/node2.sh holds $N2.lock"; exit 1; }; }
wait_until() { # seconds what cmd...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out after ${t}s waiting for $what; last lines of node2's logs:"; tail -n 20 "$L"/*.log >&2; return 1
}
apiserver_up() { $IN $KC get --raw /readyz >/dev/null 2>&1; }
ready() { $IN $KC get node $NAME -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; }
# A Node still reads Ready for up to 50 s after its kubelet died: the kubelet's own healthz says it runs now.
kubelet_ok() { $IN2 curl -sf http://127.0.0.1:10248/healthz >/dev/null 2>&1 && ready; }
healthy() { alive containerd && alive kubelet && alive kube-proxy && kubelet_ok; }

pki() {
  [ -f "$P/$NAME.kubeconfig" ] && return
  ( cd "$P"
    openssl req -newkey rsa:2048 -nodes -keyout $NAME.key -out $NAME.csr -subj "/CN=system:node:$NAME/O=system:nodes" 2>/dev/null
    printf "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:%s,DNS:%s\n" \
      $IP2 $NAME > $NAME.ext
    openssl x509 -req -in $NAME.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $NAME.crt -days 3650 -extfile $NAME.ext 2>/dev/null
    chmod 600 $NAME.key )
  cat > "$P/$NAME.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: ovserve, cluster: {server: "https://$IP:6443", certificate-authority: $P/ca.crt}}]
users: [{name: $NAME, user: {client-certificate: $P/$NAME.crt, client-key: $P/$NAME.key}}]
contexts: [{name: ovserve, context: {cluster: ovserve, user: $NAME}}]
current-context: ovserve
K
}

network() {
  [ -e "/var/run/netns/$NS2" ] || { ip netns add "$NS2"; $IN2 ip link set lo up; }
  if ! $IN ip link show $VETH >/dev/null 2>&1; then
    $IN ip link add $VETH type veth peer name eth0 netns "$NS2"
    $IN ip addr add $GW2/24 dev $VETH
    $IN2 ip addr add $IP2/24 dev eth0
  fi
  $IN ip link set $VETH up; $IN2 ip link set eth0 up
  # node2 reaches the apiserver (10.245.0.1), node1's pods and everything else through node1's namespace
  $IN2 ip route replace default via $GW2
  $IN ip route replace $PODS2 via $IP2
  # pod traffic between the nodes is routed by both namespaces (node1's was a dead end before: 0 by default)
  $IN sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'; $IN2 sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
}

write_configs() {
  mkdir -p "$N2/cni" "$L"
  cat > "$N2/cni/10-pods.conflist" <<C
{"cniVersion":"0.4.0","name":"$NS2-pods","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","dataDir":"$N2/cni-ipam","ranges":[[{"subnet":"$PODS2"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
C
  cat > "$N2/containerd.toml" <<C
version = 2
root = "$N2/containerd"
state = "$N2/containerd-state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"
  restrict_oom_score_adj = true          # trap: this sandbox forbids negative oom_score_adj (runc fails)
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$N2/runc"                  # not node1's /run/containerd/runc
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N2/cni"
C
  cat > "$N2/kubelet.yaml" <<C
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $P/ca.crt}}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
tlsCertFile: $P/$NAME.crt
tlsPrivateKeyFile: $P/$NAME.key
address: $IP2
readOnlyPort: 0
serializeImagePulls: false
podLogsDir: $N2/pod-logs
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
registerWithTaints: [{key: $TAINT_KEY, value: "true", effect: NoSchedule}]
C
}

# node1's localhost/* images, copied into node2's containerd unless it has the same digest already.
images() {
  local c1="ctr -a $ST/containerd.sock -n k8s.io" c2="ctr -a $SOCK -n k8s.io" ref digest
  $c1 images ls 2>/dev/null | awk 'NR > 1 && $1 ~ /^localhost\// {print $1, $3}' | while read -r ref digest; do
    [ "$($c2 images ls 2>/dev/null | awk -v r="$ref" '$1 == r {print $3}')" = "$digest" ] && continue
    local t0=$SECONDS
    $c1 images export - "$ref" | $c2 images import --no-unpack=false - >/dev/null
    log "copied $ref into node2 ($((SECONDS - t0))s)"
  done
}

kill_containers() { # the shims of node2's containerd and the containers under them
  local s; for s in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
    pkill -9 -P "$s" 2>/dev/null || true; kill -9 "$s" 2>/dev/null || true
  done
}

stop_processes() {
  for n in kube-proxy kubelet containerd; do stop $n TERM; done
  kill_containers
  sleep 0.3
  { grep " $N2/" /proc/mounts || true; } | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
}

start_kubelet() {
  start kubelet "$BIN_DIR/kubelet" --config "$N2/kubelet.yaml" --kubeconfig "$P/$NAME.kubeconfig" --hostname-override $NAME \
    --node-ip $IP2 --root-dir "$N2/kubelet" --node-labels ovserve.dev/test-node2=true
}

up() {
  [ -e "/var/run/netns/$NS" ] && apiserver_up || { log "the cluster is not up: hack/cluster.sh up first"; exit 1; }
  lock
  if [ -e "/var/run/netns/$NS2" ] && healthy; then log "already up (netns $NS2)"; return; fi
  if alive containerd || alive kubelet || alive kube-proxy; then log "found a partial node2: restarting it"; stop_processes; fi
  local t0=$SECONDS
  network; pki; write_configs
  start containerd containerd --config "$N2/containerd.toml"
  wait_until 30 containerd ctr -a "$SOCK" version
  images
  start_kubelet
  start kube-proxy "$BIN_DIR/kube-proxy" --kubeconfig "$P/admin.kubeconfig" --hostname-override $NAME --proxy-mode iptables \
    --cluster-cidr 10.244.0.0/16 --conntrack-max-per-core 0 --metrics-bind-address 127.0.0.1:10249 \
    --healthz-bind-address 127.0.0.1:10256
  wait_until 120 "node2 Ready" kubelet_ok
  # a Node object left from before (or edited by hand) keeps its taints: the kubelet only sets them at registration
  $IN $KC taint node $NAME --overwrite "$TAINT_KEY=true:NoSchedule" >/dev/null
  log "up in $((SECONDS - t0))s: node $NAME ($IP2, pods $PODS2), taint $TAINT_KEY=true:NoSchedule"
}

rm_orphan_netns() { # pod namespaces without any process (the pods of a killed node2)
  local live=" " l n; for f in /proc/[0-9]*/ns/net; do l=$(readlink "$f" 2>/dev/null || true); live+="${l//[^0-9]/} "; done
  for n in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
    case "$live" in *" $(stat -c %i "/var/run/netns/$n" 2>/dev/null || true) "*) ;; *) ip netns del "$n" 2>/dev/null || true;; esac
  done
}

down() {
  [ -d "$N2" ] || [ -e "/var/run/netns/$NS2" ] || { log "nothing to stop"; return; }
  lock
  stop_processes
  # the Node object goes too (after the kubelet, which would register it again): its pods are garbage-collected
  if apiserver_up; then $IN $KC delete node $NAME --ignore-not-found --wait=false --request-timeout=10s >/dev/null || true; fi
  ip netns del "$NS2" 2>/dev/null || true      # the veth pair and the routes over it go with it
  [ -e "/var/run/netns/$NS" ] && $IN ip route del $PODS2 2>/dev/null || true
  rm -rf "$N2/cni-ipam"; rm -f /var/lib/cni/results/"$NS2"-pods-*
  rm_orphan_netns
  log "down (images kept in $N2; 'node2 reset' deletes them)"
}

status() {
  local rc=0 c
  for c in containerd kubelet kube-proxy; do
    if alive $c; then printf '%-20s running (pid %s)\n' "$c" "$(cat "$N2/$c.pid")"; else printf '%-20s stopped\n' "$c"; rc=1; fi
  done
  if ready; then echo "$NAME                Ready"; else echo "$NAME                not ready"; rc=1; fi
  return $rc
}

case ${1:-} in
  up) up;;
  down) down;;
  reset) down; rm -rf "$N2" "$N2.lock"; log "node2 state deleted";;
  status) status;;
  images) alive containerd || { log "node2 is not running"; exit 1; }; images;;
  stop-kubelet) stop kubelet TERM; log "kubelet stopped (containers keep running)";;
  start-kubelet)
    alive containerd || { log "node2's containerd is not running: use node2 up"; exit 1; }
    start_kubelet; wait_until 120 "node2 Ready" kubelet_ok; log "kubelet started, node Ready";;
  kill) stop kube-proxy KILL; stop kubelet KILL; stop containerd KILL; kill_containers; log "node2 killed: kubelet, kube-proxy, containerd and containers";;
  partition) $IN ip link set $VETH down; log "node2 partitioned (link down)";;
  heal) $IN ip link set $VETH up; $IN ip route replace $PODS2 via $IP2; log "node2 link up";;
  drain) shift; [ $# -gt 0 ] || set -- --ignore-daemonsets --delete-emptydir-data --timeout=120s
    exec $IN $KC drain $NAME "$@";;
  uncordon) exec $IN $KC uncordon $NAME;;
  *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2;;
esac
