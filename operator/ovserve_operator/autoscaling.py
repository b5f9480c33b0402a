"""Autoscaling on LLM load (pure): KEDA's state -> status. (The ScaledObject itself is a child like the others:
rendered by render.render, built in scaledobject.py, whose names are re-exported here.)

- `autoscaling_status`: status.autoscaling and the Autoscaling condition, from what the pods resolved (the
  computed status), whether KEDA's CRD is served, the ScaledObject and the HPA KEDA made for it (the HPA's
  conditions carry the last reason): the condition is decided by AUTOSCALING_CHAIN, an ordered rule chain like
  rules.py's. Its first rule is MetricNotExported: the pods resolved to something that never moves the chosen
  metric (KVCacheUsage on an embeddings/rerank model or a legacy pipeline: the gauge stays 0 and the serving
  would never scale out, silently), whatever KEDA says.
- `merge_condition`: puts the Autoscaling condition into a status' conditions (lastTransitionTime
  changes only when its status does), or removes it when autoscaling is off.

autoscaling_io.py does the I/O (reads, apply, delete) and act.py calls it; this module is table-tested in tests/unit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ovserve_runtime.report import Task

from . import render, rules
from . import spec as api
from .rules import Finding
from .scaledobject import API_VERSION, GROUP, KIND, PLURAL, SERIES, SERIES_LABEL, hpa_name, query, scaled_object_name

CONDITION = "Autoscaling"

# Reasons of status.autoscaling / the Autoscaling condition (the HPA's own reasons pass through).
KEDA_NOT_INSTALLED = "KEDANotInstalled"  # keda.sh/v1alpha1 ScaledObject is not served: replicas stay as set
SCALED_OBJECT_REFUSED = "ScaledObjectRefused"  # the apiserver refused the ScaledObject (its message follows)
SCALED_OBJECT_PENDING = "ScaledObjectPending"  # applied; KEDA has not reported on it yet
SCALED_OBJECT_NOT_READY = "ScaledObjectNotReady"  # KEDA says the ScaledObject is not ready (its message follows)
WAITING_FOR_HPA = "WaitingForHPA"  # the ScaledObject is ready; its HPA has not computed a scale yet
METRIC_NOT_EXPORTED = "MetricNotExported"  # what the pods resolved never moves the metric (metric_unavailable)
IDLE_AT_ZERO = "IdleAtZero"  # minReplicas 0: KEDA took the last replica away; it brings one back on demand

_REASON_RE = re.compile(api.REASON_PATTERN)


# the ScaledObject is one of the children: render.render renders it (scaledobject.py), named here for the callers
render_scaled_object = render.render_scaled_object


@dataclasses.dataclass(frozen=True)
class AutoscalingState:
    """status.autoscaling (None when autoscaling is off) and the Autoscaling condition's (status, reason, message)."""

    status: dict[str, Any] | None
    condition: tuple[str, str, str] | None


def _cond(obj: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any]:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == ctype), {})


def _reason(value: Any, default: str) -> str:
    return value if isinstance(value, str) and _REASON_RE.match(value) else default


@dataclasses.dataclass(frozen=True)
class ScalerFacts:
    """What the Autoscaling condition is decided from: KEDA served or not, the ScaledObject's refusal, the live
    ScaledObject and the HPA KEDA made for it; and why the metric cannot move for what the pods resolved."""

    replicas: int  # spec.replicas: what runs without KEDA
    keda_installed: bool
    apply_error: str | None
    scaled_object: Mapping[str, Any] | None
    hpa: Mapping[str, Any] | None
    metric_unavailable: str | None = None  # metric_unavailable(spec, the computed status)
    min_replicas: int = 1  # spec.autoscaling.minReplicas

    @property
    def so_ready(self) -> Mapping[str, Any]:
        return _cond(self.scaled_object, "Ready")

    def hpa_cond(self, ctype: str) -> Mapping[str, Any]:
        return _cond(self.hpa, ctype)


def metric_not_exported(s: ScalerFacts) -> Finding | None:
    return (METRIC_NOT_EXPORTED, s.metric_unavailable) if s.metric_unavailable else None


def keda_not_installed(s: ScalerFacts) -> Finding | None:
    if s.keda_installed:
        return None
    return KEDA_NOT_INSTALLED, (
        f"the {API_VERSION} ScaledObject API is not served: install KEDA to autoscale "
        f"(docs/autoscaling.md); replicas stay at spec.replicas ({s.replicas})"
    )


def scaled_object_refused(s: ScalerFacts) -> Finding | None:
    return (SCALED_OBJECT_REFUSED, s.apply_error) if s.apply_error else None


def scaled_object_absent(s: ScalerFacts) -> Finding | None:
    return (SCALED_OBJECT_PENDING, "the ScaledObject is not created yet") if s.scaled_object is None else None


def scaled_object_not_ready(s: ScalerFacts) -> Finding | None:
    ready = s.so_ready
    if ready.get("status") != "False":
        return None
    return SCALED_OBJECT_NOT_READY, f"{ready.get('reason', '')}: {ready.get('message', '')}".strip(": ")


def keda_not_reporting(s: ScalerFacts) -> Finding | None:
    return None if s.so_ready else (SCALED_OBJECT_PENDING, "KEDA has not reported on the ScaledObject yet")


def hpa_absent(s: ScalerFacts) -> Finding | None:
    if s.hpa is not None:
        return None
    return WAITING_FOR_HPA, f"waiting for KEDA's HPA {hpa_name(_name(s.scaled_object))}"


def idle_at_zero(s: ScalerFacts) -> Finding | None:
    """At zero by KEDA's choice: the HPA says ScalingActive False (it does not scale a target at zero), which is
    the plan here, not a fault."""
    if s.min_replicas != 0 or s.replicas != 0:
        return None
    return IDLE_AT_ZERO, "scaled to zero after the idle window; a request held at the gateway brings a replica back"


def scaling_inactive(s: ScalerFacts) -> Finding | None:
    active = s.hpa_cond("ScalingActive")
    if active.get("status") != "False":
        return None
    return _reason(active.get("reason"), "ScalingInactive"), active.get("message", "")


def hpa_not_computed(s: ScalerFacts) -> Finding | None:
    return None if s.hpa_cond("AbleToScale") else (WAITING_FOR_HPA, "the HPA has not computed a scale yet")


def _able(s: ScalerFacts) -> Finding:
    able, limited = s.hpa_cond("AbleToScale"), s.hpa_cond("ScalingLimited")
    msg = able.get("message", "")
    if limited.get("status") == "True":
        msg = f"{msg}; {limited.get('message', '')}".strip("; ")
    return _reason(able.get("reason"), "AbleToScale"), msg


def able_to_scale(s: ScalerFacts) -> Finding | None:
    return _able(s) if s.hpa_cond("AbleToScale").get("status") == "True" else None


def unable_to_scale(s: ScalerFacts) -> Finding:
    return _able(s)


# the Autoscaling condition: the first rule that answers decides it (rules.evaluate)
AUTOSCALING_CHAIN: rules.ChainOf[ScalerFacts] = (
    (rules.FALSE, metric_not_exported),
    (rules.FALSE, keda_not_installed),
    (rules.FALSE, scaled_object_refused),
    (rules.UNKNOWN, scaled_object_absent),
    (rules.FALSE, scaled_object_not_ready),
    (rules.UNKNOWN, keda_not_reporting),
    (rules.TRUE, idle_at_zero),
    (rules.UNKNOWN, hpa_absent),
    (rules.FALSE, scaling_inactive),
    (rules.UNKNOWN, hpa_not_computed),
    (rules.TRUE, able_to_scale),
    (rules.FALSE, unable_to_scale),
)


def autoscaling_status(
    spec: api.LLMServingSpec,
    *,
    keda_installed: bool,
    scaled_object: Mapping[str, Any] | None,
    hpa: Mapping[str, Any] | None,
    apply_error: str | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> AutoscalingState:
    """What status says about autoscaling (pure): the Autoscaling condition from AUTOSCALING_CHAIN. `resolved`: the
    status computed from the pods (status.task, status.pipeline), for MetricNotExported."""
    a = spec.autoscaling
    if a is None:
        return AutoscalingState(None, None)
    unavailable = metric_unavailable(spec, resolved or {})
    facts = ScalerFacts(spec.replicas, keda_installed, apply_error, scaled_object, hpa, unavailable, a.minReplicas)
    status, reason, message = rules.evaluate(AUTOSCALING_CHAIN, facts)
    cond = (status.value, reason, message)
    # the HPA's figures, once the chain got as far as reading it
    st = ((hpa or {}).get("status") or {}) if _reaches_hpa(facts) else {}
    block = {
        "scaledObject": _name(scaled_object) if scaled_object is not None else None,
        "minReplicas": a.minReplicas,
        "maxReplicas": a.maxReplicas,
        "desiredReplicas": st.get("desiredReplicas"),
        "currentReplicas": st.get("currentReplicas"),
        "lastScaleTime": st.get("lastScaleTime"),
        "reason": cond[1],
        "message": cond[2][:4096],
        "display": f"{a.minReplicas}-{a.maxReplicas} {cond[1]}",
    }
    return AutoscalingState({k: v for k, v in block.items() if v is not None}, cond)


def _reaches_hpa(s: ScalerFacts) -> bool:
    """The chain got past the ScaledObject to the HPA's own conditions."""
    ready = s.so_ready
    return (
        s.keda_installed and not s.apply_error and bool(ready) and ready.get("status") != "False" and s.hpa is not None
    )


def metric_unavailable(spec: api.LLMServingSpec, status: Mapping[str, Any]) -> str | None:
    """Why the autoscaling metric cannot move for what the current pods resolved (status.task and
    status.pipeline of the computed status), or None. Only KVCacheUsage has such cases: the runtime exports
    the KV-cache usage of a continuous-batching pipeline, and 0 for anything else."""
    a = spec.autoscaling
    if a is None or a.metric != api.AutoscalingMetric.KVCacheUsage:
        return None
    task = (status.get("task") or {}).get("resolved")
    if task and task != Task.TEXT_GENERATION.value:
        return (
            f"KVCacheUsage is a text-generation metric and the model resolved to task {task}: its pods export "
            "no KV-cache usage (the gauge stays 0, the serving would never scale out); autoscale on QueueDepth"
        )
    pipeline = status.get("pipeline") or {}
    if pipeline.get("resolved") and pipeline.get("continuousBatching") is False:
        why = f" ({pipeline['fallbackReason']})" if pipeline.get("fallbackReason") else ""
        return (
            f"KVCacheUsage needs continuous batching and the pods run the legacy {pipeline['resolved']} "
            f"pipeline{why}: the gauge stays 0, the serving would never scale out; autoscale on QueueDepth or "
            "RunningRequests"
        )
    return None


def _name(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name") or "")


def merge_condition(
    conditions: Sequence[Mapping[str, Any]],
    condition: tuple[str, str, str] | None,
    *,
    previous: Sequence[Mapping[str, Any]] | None,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """`conditions` with the Autoscaling condition set (or removed when `condition` is None)."""
    out = [dict(c) for c in conditions if c.get("type") != CONDITION]
    if condition is None:
        return out
    status, reason, message = condition
    old = next((c for c in previous or [] if c.get("type") == CONDITION), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    out.append(
        {
            "type": CONDITION,
            "status": status,
            "observedGeneration": generation,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": since,
        }
    )
    return out


__all__ = [
    "API_VERSION",
    "CONDITION",
    "GROUP",
    "KEDA_NOT_INSTALLED",
    "KIND",
    "PLURAL",
    "SCALED_OBJECT_NOT_READY",
    "SCALED_OBJECT_PENDING",
    "SCALED_OBJECT_REFUSED",
    "SERIES",
    "SERIES_LABEL",
    "WAITING_FOR_HPA",
    "AutoscalingState",
    "autoscaling_status",
    "hpa_name",
    "merge_condition",
    "query",
    "render_scaled_object",
    "scaled_object_name",
]
