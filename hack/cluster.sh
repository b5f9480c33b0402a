#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, without Docker: etcd, kube-apiserver (TLS, Node+RBAC),
# controller-manager, scheduler, containerd + runc + CNI bridge, kubelet and kube-proxy, all inside a private
# network namespace so pod and service addresses never leave the machine. Recipe and traps:
# ../shared/reference/real-cluster/README.md (each trap's fix is marked "trap:" below).
#
#   hack/cluster.sh up          start (idempotent: a healthy cluster is left alone; a broken one is restarted)
#   hack/cluster.sh down        stop everything, unmount, remove our network namespaces (etcd data is kept)
#   hack/cluster.sh reset       down, then delete all state (next up starts from an empty etcd)
#   hack/cluster.sh status      component pids and node readiness (exit 1 when not healthy)
#   hack/cluster.sh kubectl ... kubectl as cluster-admin, inside the namespace
#   hack/cluster.sh exec CMD    run CMD inside the namespace with KUBECONFIG and $BIN_DIR on PATH
#   hack/cluster.sh logs [C]    list component logs, or print the tail of one (etcd, apiserver, kubelet ...)
#   hack/cluster.sh gpu on [N] | off | status   the fake Intel GPU device plugin (N fake gpu.intel.com/i915)
#   hack/cluster.sh autoscaling on | off | status   Prometheus (scrapes runtime pods) and KEDA (operator +
#                               metrics API server registered as v1beta1.external.metrics.k8s.io)
#   hack/cluster.sh node2 up | down | status | stop-kubelet | start-kubelet | kill | partition | heal | drain ...
#                               a second real node, tainted ovserve.dev/test-node2=true:NoSchedule (hack/node2.sh)
#   hack/cluster.sh apiserver stop | start | outage SECONDS   kill the kube-apiserver (SIGKILL), start it again,
#                               or both with SECONDS between (node-fault tests; holds the lock: `up` waits meanwhile)
# Environment: OVSERVE_CLUSTER_DIR (state, default /tmp/ovserve-cluster), OVSERVE_NETNS (default ovserve),
# OVSERVE_FAKE_GPUS (devices the plugin advertises at `up`, default 2; 0 = plugin off),
# OVSERVE_AUTOSCALING (auto|on|off at `up`, default auto: on when hack/build-addons.sh has built them),
# OVSERVE_NODES (1 or 2 at `up`, default 1: 2 starts node2 too).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
ST=${OVSERVE_CLUSTER_DIR:-/tmp/ovserve-cluster}
NS=${OVSERVE_NETNS:-ovserve}
IP=10.245.0.1
P=$ST/pki; L=$ST/logs
IN="nsenter --net=/var/run/netns/$NS"   # trap: not `ip netns exec`, it remounts /sys and kubelet loses cgroups
KC="$BIN_DIR/kubectl --kubeconfig $P/admin.kubeconfig"
COMPONENTS="etcd apiserver controller-manager scheduler containerd kubelet kube-proxy"
ADDONS="prometheus keda-operator keda-adapter"   # optional: `autoscaling on|off`
log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*" >&2; }

need_binaries() {
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -x "$BIN_DIR/$b" ] || { log "missing $BIN_DIR/$b: run hack/build-binaries.sh (or make binaries)"; exit 1; }
  done
  for b in containerd runc nsenter ip iptables openssl; do
    command -v $b >/dev/null || { log "missing $b: run hack/install-deps.sh"; exit 1; }
  done
}

pki() {
  [ -f "$P/admin.kubeconfig" ] && return
  log "creating PKI in $P"
  mkdir -p "$P"; (
  cd "$P"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj /CN=ovserve-test-ca 2>/dev/null
  sign() { # name CN O SANs
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2${3:+/O=$3}" 2>/dev/null
    printf "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s" \
      "${4:+subjectAltName=$4
}" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null; }
  sign apiserver kube-apiserver "" "IP:$IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  sign admin admin system:masters
  sign kubelet-client kube-apiserver-kubelet-client system:masters
  sign node system:node:node1 system:nodes "IP:$IP,DNS:node1"
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  for u in admin node; do cat > $u.kubeconfig <<K
apiVersion: v1
kind: Config
clusters: [{name: ovserve, cluster: {server: "https://$IP:6443", certificate-authority: $P/ca.crt}}]
users: [{name: $u, user: {client-certificate: $P/$u.crt, client-key: $P/$u.key}}]
contexts: [{name: ovserve, context: {cluster: ovserve, user: $u}}]
current-context: ovserve
K
  done
  chmod 600 ./*.key )
}

# Client certificates for the add-ons' users, signed by the cluster CA, and their kubeconfigs.
client_identity() { # user
  [ -f "$P/$1.kubeconfig" ] && return
  ( cd "$P"
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
    printf "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null
    chmod 600 "$1.key" )
  cat > "$P/$1.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: ovserve, cluster: {server: "https://$IP:6443", certificate-authority: $P/ca.crt}}]
users: [{name: $1, user: {client-certificate: $P/$1.crt, client-key: $P/$1.key}}]
contexts: [{name: ovserve, context: {cluster: ovserve, user: $1}}]
current-context: ovserve
K
}

# Aggregation layer: the apiserver authenticates to extension API servers (KEDA's metrics API server) with a
# front-proxy client certificate. Apart from pki() so that clusters created before this get it too.
pki_aggregation() {
  [ -f "$P/front-proxy-client.crt" ] && return
  ( cd "$P"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650 \
      -subj /CN=ovserve-front-proxy-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr -subj /CN=front-proxy-client 2>/dev/null
    printf "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n" > front-proxy-client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
      -out front-proxy-client.crt -days 3650 -extfile front-proxy-client.ext 2>/dev/null
    chmod 600 ./*.key )
}

# KEDA's own CA and one serving+client certificate for its gRPC metrics service (mutual TLS between operator
# and metrics API server) and the metrics API server's HTTPS port (the APIService's caBundle).
pki_keda() {
  [ -f "$P/keda/tls.crt" ] && return
  mkdir -p "$P/keda"; ( cd "$P/keda"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj /CN=ovserve-keda-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=keda-operator.keda.svc 2>/dev/null
    printf "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n" \
      "IP:$IP,DNS:localhost,DNS:keda-operator.keda.svc,DNS:keda-metrics-apiserver.keda.svc" > tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 3650 -extfile tls.ext 2>/dev/null
    chmod 600 ./*.key )
}

alive() { [ -f "$ST/$1.pid" ] && kill -0 "$(cat "$ST/$1.pid")" 2>/dev/null; }
# Daemons must not inherit the lock (fd 9), or the next up/down would wait for them forever.
start() { local n=$1; shift; alive "$n" && return; $IN "$@" >> "$L/$n.log" 2>&1 9>&- & echo $! > "$ST/$n.pid"; }
lock() { exec 9>"$ST.lock"; flock -w 900 9 || { log "another hack/cluster.sh holds $ST.lock"; exit 1; }; }
wait_until() { # seconds what cmd...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out after ${t}s waiting for $what; last lines of the logs:"; tail -n 20 "$L"/*.log >&2; return 1
}
node_ready() { $IN $KC get node node1 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; }
healthy() { for c in $COMPONENTS; do alive $c || return 1; done; node_ready; }

write_configs() {
  mkdir -p "$ST/cni"
  cat > "$ST/cni/10-pods.conflist" <<C
{"cniVersion":"0.4.0","name":"ovserve-pods","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","dataDir":"$ST/cni-ipam","ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
C
  cat > "$ST/containerd.toml" <<C
version = 2
root = "$ST/containerd"
state = "$ST/containerd-state"
[grpc]
  address = "$ST/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"    # no registry: built by hack/images.sh pause
  restrict_oom_score_adj = true          # trap: this sandbox forbids negative oom_score_adj (runc fails)
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ST/cni"
C
  cat > "$ST/kubelet.yaml" <<C
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $P/ca.crt}}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$ST/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false          # trap: cgroup v1 host; kubelet 1.35+ refuses it by default
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
tlsCertFile: $P/node.crt
tlsPrivateKeyFile: $P/node.key
address: $IP
readOnlyPort: 0
serializeImagePulls: false
podLogsDir: $ST/pod-logs       # not /var/log/pods: a second cluster on this machine must not share it
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
C
}

start_apiserver() {
  start apiserver "$BIN_DIR/kube-apiserver" --etcd-servers http://127.0.0.1:2379 --bind-address $IP --advertise-address $IP \
    --secure-port 6443 --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" --client-ca-file "$P/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$P/sa.pub" \
    --service-account-signing-key-file "$P/sa.key" --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction --kubelet-client-certificate "$P/kubelet-client.crt" \
    --kubelet-client-key "$P/kubelet-client.key" --kubelet-preferred-address-types InternalIP \
    --requestheader-client-ca-file "$P/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- --proxy-client-cert-file "$P/front-proxy-client.crt" \
    --proxy-client-key-file "$P/front-proxy-client.key" --enable-aggregator-routing=true
    # trap: no DNS for node1 (InternalIP above); aggregator routing: extension API servers by endpoint, not ClusterIP
  wait_until 90 kube-apiserver $IN $KC get --raw /readyz
}

up() {
  need_binaries
  mkdir -p "$ST" "$L"
  lock                                # concurrent `up`s (parallel test sessions) wait for each other
  if [ -e "/var/run/netns/$NS" ] && healthy; then log "already up ($ST, netns $NS)"; gpu_default; autoscaling_default; node2_default; return; fi
  if [ -e "/var/run/netns/$NS" ]; then log "found a partial cluster: restarting it"; stop_all; fi
  local t0=$SECONDS
  [ -e "/var/run/netns/$NS" ] || { ip netns add "$NS"; $IN ip link set lo up; }
  # trap: no dummy module, and kubelet refuses a loopback node IP: the node address lives on lo
  $IN ip addr show lo | grep -q "$IP/" || $IN ip addr add $IP/32 dev lo
  # trap: the node itself reaches ClusterIPs only with a route for the service range
  $IN ip route show | grep -q '^10.96.0.0/16' || $IN ip route add 10.96.0.0/16 dev lo
  pki; pki_aggregation; write_configs
  start etcd "$BIN_DIR/etcd" --data-dir "$ST/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --log-level warn
  wait_until 30 etcd $IN curl -sf http://127.0.0.1:2379/health
  start_apiserver
  start controller-manager "$BIN_DIR/kube-controller-manager" --kubeconfig "$P/admin.kubeconfig" \
    --authentication-kubeconfig "$P/admin.kubeconfig" --authorization-kubeconfig "$P/admin.kubeconfig" --bind-address 127.0.0.1 \
    --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" --use-service-account-credentials \
    --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" --leader-elect=false \
    --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle'
  start scheduler "$BIN_DIR/kube-scheduler" --kubeconfig "$P/admin.kubeconfig" --authentication-kubeconfig "$P/admin.kubeconfig" \
    --authorization-kubeconfig "$P/admin.kubeconfig" --bind-address 127.0.0.1 --leader-elect=false
  start containerd containerd --config "$ST/containerd.toml"
  wait_until 30 containerd ctr -a "$ST/containerd.sock" version
  "$here/images.sh" pause
  start kubelet "$BIN_DIR/kubelet" --config "$ST/kubelet.yaml" --kubeconfig "$P/node.kubeconfig" --hostname-override node1 \
    --node-ip $IP --root-dir "$ST/kubelet"
  # trap: conntrack sysctls are read-only here
  start kube-proxy "$BIN_DIR/kube-proxy" --kubeconfig "$P/admin.kubeconfig" --hostname-override node1 --proxy-mode iptables \
    --cluster-cidr 10.244.0.0/16 --conntrack-max-per-core 0 --metrics-bind-address 127.0.0.1:10249 \
    --healthz-bind-address 127.0.0.1:10256
  wait_until 120 "node Ready" node_ready
  # The default ServiceAccount appears asynchronously; pods created before it are refused.
  wait_until 60 "default ServiceAccount" $IN $KC get serviceaccount default -n default
  cp "$P/admin.kubeconfig" "$ST/kubeconfig"
  gpu_default
  autoscaling_default
  log "up in $((SECONDS - t0))s: KUBECONFIG=$ST/kubeconfig, enter with: hack/cluster.sh exec bash"
  node2_default
}
node2_default() { if [ "${OVSERVE_NODES:-1}" = 2 ]; then "$here/node2.sh" up 9>&-; fi; }

# Pod network namespaces hold at least their pause process while alive: one without any process is a leftover.
rm_orphan_netns() {
  local live=" " l; for f in /proc/[0-9]*/ns/net; do l=$(readlink "$f" 2>/dev/null || true); live+="${l//[^0-9]/} "; done
  for n in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
    case "$live" in *" $(stat -c %i "/var/run/netns/$n" 2>/dev/null || true) "*) ;; *) ip netns del "$n" 2>/dev/null || true;; esac
  done
}

stop_all() {
  for n in keda-adapter keda-operator prometheus gpu-plugin kube-proxy kubelet scheduler controller-manager apiserver etcd containerd; do
    [ -f "$ST/$n.pid" ] || continue; pid=$(cat "$ST/$n.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done   # trap: apiserver drains for seconds
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$ST/$n.pid"
  done
  # Our pods' shims (and the containers under them), identified by our containerd socket.
  local shims; shims=$(pgrep -f "containerd-shim-runc-v2 .*-address $ST/containerd.sock" || true)
  for s in $shims; do pkill -9 -P "$s" 2>/dev/null || true; kill -9 "$s" 2>/dev/null || true; done
  sleep 0.3
  # not node2's (hack/node2.sh): its containers run on through a restart of node1 and the control plane
  { grep " $ST/" /proc/mounts | grep -v " $ST/node2/" || true; } | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm_orphan_netns
}

down() {
  [ -d "$ST" ] || { ip netns del "$NS" 2>/dev/null || true; log "nothing to stop"; return; }
  # node2 first, while the apiserver still answers (its Node object is deleted); it lives on this namespace's link
  if [ -d "$ST/node2" ] || [ -e "/var/run/netns/$NS-node2" ]; then "$here/node2.sh" down || log "node2 down failed: the rest stops anyway"; fi
  lock
  stop_all
  ip netns del "$NS" 2>/dev/null || true
  log "down (state kept in $ST; 'reset' deletes it)"
}

status() {
  local rc=0
  for c in $COMPONENTS gpu-plugin $ADDONS; do
    if alive $c; then printf '%-20s running (pid %s)\n' "$c" "$(cat "$ST/$c.pid")"
    else printf '%-20s stopped\n' "$c"; case " gpu-plugin $ADDONS " in *" $c "*) ;; *) rc=1;; esac; fi
  done
  if [ -e "/var/run/netns/$NS" ] && node_ready; then echo "node1                Ready"; else echo "node1                not ready"; rc=1; fi
  # node2 only when it was started (hack/node2.sh); it does not change the exit code
  if [ -e "/var/run/netns/$NS-node2" ]; then "$here/node2.sh" status | tail -n 1 || true; fi
  return $rc
}

gpu() {
  case ${1:-status} in
    on)
      local n=${2:-2}
      gpu off >/dev/null   # through off: a plugin replaced in place leaves kubelet allocating stale, unhealthy devices
      [ -x "$OVSERVE_CACHE/bin/fake-gpu-plugin" ] && [ "$OVSERVE_CACHE/bin/fake-gpu-plugin" -nt "$here/deviceplugin/main.go" ] \
        || "$here/deviceplugin/build.sh"
      start gpu-plugin "$OVSERVE_CACHE/bin/fake-gpu-plugin" --devices "$n" --resource gpu.intel.com/i915 \
        --registry-dir "$ST/kubelet/plugins_registry"
      $IN $KC label node node1 --overwrite intel.feature.node.kubernetes.io/gpu=true >/dev/null
      wait_until 30 "gpu.intel.com/i915 allocatable" sh -c \
        "$IN $KC get node node1 -o jsonpath='{.status.allocatable.gpu\\.intel\\.com/i915}' | grep -qx $n"
      log "fake GPU plugin on: $n x gpu.intel.com/i915";;
    off)
      if alive gpu-plugin; then kill "$(cat "$ST/gpu-plugin.pid")"; fi; rm -f "$ST/gpu-plugin.pid"
      $IN $KC label node node1 intel.feature.node.kubernetes.io/gpu- >/dev/null 2>&1 || true
      # kubelet zeroes allocatable as soon as the plugin's socket goes away
      wait_until 30 "gpu.intel.com/i915 allocatable 0" sh -c \
        "v=\$($IN $KC get node node1 -o jsonpath='{.status.allocatable.gpu\\.intel\\.com/i915}'); [ -z \"\$v\" ] || [ \"\$v\" = 0 ]"
      log "fake GPU plugin off";;
    status) alive gpu-plugin && echo on || echo off;;
    *) echo "usage: $0 gpu on [N] | off | status" >&2; exit 2;;
  esac
}
gpu_default() { local n=${OVSERVE_FAKE_GPUS:-2}; if [ "$n" -gt 0 ] && ! alive gpu-plugin; then gpu on "$n"; fi; }

# ---------------------------------------------------------------------------------------- autoscaling
PROM_PORT=9090; KEDA_GRPC_PORT=9666; KEDA_API_PORT=6444
autoscaling_ready() { [ -x "$PROM_BIN_DIR/prometheus" ] && [ -x "$KEDA_BIN_DIR/keda-operator" ] && [ -x "$KEDA_BIN_DIR/keda-adapter" ]; }

write_prometheus_config() {
  # Runtime pods found by Kubernetes service discovery (role pod), scraped on their `http` port. The
  # LLMServing's name becomes the label ovserve_dev_llmserving, as a PodMonitor's podTargetLabels names it.
  cat > "$ST/prometheus.yml" <<C
global: {scrape_interval: 5s, scrape_timeout: 4s, evaluation_interval: 5s}
scrape_configs:
- job_name: ovserve-runtime
  kubernetes_sd_configs: [{role: pod, kubeconfig_file: $P/ovserve-prometheus.kubeconfig}]
  relabel_configs:
  - {action: keep, source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_managed_by, __meta_kubernetes_pod_label_app_kubernetes_io_component], regex: ovserve-operator;runtime}
  - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: http}
  - {action: keep, source_labels: [__meta_kubernetes_pod_phase], regex: Running}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {source_labels: [__meta_kubernetes_pod_label_ovserve_dev_llmserving], target_label: ovserve_dev_llmserving}
# Processes of this network namespace that are no pods: the routing tests' local endpoint pickers (scale to
# zero: their held-request gauge activates KEDA). A test writes one JSON file per picker here, with the
# namespace label of its pool.
- job_name: ovserve-gateway
  file_sd_configs: [{files: ["$ST/prometheus-targets/*.json"], refresh_interval: 5s}]
C
  mkdir -p "$ST/prometheus-targets"
}

# The metrics API server runs on the node address: a selector-less Service whose endpoint is that address.
apiservice_manifest() {
  cat <<M
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec: {ports: [{name: https, port: 443, targetPort: $KEDA_API_PORT}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: keda-metrics-apiserver-node
  namespace: keda
  labels: {kubernetes.io/service-name: keda-metrics-apiserver, endpointslice.kubernetes.io/managed-by: ovserve-hack}
addressType: IPv4
ports: [{name: https, port: $KEDA_API_PORT, protocol: TCP}]
endpoints: [{addresses: ["$IP"], conditions: {ready: true}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: $(base64 -w0 < "$P/keda/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
M
}

autoscaling() {
  case ${1:-status} in
    on)
      autoscaling_ready || { log "autoscaling needs Prometheus and KEDA: run hack/build-addons.sh (make addons)"; exit 1; }
      alive apiserver || { log "cluster not up"; exit 1; }
      if ! grep -q -- --proxy-client-cert-file "/proc/$(cat "$ST/apiserver.pid")/cmdline" 2>/dev/null; then
        # a cluster started by an older hack/: restart only the apiserver, now with the aggregation layer
        log "restarting the apiserver with the aggregation layer (front-proxy certificates)"
        pki_aggregation; kill "$(cat "$ST/apiserver.pid")"
        for _ in $(seq 150); do alive apiserver || break; sleep 0.1; done
        kill -9 "$(cat "$ST/apiserver.pid")" 2>/dev/null || true
        rm -f "$ST/apiserver.pid"; start_apiserver
      fi
      pki_keda; client_identity keda-operator; client_identity ovserve-prometheus
      # trap: KEDA's CRDs are large: client-side apply would overflow the last-applied annotation
      $IN $KC apply --server-side --force-conflicts -f "$here/autoscaling/rbac.yaml" >/dev/null   # namespace keda first
      $IN $KC apply --server-side --force-conflicts -f "$KEDA_BIN_DIR/crds" -f "$KEDA_BIN_DIR/rbac" >/dev/null
      apiservice_manifest | $IN $KC apply --server-side --force-conflicts -f - >/dev/null
      $IN $KC wait --for condition=Established crd/scaledobjects.keda.sh --timeout=60s >/dev/null
      write_prometheus_config
      # a running Prometheus (an earlier `on`) reads the config again
      if alive prometheus; then kill -HUP "$(cat "$ST/prometheus.pid")"; fi
      mkdir -p "$ST/prometheus"
      start prometheus "$PROM_BIN_DIR/prometheus" --config.file "$ST/prometheus.yml" --storage.tsdb.path "$ST/prometheus" \
        --storage.tsdb.retention.time 6h --web.listen-address "$IP:$PROM_PORT" --log.level warn
      local kenv=(env KUBECONFIG="$P/keda-operator.kubeconfig" POD_NAMESPACE=keda WATCH_NAMESPACE= KEDA_CLUSTER_OBJECT_NAMESPACE=keda)
      start keda-operator "${kenv[@]}" "$KEDA_BIN_DIR/keda-operator" --leader-elect=false --zap-log-level=info \
        --zap-encoder=console --metrics-bind-address 127.0.0.1:9023 --health-probe-bind-address 127.0.0.1:9024 \
        --metrics-service-bind-address "$IP:$KEDA_GRPC_PORT" --cert-dir "$P/keda" --enable-cert-rotation=false \
        --ca-dir "$P/keda"
      start keda-adapter "${kenv[@]}" "$KEDA_BIN_DIR/keda-adapter" --secure-port $KEDA_API_PORT --bind-address "$IP" \
        --tls-cert-file "$P/keda/tls.crt" --tls-private-key-file "$P/keda/tls.key" --cert-dir "$P/keda" \
        --authentication-kubeconfig "$P/keda-operator.kubeconfig" --authorization-kubeconfig "$P/keda-operator.kubeconfig" \
        --lister-kubeconfig "$P/keda-operator.kubeconfig" --metrics-service-address "$IP:$KEDA_GRPC_PORT" \
        --port 9022 --zap-log-level=info
      wait_until 60 prometheus $IN curl -sf "http://$IP:$PROM_PORT/-/ready"
      wait_until 120 "KEDA's external metrics API" $IN $KC get --raw /apis/external.metrics.k8s.io/v1beta1
      log "autoscaling on: Prometheus $PROM_VERSION http://$IP:$PROM_PORT, KEDA $KEDA_VERSION (external metrics API available)";;
    off)
      # An APIService without its server makes every discovery call complain: remove it first.
      $IN $KC delete apiservice v1beta1.external.metrics.k8s.io --ignore-not-found >/dev/null 2>&1 || true
      for n in keda-adapter keda-operator prometheus; do
        if alive $n; then kill "$(cat "$ST/$n.pid")"; fi; rm -f "$ST/$n.pid"
      done
      log "autoscaling off";;
    status) local rc=0; for n in $ADDONS; do alive $n || rc=1; done; [ $rc = 0 ] && echo on || echo off; return $rc;;
    *) echo "usage: $0 autoscaling on | off | status" >&2; exit 2;;
  esac
}
autoscaling_default() {
  case ${OVSERVE_AUTOSCALING:-auto} in
    off) ;;
    on) autoscaling on;;
    *) if autoscaling_ready; then autoscaling on; else log "autoscaling add-ons not built: skipped (hack/build-addons.sh, make addons)"; fi;;
  esac
}

# The issue-44 control-plane outage: the apiserver killed (no drain, as a crash or a lost machine), then started.
apiserver() {
  case ${1:-} in
    stop)
      lock
      if alive apiserver; then kill -9 "$(cat "$ST/apiserver.pid")"; for _ in $(seq 100); do alive apiserver || break; sleep 0.1; done; fi
      rm -f "$ST/apiserver.pid"; log "kube-apiserver stopped";;
    start) lock; start_apiserver; log "kube-apiserver started";;
    outage)
      local s=${2:?usage: $0 apiserver outage SECONDS}
      lock                              # a concurrent `up` would take the stopped apiserver for a broken cluster
      alive apiserver || { log "kube-apiserver not running"; exit 1; }
      local t0=$SECONDS
      kill -9 "$(cat "$ST/apiserver.pid")"; for _ in $(seq 100); do alive apiserver || break; sleep 0.1; done
      rm -f "$ST/apiserver.pid"; log "kube-apiserver stopped for ${s}s"
      sleep "$s"
      local t1=$SECONDS; start_apiserver
      log "kube-apiserver ready again after $((SECONDS - t0))s (start to /readyz $((SECONDS - t1))s)";;
    *) echo "usage: $0 apiserver stop | start | outage SECONDS" >&2; exit 2;;
  esac
}

case ${1:-} in
  up) up;;
  down) down;;
  reset) down; rm -rf "$ST" "$ST.lock"; log "state deleted";;
  status) status;;
  kubectl) shift; exec $IN $KC "$@";;
  exec) shift; export KUBECONFIG=$P/admin.kubeconfig PATH=$BIN_DIR:$PATH; exec $IN "$@";;
  logs) if [ -n "${2:-}" ]; then tail -n "${TAIL:-100}" "$L/$2.log"; else ls "$L"; fi;;
  gpu) shift; gpu "$@";;
  autoscaling) shift; autoscaling "$@";;
  node2) shift; exec "$here/node2.sh" "$@";;
  apiserver) shift; apiserver "$@";;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2;;
esac
