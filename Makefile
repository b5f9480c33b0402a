# ovserve: the two commands a newcomer needs are `make demo` and `make test` (README.md).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
export OVSERVE_CLUSTER_DIR ?= /tmp/ovserve-cluster
export OVSERVE_NETNS ?= ovserve

.PHONY: demo test down lint unit deps binaries venv models image up status crds
demo: deps binaries venv models up image  ## cluster + operator (Helm) + a sample LLMServing, then print its status
	hack/demo.sh

test: deps binaries venv lint models  ## every test tier: unit, runtime, cluster, operator, chart, autoscaling
	$(VENV)/bin/pytest -ra $(PYTEST_ARGS)

unit: venv  ## the tests that need neither the cluster nor the models
	$(VENV)/bin/pytest -ra tests/unit $(PYTEST_ARGS)

down:  ## stop the local cluster and every process it started
	hack/cluster.sh down

lint: venv
	$(VENV)/bin/ruff check .

deps:
	hack/install-deps.sh

binaries:
	hack/build-binaries.sh
	hack/deviceplugin/build.sh
	hack/build-addons.sh

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints.txt -e '.[runtime,operator,dev]'
	touch $@

models:
	hack/models/build.sh
	hack/models/chat/build.sh

up:
	hack/cluster.sh up

status:
	hack/cluster.sh status

image: up
	hack/images.sh all

crds: venv  ## regenerate crds/ (and the chart's copy) from the typed spec
	$(VENV)/bin/python -m ovserve_operator.crd
	cp crds/ovserve.dev_llmservings.yaml charts/ovserve/crds/

-include hack/kind.mk
