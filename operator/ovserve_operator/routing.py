"""Routing children of an LLMServing (pure): the Gateway API Inference Extension (GIE) objects that let a gateway
pick a replica per request by load and prompt prefix instead of kube-proxy's random choice (issue 39,
docs/routing.md).

- an `InferencePool` (inference.networking.k8s.io/v1) selecting the serving's runtime pods on the runtime's port;
- optionally its endpoint picker (EPP): a Deployment running GIE's `epp`, its Service (ext_proc gRPC and metrics),
  a ConfigMap holding the `EndpointPickerConfig`, and a least-privilege ServiceAccount, Role and RoleBinding
  (read pods and the pool in the serving's namespace; nothing cluster-wide).

The picker reads each pod's model-server-protocol gauges through the `openvino` engine config (`ENGINE_CONFIG`),
selected by the pod label `inference.networking.k8s.io/engine-type: openvino` (`POD_LABELS`, set on the runtime
pods). The metric names come from the runtime (ovserve_runtime.metrics): the operator never guesses them.

Nothing here reads the cluster; render.py hands in the owner (names, labels, owner reference) and the selector.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ovserve_runtime import endpoints
from ovserve_runtime.metricnames import (
    CACHE_BLOCK_SIZE_LABEL,
    CACHE_CONFIG_INFO,
    CACHE_NUM_BLOCKS_LABEL,
    KV_USAGE_RATIO,
)

from . import reasons
from . import spec as api

# The GIE API and release these objects are written for (the EPP flags and config format are v1.5.0's).
POOL_GROUP = "inference.networking.k8s.io"
POOL_API_VERSION = f"{POOL_GROUP}/v1"
POOL_KIND = "InferencePool"
POOL_PLURAL = "inferencepools"
OBJECTIVE_GROUP = "inference.networking.x-k8s.io"  # InferenceObjective, InferenceModelRewrite: read if installed
PICKER_CONFIG_API_VERSION = f"{OBJECTIVE_GROUP}/v1alpha1"
GIE_VERSION = "v1.5.0"
DEFAULT_PICKER_IMAGE = f"registry.k8s.io/gateway-api-inference-extension/epp:{GIE_VERSION}"

# Scale to zero (docs/autoscaling.md): the picker's flow control (feature gate `flowControl`) holds a request while
# the pool has no pod that can take it (an empty pool counts as saturated), up to HOLD_SECONDS, and exports how many
# it holds per pool: KEDA's trigger counts them to bring a replica back.
FLOW_CONTROL_GATE = "flowControl"
HELD_METRIC = "inference_extension_flow_control_queue_size"
HELD_POOL_LABEL = "inference_pool"
HOLD_SECONDS = 180  # a cold start of a large model on CPU, plus KEDA's poll and Prometheus's scrape

# The engine type the picker selects its metric mapping by (a pod label the EPP reads).
ENGINE_TYPE_LABEL = f"{POOL_GROUP}/engine-type"
ENGINE_TYPE = "openvino"
POD_LABELS = {ENGINE_TYPE_LABEL: ENGINE_TYPE}

# The runtime's gauges for queued and running requests (names fixed by docs/runtime.md and docs/autoscaling.md).
QUEUED_METRIC = "ovserve_queue_depth"
RUNNING_METRIC = "ovserve_requests_running"

# The EPP's ports (its defaults) and where its config is mounted.
PICKER_GRPC_PORT = 9002  # ext_proc, what the gateway calls
PICKER_HEALTH_PORT = 9003  # gRPC health, the probes
PICKER_METRICS_PORT = 9090
PICKER_HEALTH_SERVICE = "inference-extension"  # the gRPC health service name of a single-replica EPP
PICKER_CONFIG_DIR = "/config"
PICKER_CONFIG_FILE = "epp-config.yaml"
PICKER_CONTAINER = "epp"
PICKER_COMPONENT = "endpoint-picker"
PICKER_UID = 65532  # the distroless nonroot user of the upstream image
# Conservatively as long as a runtime pod's drain: the EPP keeps answering while the pool's pods drain.
PICKER_GRACE_S = 130

# Scorer weights: GIE v1.5.0's defaults (queue 2, KV-cache utilization 2, prefix cache 3).
QUEUE_WEIGHT = 2
KV_WEIGHT = 2
PREFIX_WEIGHT = 3

LABEL_COMPONENT = "app.kubernetes.io/component"


class FailureMode(StrEnum):
    """What the gateway does when the picker does not answer (InferencePool endpointPickerRef.failureMode)."""

    FAIL_OPEN = "FailOpen"  # route to any pod of the pool
    FAIL_CLOSE = "FailClose"  # refuse the request


@dataclass(frozen=True)
class Owner:
    """Who the routing children belong to: the LLMServing's name and namespace, the labels every child of it
    carries and the owner reference that makes them its children (all from render.py)."""

    name: str
    namespace: str
    labels: dict[str, str]
    owner_reference: dict[str, Any]


@dataclass(frozen=True)
class RoutingParams:
    """What the spec asks of routing (spec.routing, resolved): whether the operator runs the pool's picker, with
    which image and resources, and the pool's failure mode."""

    picker: bool = True
    picker_image: str = DEFAULT_PICKER_IMAGE
    failure_mode: FailureMode = FailureMode.FAIL_OPEN
    picker_resources: dict[str, Any] = field(default_factory=dict)
    hold_seconds: int | None = None  # the serving scales to zero: the picker holds requests (flow control)


def pool_name(name: str) -> str:
    """The InferencePool's name: the serving's own (one pool per serving)."""
    return name


def is_picker_object(obj: Mapping[str, Any]) -> bool:
    """One of the endpoint picker's objects (by its component label)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == PICKER_COMPONENT


def picker_name(name: str) -> str:
    """The name of the picker's Deployment, Service, ConfigMap, ServiceAccount, Role and RoleBinding."""
    return f"{name}-epp"


def picker_selector(name: str) -> dict[str, str]:
    return {"ovserve.dev/endpoint-picker": picker_name(name)}


def engine_config() -> dict[str, Any]:
    """The `openvino` entry of the core-metrics-extractor's engineConfigs: the runtime's gauges by the role the
    picker gives them. A legacy pod exports neither KV family: the picker then keeps its initial 0 for every pod
    of the pool alike (a pool's pods share one spec), so routing there rests on the queue and running counts."""
    return {
        "name": ENGINE_TYPE,
        "queuedRequestsSpec": QUEUED_METRIC,
        "runningRequestsSpec": RUNNING_METRIC,
        "kvUsageSpec": KV_USAGE_RATIO,
        "loraSpec": "",  # the runtime serves no LoRA adapters
        "cacheInfoSpec": CACHE_CONFIG_INFO,
        "cacheBlockSizeLabelName": CACHE_BLOCK_SIZE_LABEL,
        "cacheNumBlocksLabelName": CACHE_NUM_BLOCKS_LABEL,
    }


def picker_config(hold_seconds: int | None = None) -> dict[str, Any]:
    """The EndpointPickerConfig: GIE's default scheduling profile (queue, KV-cache utilization and prefix-cache
    scorers with its weights) over metrics scraped from /metrics with the `openvino` mapping, the default engine
    for unlabelled pods too. `hold_seconds` (a serving that scales to zero): flow control on, holding a request that
    no pod can take for at most that long."""
    extractor = {
        "engineLabelKey": ENGINE_TYPE_LABEL,
        "defaultEngine": ENGINE_TYPE,
        "engineConfigs": [engine_config()],
    }
    config: dict[str, Any] = {
        "apiVersion": PICKER_CONFIG_API_VERSION,
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": endpoints.METRICS}},
            {"type": "core-metrics-extractor", "parameters": extractor},
        ],
        "dataLayer": {
            "sources": [{"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]}]
        },
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "queue-scorer", "weight": QUEUE_WEIGHT},
                    {"pluginRef": "kv-cache-utilization-scorer", "weight": KV_WEIGHT},
                    {"pluginRef": "prefix-cache-scorer", "weight": PREFIX_WEIGHT},
                ],
            }
        ],
    }
    if hold_seconds is not None:
        config["featureGates"] = [FLOW_CONTROL_GATE]
        config["flowControl"] = {"defaultRequestTTL": f"{hold_seconds}s"}
    return config


def picker_config_text(hold_seconds: int | None = None) -> str:
    """The config file's text (JSON, which the EPP's YAML loader reads), stable for a stable config."""
    return json.dumps(picker_config(hold_seconds), indent=2) + "\n"


def _metadata(owner: Owner, name: str, component: str | None = None) -> dict[str, Any]:
    labels = dict(owner.labels)
    if component is not None:
        labels[LABEL_COMPONENT] = component
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels,
        "ownerReferences": [dict(owner.owner_reference)],
    }


def render_inference_pool(owner: Owner, selector: dict[str, str], params: RoutingParams) -> dict[str, Any]:
    """The InferencePool: the serving's runtime pods on the runtime's port, picked by `<name>-epp`."""
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL_KIND,
        "metadata": _metadata(owner, pool_name(owner.name)),
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "targetPorts": [{"number": endpoints.PORT}],
            "appProtocol": "http",
            "endpointPickerRef": {
                "name": picker_name(owner.name),
                "port": {"number": PICKER_GRPC_PORT},
                "failureMode": str(params.failure_mode),
            },
        },
    }


def render_picker_config_map(owner: Owner, hold_seconds: int | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(owner, picker_name(owner.name), PICKER_COMPONENT),
        "data": {PICKER_CONFIG_FILE: picker_config_text(hold_seconds)},
    }


def render_picker_service_account(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(owner, picker_name(owner.name), PICKER_COMPONENT),
    }


def picker_rules() -> list[dict[str, Any]]:
    """What the picker reads, in its namespace only: the pool's pods and the pool; InferenceObjectives and
    InferenceModelRewrites where their CRDs are installed (the EPP watches them then, and fails without them).
    No write, no Secret, nothing cluster-wide: the metrics endpoint's TokenReview auth is off for that reason."""
    read = ["get", "list", "watch"]
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": [POOL_GROUP], "resources": [POOL_PLURAL], "verbs": read},
        {"apiGroups": [OBJECTIVE_GROUP], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read},
    ]


def render_picker_role(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(owner, picker_name(owner.name), PICKER_COMPONENT),
        "rules": picker_rules(),
    }


def render_picker_role_binding(owner: Owner) -> dict[str, Any]:
    name = picker_name(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(owner, name, PICKER_COMPONENT),
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }


def picker_args(owner: Owner) -> list[str]:
    """The EPP's command line: this serving's pool, the mounted config, its ports; JSON logs; no tracing; the
    metrics endpoint without TokenReview auth (it would need a ClusterRole)."""
    return [
        "--pool-name",
        pool_name(owner.name),
        "--pool-namespace",
        owner.namespace,
        "--pool-group",
        POOL_GROUP,
        "--config-file",
        f"{PICKER_CONFIG_DIR}/{PICKER_CONFIG_FILE}",
        "--grpc-port",
        str(PICKER_GRPC_PORT),
        "--grpc-health-port",
        str(PICKER_HEALTH_PORT),
        "--metrics-port",
        str(PICKER_METRICS_PORT),
        "--zap-encoder",
        "json",
        "--tracing=false",
        "--metrics-endpoint-auth=false",
    ]


def _probe(period_s: int) -> dict[str, Any]:
    return {"grpc": {"port": PICKER_HEALTH_PORT, "service": PICKER_HEALTH_SERVICE}, "periodSeconds": period_s}


def render_picker_deployment(owner: Owner, params: RoutingParams) -> dict[str, Any]:
    """One EPP replica (GIE's recommendation: the prefix index lives in its memory), recreated on change, under
    the restricted Pod Security profile, its config from the ConfigMap."""
    name = picker_name(owner.name)
    sel = picker_selector(owner.name)
    meta = _metadata(owner, name, PICKER_COMPONENT)
    container: dict[str, Any] = {
        "name": PICKER_CONTAINER,
        "image": params.picker_image,
        "imagePullPolicy": "IfNotPresent",
        "args": picker_args(owner),
        "ports": [
            {"name": "grpc", "containerPort": PICKER_GRPC_PORT},
            {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT},
            {"name": "metrics", "containerPort": PICKER_METRICS_PORT},
        ],
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "livenessProbe": {**_probe(10), "initialDelaySeconds": 5},
        "readinessProbe": _probe(2),
        "volumeMounts": [{"name": "config", "mountPath": PICKER_CONFIG_DIR, "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if params.picker_resources:
        container["resources"] = dict(params.picker_resources)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(sel)},
            "template": {
                "metadata": {"labels": {**meta["labels"], **sel}},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": PICKER_GRACE_S,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": PICKER_UID,
                        "runAsGroup": PICKER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        },
    }


def render_picker_service(owner: Owner) -> dict[str, Any]:
    """The picker's ClusterIP Service: the port the InferencePool's endpointPickerRef names (gRPC), and metrics."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, picker_name(owner.name), PICKER_COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": picker_selector(owner.name),
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "protocol": "TCP",
                    "port": PICKER_GRPC_PORT,
                    "targetPort": PICKER_GRPC_PORT,
                    "appProtocol": "kubernetes.io/h2c",
                },
                {
                    "name": "http-metrics",
                    "protocol": "TCP",
                    "port": PICKER_METRICS_PORT,
                    "targetPort": PICKER_METRICS_PORT,
                },
            ],
        },
    }


def render_routing(owner: Owner, selector: dict[str, str], params: RoutingParams) -> list[dict[str, Any]]:
    """Every routing child of one serving: the pool, and the picker's six objects when the operator runs it
    (params.picker false: a platform's own EPP serves the pool, whose endpointPickerRef names `<name>-epp`)."""
    out = [render_inference_pool(owner, selector, params)]
    if params.picker:
        out += [
            render_picker_service_account(owner),
            render_picker_role(owner),
            render_picker_role_binding(owner),
            render_picker_config_map(owner, params.hold_seconds),
            render_picker_deployment(owner, params),
            render_picker_service(owner),
        ]
    return out


# ------------------------------------------------------------------------------- spec.routing and its status


def enabled(spec: api.LLMServingSpec) -> bool:
    """spec.routing is set and on: the pool is rendered and the pods carry the engine-type label."""
    return spec.routing is not None and spec.routing.enabled


def params(spec: api.LLMServingSpec) -> RoutingParams:
    """What spec.routing asks, for the renderers. The picker is not run by the operator (yet): the pool names
    `<name>-epp`, which a platform's own EPP serves (docs/routing.md)."""
    failure = spec.routing.failureMode if spec.routing is not None else api.RoutingFailureMode.FAIL_OPEN
    hold = HOLD_SECONDS if spec.scales_to_zero else None
    return RoutingParams(picker=False, failure_mode=FailureMode(failure.value), hold_seconds=hold)


def _ready(pod: Mapping[str, Any]) -> bool:
    """Ready and not terminating: what an EndpointSlice, and so the picker, counts as an endpoint (podview's own
    checks are not imported: podview imports render, which imports this module)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def endpoints_of(pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> int:
    """The pool's endpoints: Ready pods (not terminating) whose labels match its selector (matchLabels)."""
    selector = ((pool.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    if not selector:
        return 0
    count = 0
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if _ready(pod) and all(labels.get(k) == v for k, v in selector.items()):
            count += 1
    return count


def pool_status(
    name: str,
    *,
    installed: bool,
    pool: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    problem: str | None = None,
    picker_ready: bool | None = None,
) -> dict[str, Any]:
    """status.routing from what was read (pure): the CRD served or not, our live pool (None: absent or not
    ours), why it cannot be written (a refusal, a name taken), the serving's pods, and whether the picker the
    operator runs is Available (None: it runs none)."""
    pool_name_ = None
    count = 0
    if not installed:
        reason = reasons.ROUTING_UNAVAILABLE
        message = (
            f"InferencePool CRD not installed: {POOL_API_VERSION} {POOL_PLURAL} is not served (install the Gateway "
            "API Inference Extension's CRDs); the serving runs behind its Service"
        )
    elif problem is not None:
        reason, message = reasons.POOL_REFUSED, problem
    elif pool is None:
        reason, message = reasons.POOL_PENDING, f"InferencePool {pool_name(name)} is being created"
    else:
        pool_name_ = pool_name(name)
        count = endpoints_of(pool, pods)
        reason = reasons.POOL_READY
        message = f"InferencePool {pool_name_} selects {count} Ready pod(s) on port {endpoints.PORT}"
        if picker_ready is False:
            reason = reasons.PICKER_NOT_READY
            message += f"; its endpoint picker {picker_name(name)} is not Available yet"
    display = f"{count} endpoint{'' if count == 1 else 's'}" if reason == reasons.POOL_READY else reason
    return api.RoutingStatus(
        pool=pool_name_,
        endpoints=count,
        picker=picker_name(name) if picker_ready is not None else None,
        pickerReady=picker_ready,
        reason=reason,
        message=message,
        display=display,
    ).model_dump(exclude_none=True)


__all__ = [
    "DEFAULT_PICKER_IMAGE",
    "ENGINE_TYPE",
    "ENGINE_TYPE_LABEL",
    "POD_LABELS",
    "POOL_API_VERSION",
    "POOL_KIND",
    "POOL_PLURAL",
    "FailureMode",
    "Owner",
    "RoutingParams",
    "enabled",
    "endpoints_of",
    "engine_config",
    "is_picker_object",
    "params",
    "picker_config",
    "picker_config_text",
    "picker_name",
    "picker_rules",
    "pool_name",
    "pool_status",
    "render_inference_pool",
    "render_routing",
]
