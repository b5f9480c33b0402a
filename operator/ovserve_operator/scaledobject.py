"""The KEDA ScaledObject of an LLMServing with spec.autoscaling (pure), and KEDA's names.

A ScaledObject whose Prometheus trigger sums one runtime metric over the LLMServing's pods (AverageValue:
replicas = ceil(sum / target)). Its scale target is the LLMServing itself, through the scale subresource: KEDA's
HPA writes spec.replicas and the operator keeps rendering the Deployment from spec.replicas, so the operator never
fights the HPA. render.py puts it among the other children (metadata from there, as networkpolicy.py's);
autoscaling.py judges KEDA's state of it; autoscaling_io.py reads and writes it.
"""

from __future__ import annotations

from typing import Any

from . import routing
from . import spec as api

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
GROUP = "keda.sh"
PLURAL = "scaledobjects"
# The label Prometheus puts the LLMServing's name in: hack/'s scrape config relabels the pod label
# ovserve.dev/llmserving to it, and a PodMonitor's podTargetLabels names it the same way.
SERIES_LABEL = "ovserve_dev_llmserving"

SERIES: dict[api.AutoscalingMetric, str] = {
    api.AutoscalingMetric.QueueDepth: "ovserve_queue_depth",
    api.AutoscalingMetric.RunningRequests: "ovserve_requests_running",
    api.AutoscalingMetric.KVCacheUsage: "ovserve_kv_cache_usage_percent",
}


def scaled_object_name(name: str) -> str:
    return name


def hpa_name(name: str) -> str:
    """The HPA KEDA creates for a ScaledObject (unless the ScaledObject names one)."""
    return f"keda-hpa-{scaled_object_name(name)}"


# Scale to zero: any demand adds this much to the trigger's value. KEDA counts a trigger above 0 as active (it brings
# the first replica back, and keeps the last one while requests run); the HPA's replica count, ceil(value / target),
# is then at least 1 and otherwise the metric's own.
DEMAND_EPSILON = 0.001


def _series(metric: str, namespace: str, name: str) -> str:
    return f'sum({metric}{{namespace="{namespace}",{SERIES_LABEL}="{name}"}})'


def query(metric: api.AutoscalingMetric, namespace: str, name: str, hold_pool: str | None = None) -> str:
    """PromQL: the metric summed over the LLMServing's runtime pods (names are DNS labels: no escaping needed).
    `hold_pool` (minReplicas 0): plus DEMAND_EPSILON while any request is held by the pool's picker, queued or
    running, so that a held request activates KEDA with no pod to measure and a running one keeps the last pod."""
    main = _series(SERIES[metric], namespace, name)
    if hold_pool is None:
        return main
    held = f'sum({routing.HELD_METRIC}{{namespace="{namespace}",{routing.HELD_POOL_LABEL}="{hold_pool}"}})'
    queued = _series(SERIES[api.AutoscalingMetric.QueueDepth], namespace, name)
    running = _series(SERIES[api.AutoscalingMetric.RunningRequests], namespace, name)
    demand = " + ".join(f"({q} or vector(0))" for q in (held, queued, running))
    return f"({main} or vector(0)) + {DEMAND_EPSILON:g} * clamp_max({demand}, 1)"


def render_scaled_object(
    name: str,
    namespace: str,
    autoscaling: api.Autoscaling,
    prometheus_url: str,
    metadata: dict[str, Any],
    hold_pool: str | None = None,
) -> dict[str, Any]:
    """The ScaledObject for `autoscaling` (metadata, with its owner reference, from render.py). minReplicas 0 needs
    `hold_pool`, the InferencePool whose picker holds the requests while no pod runs (query)."""
    a = autoscaling
    so: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {**metadata, "name": scaled_object_name(name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": name},
            "pollingInterval": a.pollingIntervalSeconds,
            "minReplicaCount": a.minReplicas,
            "maxReplicaCount": a.maxReplicas,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "name": hpa_name(name),
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": a.scaleDownStabilizationSeconds}},
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "name": a.metric.value[0].lower() + a.metric.value[1:],
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": query(a.metric, namespace, name, hold_pool if a.minReplicas == 0 else None),
                        "threshold": f"{a.target:g}",
                        # no series yet (no pod scraped): 0, not an error
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }
    if a.minReplicas == 0:
        # idle this long (no trigger active): the last replica goes; a new serving first stays up as long (its
        # pod loads and says what it runs before the first scale to zero)
        so["spec"]["cooldownPeriod"] = a.idleSeconds
        so["spec"]["initialCooldownPeriod"] = a.idleSeconds
    return so


__all__ = [
    "API_VERSION",
    "DEMAND_EPSILON",
    "GROUP",
    "KIND",
    "PLURAL",
    "SERIES",
    "SERIES_LABEL",
    "hpa_name",
    "query",
    "render_scaled_object",
    "scaled_object_name",
]
