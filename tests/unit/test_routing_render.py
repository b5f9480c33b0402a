"""Table-driven tests of the routing children (operator/ovserve_operator/routing.py, issue 39): the InferencePool,
the endpoint picker's Deployment, Service, ConfigMap and least-privilege RBAC, and the `openvino` engine config that
maps the runtime's own metric names."""

from __future__ import annotations

import json

import pytest
from ovserve_operator import routing
from ovserve_runtime import metrics

OWNER_REF = {
    "apiVersion": "ovserve.dev/v1alpha1",
    "kind": "LLMServing",
    "name": "chat",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}
OWNER = routing.Owner(
    name="chat",
    namespace="team-a",
    labels={"app.kubernetes.io/instance": "chat", "ovserve.dev/llmserving": "chat"},
    owner_reference=OWNER_REF,
)
SELECTOR = {"ovserve.dev/llmserving": "chat", "app.kubernetes.io/component": "runtime"}


def children(params: routing.RoutingParams | None = None) -> dict[str, dict]:
    out = routing.render_routing(OWNER, SELECTOR, params or routing.RoutingParams())
    return {o["kind"]: o for o in out}


@pytest.mark.parametrize(
    ("params", "kinds"),
    [
        pytest.param(
            routing.RoutingParams(),
            ["InferencePool", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"],
            id="pool-and-picker",
        ),
        pytest.param(routing.RoutingParams(picker=False), ["InferencePool"], id="pool-for-a-platform-picker"),
    ],
)
def test_children_by_params(params, kinds):
    out = routing.render_routing(OWNER, SELECTOR, params)
    assert [o["kind"] for o in out] == kinds
    for o in out:
        meta = o["metadata"]
        assert meta["namespace"] == "team-a" and meta["ownerReferences"] == [OWNER_REF]
        assert OWNER.labels.items() <= meta["labels"].items()
    names = {o["metadata"]["name"] for o in out if o["kind"] != "InferencePool"}
    assert names <= {"chat-epp"}


@pytest.mark.parametrize("mode", list(routing.FailureMode))
def test_pool_selects_the_runtime_pods_and_names_its_picker(mode):
    pool = children(routing.RoutingParams(failure_mode=mode))["InferencePool"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == "chat"
    assert pool["spec"] == {
        "selector": {"matchLabels": SELECTOR},
        "targetPorts": [{"number": 8000}],
        "appProtocol": "http",
        "endpointPickerRef": {"name": "chat-epp", "port": {"number": 9002}, "failureMode": str(mode)},
    }


def test_the_selector_is_copied_not_shared():
    pool = children()["InferencePool"]
    pool["spec"]["selector"]["matchLabels"]["x"] = "y"
    assert "x" not in SELECTOR


def test_engine_config_maps_the_runtimes_own_metric_names():
    assert routing.engine_config() == {
        "name": "openvino",
        "queuedRequestsSpec": "ovserve_queue_depth",
        "runningRequestsSpec": "ovserve_requests_running",
        "kvUsageSpec": metrics.KV_USAGE_RATIO,
        "loraSpec": "",
        "cacheInfoSpec": metrics.CACHE_CONFIG_INFO,
        "cacheBlockSizeLabelName": metrics.CACHE_BLOCK_SIZE_LABEL,
        "cacheNumBlocksLabelName": metrics.CACHE_NUM_BLOCKS_LABEL,
    }
    assert routing.POD_LABELS == {"inference.networking.k8s.io/engine-type": "openvino"}


def test_the_queue_and_running_names_are_the_runtimes():
    names = {m.name for m in metrics.Metrics().registry.collect()}
    assert {"ovserve_queue_depth", "ovserve_requests_running"} <= names


def test_config_map_holds_the_picker_config_with_the_openvino_engine():
    cm = children()["ConfigMap"]
    cfg = json.loads(cm["data"][routing.PICKER_CONFIG_FILE])
    assert cfg == routing.picker_config()
    assert cfg["kind"] == "EndpointPickerConfig"
    assert cfg["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    extractor = next(p for p in cfg["plugins"] if p["type"] == "core-metrics-extractor")["parameters"]
    assert extractor["defaultEngine"] == "openvino"
    assert extractor["engineLabelKey"] == "inference.networking.k8s.io/engine-type"
    assert extractor["engineConfigs"] == [routing.engine_config()]
    profile = {p["pluginRef"]: p["weight"] for p in cfg["schedulingProfiles"][0]["plugins"]}
    assert profile == {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}
    assert cfg["dataLayer"]["sources"][0]["pluginRef"] == "metrics-data-source"
    assert routing.picker_config_text() == routing.picker_config_text()  # stable: no spurious re-apply


def test_rbac_reads_only_its_namespace():
    c = children()
    role, binding, sa = c["Role"], c["RoleBinding"], c["ServiceAccount"]
    for rule in role["rules"]:
        assert rule["verbs"] == ["get", "list", "watch"]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "pods",
        "inferencepools",
        "inferenceobjectives",
        "inferencemodelrewrites",
    }
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "chat-epp"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "chat-epp", "namespace": "team-a"}]
    assert sa["metadata"]["name"] == "chat-epp"
    assert "ClusterRole" not in c


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_picker_deployment():
    dep = children(routing.RoutingParams(picker_image="epp:dev", picker_resources={"limits": {"memory": "1Gi"}}))[
        "Deployment"
    ]
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert spec["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == "chat-epp"
    (c,) = pod["containers"]
    assert c["image"] == "epp:dev" and c["resources"] == {"limits": {"memory": "1Gi"}}
    args = c["args"]
    assert arg(args, "--pool-name") == "chat" and arg(args, "--pool-namespace") == "team-a"
    assert arg(args, "--pool-group") == "inference.networking.k8s.io"
    assert arg(args, "--config-file") == "/config/epp-config.yaml"
    assert arg(args, "--grpc-port") == "9002" and arg(args, "--grpc-health-port") == "9003"
    assert "--metrics-endpoint-auth=false" in args
    assert c["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    assert c["securityContext"]["readOnlyRootFilesystem"] and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    pod_security = pod["securityContext"]
    assert pod_security["runAsNonRoot"] and pod_security["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": "chat-epp"}}]
    assert "resources" not in children()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert children()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
    )


def test_picker_service_serves_the_port_the_pool_names():
    c = children()
    svc, dep = c["Service"], c["Deployment"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert ports == {"grpc-ext-proc": 9002, "http-metrics": 9090}
    assert c["InferencePool"]["spec"]["endpointPickerRef"]["port"]["number"] == ports["grpc-ext-proc"]
    assert c["InferencePool"]["spec"]["endpointPickerRef"]["name"] == svc["metadata"]["name"]
