# ovserve on kind, for users with Docker (included by the Makefile; also `make -f hack/kind.mk kind`).
# Not run by the project's tests (no Docker here): tests/chart/test_chart_static.py only checks that every
# target expands. The local no-Docker cluster of hack/cluster.sh is what the tests use.
#
#   make kind            kind-up + kind-load + kind-install + kind-examples, then waits and shows the LLMServings
#   make kind-up         a one-node kind cluster; $(KIND_MODELS) on the host is the node's /var/cache/ovserve/models
#   make kind-load       docker build the image and load it into the kind node (no registry needed)
#   make kind-install    helm install the chart (operator in $(KIND_NAMESPACE), watching the whole cluster)
#   make kind-examples   apply the CPU examples (tiny-llm by hostPath) and wait until Ready
#   make kind-down       delete the kind cluster
#
# Models: put an OpenVINO IR directory at $(KIND_MODELS)/tiny-llm (hack/models/build.sh writes one, or copy
# any small exported model there) before `make kind-up`: kind mounts host directories only at creation.

KIND           ?= kind
DOCKER         ?= docker
KUBECTL        ?= kubectl
HELM           ?= helm
KIND_CLUSTER   ?= ovserve
KIND_IMAGE_REPO ?= localhost/ovserve
KIND_IMAGE_TAG ?= dev
KIND_IMAGE      = $(KIND_IMAGE_REPO):$(KIND_IMAGE_TAG)
KIND_NAMESPACE ?= ovserve-system
KIND_MODELS    ?= /var/cache/ovserve/models
KIND_NODE_IMAGE ?=
KIND_EXAMPLES  ?= examples/cpu-auto.yaml examples/pinned-lm-cb.yaml
KIND_WAIT      ?= 600s
KIND_CTX        = --context kind-$(KIND_CLUSTER)

.PHONY: kind kind-up kind-load kind-install kind-examples kind-down

kind: kind-up kind-load kind-install kind-examples
	$(KUBECTL) $(KIND_CTX) get llmserving -A

kind-up:
	printf '%s\n' 'kind: Cluster' 'apiVersion: kind.x-k8s.io/v1alpha4' 'nodes:' '- role: control-plane' \
	  '  extraMounts:' '  - hostPath: $(KIND_MODELS)' '    containerPath: /var/cache/ovserve/models' '    readOnly: true' \
	  | $(KIND) create cluster --name $(KIND_CLUSTER) $(if $(KIND_NODE_IMAGE),--image $(KIND_NODE_IMAGE)) --wait 120s --config -

kind-load:
	$(DOCKER) build -t $(KIND_IMAGE) .
	$(KIND) load docker-image --name $(KIND_CLUSTER) $(KIND_IMAGE)

kind-install:
	$(KUBECTL) $(KIND_CTX) create namespace $(KIND_NAMESPACE) --dry-run=client -o yaml \
	  | $(KUBECTL) $(KIND_CTX) label --local -f - -o yaml pod-security.kubernetes.io/enforce=restricted \
	  | $(KUBECTL) $(KIND_CTX) apply -f -
	$(HELM) upgrade --install ovserve charts/ovserve --kube-context kind-$(KIND_CLUSTER) \
	  --namespace $(KIND_NAMESPACE) --set image.repository=$(KIND_IMAGE_REPO) --set image.tag=$(KIND_IMAGE_TAG) \
	  --wait --timeout 300s

# hostPath models: the default namespace has no Pod Security label (a restricted namespace refuses
# hostPath volumes; use a PVC there, examples/pvc.yaml).
kind-examples:
	$(KUBECTL) $(KIND_CTX) apply $(addprefix -f ,$(KIND_EXAMPLES))
	$(KUBECTL) $(KIND_CTX) wait llmserving --all --for=jsonpath='{.status.phase}'=Ready --timeout $(KIND_WAIT)

kind-down:
	$(KIND) delete cluster --name $(KIND_CLUSTER)
