# ovserve: the two commands a newcomer needs are `make demo` and `make test` (README.md: what each one builds
# and how long it takes cold). Everything built is cached outside git, so a second run only rebuilds what changed.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
export OVSERVE_CLUSTER_DIR ?= /tmp/ovserve-cluster
export OVSERVE_NETNS ?= ovserve

.PHONY: demo test down lint unit deps binaries addons autoscaling venv models demo-models images image up status crds \
	kwok scale-bench routing
# The demo builds only what it shows: the control plane and helm, two tiny models and the images; not the
# Python venv (the tests' and benchmarks'), nor KEDA and Prometheus (`make autoscaling`). The three build
# in parallel: the Go builds keep the CPU busy while the others mostly download (the exporter venv, the
# Debian base and the image's wheels).
demo: deps  ## cluster + operator (Helm) + two LLMServings on tiny models + a chat completion (9 min measured cold)
	$(MAKE) --no-print-directory -j3 binaries demo-models images
	hack/demo.sh

test: deps binaries addons routing venv lint models  ## every test tier: unit, runtime, cluster, operator, chart, autoscaling, routing
	$(VENV)/bin/pytest -ra $(PYTEST_ARGS)

unit: venv  ## the tests that need neither the cluster nor the models
	$(VENV)/bin/pytest -ra tests/unit $(PYTEST_ARGS)

down:  ## stop the local cluster and every process it started
	hack/cluster.sh down

lint: venv
	$(VENV)/bin/ruff check .

deps:
	hack/install-deps.sh

binaries:  ## the control plane, etcd, helm and the fake GPU device plugin (~9 min cold)
	hack/build-binaries.sh
	hack/deviceplugin/build.sh

addons:  ## KEDA and Prometheus, for autoscaling (~12 min cold; make test and tests/autoscaling need them)
	hack/build-addons.sh

routing:  ## the routing gateway's parts: GIE's endpoint picker v1.5.0 and InferencePool CRD, Envoy 1.40 (~2.5 min cold; docs/routing.md)
	hack/build-routing.sh

kwok:  ## kwok, simulated nodes for the operator's scale benchmark only (~2-5 min cold; optional)
	hack/build-kwok.sh

# The operator at N LLMServings on 120 simulated nodes of a bench-only control plane (hack/scale/cluster.sh, its
# own network namespace; never the shared cluster): docs/operator.md "Scale". N=1000 took ~9 min here.
N ?= 1000
scale-bench: binaries kwok venv  ## the operator scale benchmark: make scale-bench N=1000 [SCALE_ARGS=...]
	$(VENV)/bin/python benchmarks/operator_bench.py --scale $(N) $(SCALE_ARGS)

autoscaling: addons up  ## KEDA and Prometheus running on the local cluster (docs/autoscaling.md)
	hack/cluster.sh autoscaling on

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints.txt -e '.[runtime,operator,dev]'
	touch $@

models:  ## every tiny test model (~3 min cold, most of it the exporter venv)
	hack/models/build.sh
	hack/models/chat/build.sh
	hack/models/encoders/build.sh
	hack/models/whisper/build.sh

demo-models:  ## the two models the demo serves
	hack/models/build.sh tiny-llm tiny-llm-nosdpa

up:
	hack/cluster.sh up

status:
	hack/cluster.sh status

# A second real node (hack/node2.sh), tainted ovserve.dev/test-node2=true:NoSchedule: only pods that tolerate it
# land there. Nothing starts it by default; `make down` stops it with the cluster.
.PHONY: node2 node2-down
node2: up  ## the second node, for node-fault and spreading tests (README: Two-node cluster)
	hack/cluster.sh node2 up

node2-down:
	hack/cluster.sh node2 down

images:  ## the pause and project images (~3 min cold); imported into the node when the cluster runs
	hack/images.sh all

image: up
	hack/images.sh all

crds: venv  ## regenerate crds/ (and the chart's copy) from the typed spec
	$(VENV)/bin/python -m ovserve_operator.crd
	cp crds/ovserve.dev_llmservings.yaml charts/ovserve/crds/

-include hack/kind.mk
