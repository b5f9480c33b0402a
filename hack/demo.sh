#!/usr/bin/env bash
# `make demo`: the local cluster, the operator installed by its Helm chart, and two LLMServings on tiny
# models: one that runs continuous batching, one that falls back to the legacy pipeline (its IR has no
# ScaledDotProductAttention op). Prints `kubectl get llmserving` and answers a chat completion.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/.." && pwd)
. "$here/versions.env"
K() { "$here/cluster.sh" kubectl "$@"; }
H() { "$here/cluster.sh" exec "$BIN_DIR/helm" "$@"; }
log() { printf '[demo %s] %s\n' "$(date +%T)" "$*" >&2; }

# KEDA and Prometheus are no part of the demo (`make autoscaling` adds them); up leaves them as they are
OVSERVE_AUTOSCALING=${OVSERVE_AUTOSCALING:-off} "$here/cluster.sh" up
"$here/images.sh" all >/dev/null
for ns in ovserve-system demo; do
  K create namespace "$ns" --dry-run=client -o yaml | K apply -f - >/dev/null
  K label namespace "$ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
done
log "installing the operator (helm upgrade --install ovserve charts/ovserve)"
H upgrade --install ovserve "$root/charts/ovserve" -n ovserve-system \
  --set image.repository=localhost/ovserve --set image.tag=dev --set image.pullPolicy=IfNotPresent \
  --set "watchNamespaces={demo}" --set-string "podAnnotations.ovserve\.dev/image-input=$("$here/images.sh" key)" \
  --wait --timeout 5m   # the annotation rolls the operator when the dev image was rebuilt under the same tag

# The restricted Pod Security level forbids hostPath volumes in pods: the models reach the pods through a
# local PersistentVolume instead, as a platform team would provide them.
K apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: ovserve-demo-models}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ovserve-demo
  hostPath: {path: $OVSERVE_MODELS, type: Directory}
  claimRef: {namespace: demo, name: models}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: models, namespace: demo}
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ovserve-demo
  resources: {requests: {storage: 1Gi}}
  volumeName: ovserve-demo-models
EOF
for name in tiny-llm tiny-llm-nosdpa; do
  K apply -n demo -f - >/dev/null <<EOF
apiVersion: ovserve.dev/v1alpha1
kind: LLMServing
metadata: {name: $name}
spec:
  model: {pvc: {claimName: models, path: $name}}
  pipelineType: AUTO
EOF
done
log "waiting for both LLMServings to be Ready"
for _ in $(seq 150); do
  phases=$(K get llmserving -n demo -o jsonpath='{range .items[*]}{.status.phase}{" "}{end}')
  [ "$phases" = "Ready Ready " ] && break; sleep 2
done
K get llmserving -n demo
ip=$(K get service tiny-llm -n demo -o jsonpath='{.spec.clusterIP}')
log "POST http://$ip:8000/v3/chat/completions (inside the cluster network)"
"$here/cluster.sh" exec curl -sS --retry 10 --retry-connrefused --retry-delay 2 "http://$ip:8000/v3/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-llm","messages":[{"role":"user","content":"hello"}],"max_tokens":8}'
echo
log "explore: hack/cluster.sh kubectl get llms -A; hack/cluster.sh kubectl describe llms -n demo; stop: make down"
