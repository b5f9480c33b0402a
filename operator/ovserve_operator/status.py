"""Pure status computation: spec + pods + runtime reports -> LLMServing status and Events.

Recomputed from scratch every cycle (never latched): Ready is True only when enough up-to-date pods
are ready AND report `ready`; `phase` is derived from the conditions; `lastTransitionTime` of a
condition changes only when its status does. Events are emitted on condition transitions only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from ovserve_runtime.report import CB_PIPELINES, Reason, RuntimeReport, State

from . import render
from . import spec as api
from .readback import Reading

READY = "Ready"
PIPELINE_RESOLVED = "PipelineResolved"
FALLBACK = "Fallback"
CONDITION_TYPES = (READY, PIPELINE_RESOLVED, FALLBACK)

# reasons the operator adds to the runtime's (ovserve_runtime.report.Reason)
ALL_REPLICAS_READY = "AllReplicasReady"
PODS_DISAGREE = "PodsDisagree"
UNSCHEDULABLE = "Unschedulable"
NO_PODS = "PodsNotCreated"
SCALED_TO_ZERO = "ScaledToZero"
PINNED_PIPELINE = "PinnedPipeline"
MODEL_DOWNLOAD_FAILED = "ModelDownloadFailed"
FAILED_CREATE = "FailedCreate"  # Deployment ReplicaFailure: pods refused (admission, quota)
PIPELINE_FALLBACK_EVENT = "PipelineFallback"
INVALID_SPEC = "InvalidSpec"

# Container waiting reasons (kubelet) that mean "not started yet" vs "broken".
PENDING_WAITING = {"ContainerCreating", "PodInitializing", "ImagePullBackOff", "ErrImagePull"}
FAILED_WAITING = {
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
}
PENDING_REASONS = {UNSCHEDULABLE, NO_PODS, SCALED_TO_ZERO} | PENDING_WAITING
FAILED_REASONS = {
    Reason.PAGED_ATTENTION_NOT_SUPPORTED.value,
    Reason.PIPELINE_TYPE_MISMATCH.value,
    Reason.MODEL_NOT_FOUND.value,
    Reason.MODEL_LOAD_FAILED.value,
    Reason.DEVICE_UNAVAILABLE.value,
    MODEL_DOWNLOAD_FAILED,
    FAILED_CREATE,
    INVALID_SPEC,
    "RuntimeFailed",
} | FAILED_WAITING


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Result:
    status: dict[str, Any]
    events: list[Event]


@dataclasses.dataclass
class PodView:
    name: str
    up_to_date: bool
    pod_ready: bool
    report: RuntimeReport | None
    unschedulable: str | None = None  # scheduler message
    waiting_reason: str | None = None
    waiting_message: str = ""
    init_failure: str | None = None

    @property
    def ready(self) -> bool:
        return self.pod_ready and self.report is not None and self.report.state == State.READY

    @property
    def failed(self) -> bool:
        return self.report is not None and self.report.state == State.FAILED

    @property
    def resolved_key(self) -> tuple[str | None, bool, str] | None:
        """What this pod says about the pipeline, or None while it says nothing yet."""
        r = self.report
        if r is None or (r.state == State.LOADING and r.pipeline.resolved is None):
            return None
        p = r.pipeline
        return (p.resolved.value if p.resolved else None, p.fallback, p.reason.value)


def _ts(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_status(statuses: Sequence[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any]:
    for cs in statuses or []:
        if cs.get("name") == name:
            return cs
    return {}


def pod_view(pod: Mapping[str, Any], reading: Reading | None, desired_hash: str | None) -> PodView:
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    pod_hash = (meta.get("annotations") or {}).get(render.ANNOTATION_TEMPLATE_HASH)
    conditions = {c.get("type"): c for c in st.get("conditions") or []}
    view = PodView(
        name=meta.get("name", ""),
        up_to_date=desired_hash is None or pod_hash == desired_hash,
        pod_ready=(conditions.get("Ready") or {}).get("status") == "True",
        report=reading.report if reading else None,
    )
    sched = conditions.get("PodScheduled") or {}
    if sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
        view.unschedulable = sched.get("message") or "no node fits the pod"
    cs = _container_status(st.get("containerStatuses"), render.CONTAINER_NAME)
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason"):
        view.waiting_reason = waiting["reason"]
        view.waiting_message = waiting.get("message") or ""
    init = _container_status(st.get("initContainerStatuses"), render.INIT_CONTAINER_NAME)
    for key in ("state", "lastState"):
        term = (init.get(key) or {}).get("terminated") or {}
        if term and term.get("exitCode", 0) != 0:
            view.init_failure = (term.get("message") or term.get("reason") or "").strip()[-2000:] or (
                f"exit code {term.get('exitCode')}"
            )
            break
    return view


def _condition(ctype: str, status: str, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "observedGeneration": generation,
        "reason": reason,
        "message": message[:32768],
    }


def _with_transition_times(
    conditions: list[dict[str, Any]], previous: Sequence[Mapping[str, Any]] | None, now: str
) -> list[dict[str, Any]]:
    prev = {c.get("type"): c for c in previous or []}
    out = []
    for c in conditions:
        old = prev.get(c["type"])
        if old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            c = {**c, "lastTransitionTime": old["lastTransitionTime"]}
        else:
            c = {**c, "lastTransitionTime": now}
        out.append(c)
    return out


def derive_phase(conditions: Sequence[Mapping[str, Any]]) -> api.Phase:
    ready = next((c for c in conditions if c.get("type") == READY), None)
    if ready is None:
        return api.Phase.PENDING
    if ready.get("status") == "True":
        return api.Phase.READY
    reason = ready.get("reason", "")
    if reason in FAILED_REASONS:
        return api.Phase.FAILED
    if reason in PENDING_REASONS:
        return api.Phase.PENDING
    return api.Phase.LOADING


def _disagreement_message(views: Sequence[PodView]) -> str:
    parts = []
    for v in sorted(views, key=lambda v: v.name):
        key = v.resolved_key
        if key is None:
            continue
        resolved, fallback, reason = key
        state = v.report.state.value if v.report else "?"
        parts.append(
            f"{v.name}: {resolved or '-'} ({reason}{', fallback' if fallback else ''}; {state}"
            f"{'' if v.up_to_date else '; outdated'})"
        )
    return "pods disagree: " + "; ".join(parts)


def compute(
    *,
    name: str,
    namespace: str,
    generation: int | None,
    spec: api.LLMServingSpec,
    pods: Sequence[Mapping[str, Any]],
    readings: Mapping[str, Reading],
    previous: Mapping[str, Any] | None,
    desired_hash: str | None,
    now: dt.datetime,
    deployment: Mapping[str, Any] | None = None,
) -> Result:
    """`deployment`: {"hash", "conditions"} of the runtime Deployment, if known (ReplicaFailure)."""
    previous = previous or {}
    requested = spec.pipelineType
    desired = spec.replicas
    live = [
        p
        for p in pods
        if not (p.get("metadata") or {}).get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    views = [pod_view(p, readings.get((p.get("metadata") or {}).get("name", "")), desired_hash) for p in live]
    current = [v for v in views if v.up_to_date]
    ready_replicas = sum(1 for v in current if v.ready)

    # ---- pipeline: what the pods say, disagreement reported as such
    speaking = [v for v in views if v.resolved_key is not None]
    keys = {v.resolved_key for v in speaking}
    pipeline: dict[str, Any] = {
        "requested": requested.value,
        "resolved": None,
        "continuousBatching": False,
        "fallback": False,
        "fallbackReason": None,
        "reason": Reason.LOADING.value,
        "message": "",
    }
    disagree = len(keys) > 1
    failed_views = [v for v in current if v.failed]
    if len(keys) == 1:
        r = speaking[0].report
        assert r is not None
        p = r.pipeline
        pipeline.update(
            resolved=p.resolved.value if p.resolved else None,
            continuousBatching=p.continuousBatching,
            fallback=p.fallback,
            fallbackReason=p.reason.value if p.fallback else None,
            reason=p.reason.value,
            message=p.message,
        )
    elif disagree:
        resolved = sorted({k[0] for k in keys if k[0]})
        fb = [v for v in speaking if v.resolved_key and v.resolved_key[1]]
        pipeline.update(
            resolved=",".join(resolved) or None,
            continuousBatching=all(k[0] in {t.value for t in CB_PIPELINES} for k in keys),
            fallback=bool(fb),
            fallbackReason=fb[0].resolved_key[2] if fb and fb[0].resolved_key else None,
            reason=PODS_DISAGREE,
            message=_disagreement_message(speaking),
        )

    # ---- Ready
    unschedulable = [v for v in current if v.unschedulable]
    broken = [v for v in current if not v.failed and v.waiting_reason in FAILED_WAITING]
    init_failed = [v for v in current if v.init_failure]
    waiting_pending = [v for v in current if v.waiting_reason in PENDING_WAITING]
    replica_failure = next(
        (
            c
            for c in (deployment or {}).get("conditions") or []
            if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
        ),
        None,
    )
    current_disagree = len({v.resolved_key for v in current if v.resolved_key}) > 1
    if desired == 0:
        ready = ("False", SCALED_TO_ZERO, "spec.replicas is 0")
    elif failed_views:
        r = failed_views[0].report
        assert r is not None
        reason = r.pipeline.reason.value
        if reason in (Reason.LOADING.value, Reason.CONTINUOUS_BATCHING.value, Reason.LEGACY_REQUESTED.value):
            reason = "RuntimeFailed"
        msg = r.pipeline.message or "the runtime reported failure"
        if requested in CB_PIPELINES and reason == Reason.PAGED_ATTENTION_NOT_SUPPORTED.value:
            msg = (
                f"pipelineType {requested.value} is pinned and the model does not support PagedAttention; "
                f"it is not downgraded (use AUTO or {requested.value.removesuffix('_CB')} to allow the "
                "legacy "
                f"pipeline): {msg}"
            )
        ready = ("False", reason, f"{len(failed_views)} pod(s) failed: {msg}")
    elif init_failed:
        ready = ("False", MODEL_DOWNLOAD_FAILED, f"{init_failed[0].name}: {init_failed[0].init_failure}")
    elif broken:
        v = broken[0]
        ready = ("False", v.waiting_reason or "RuntimeFailed", f"{v.name}: {v.waiting_message}".rstrip(": "))
    elif ready_replicas >= desired and not current_disagree:
        ready = ("True", ALL_REPLICAS_READY, f"{ready_replicas}/{desired} replicas ready")
    elif unschedulable and ready_replicas == 0:
        ready = ("False", UNSCHEDULABLE, unschedulable[0].unschedulable or "")
    elif not views and replica_failure:
        ready = (
            "False",
            FAILED_CREATE,
            f"the Deployment cannot create runtime pods: {replica_failure.get('message', '')}",
        )
    elif not views:
        ready = ("False", NO_PODS, "waiting for the Deployment to create runtime pods")
    elif waiting_pending and ready_replicas == 0:
        v = waiting_pending[0]
        ready = (
            "False",
            v.waiting_reason or "ContainerCreating",
            f"{v.name}: {v.waiting_message}".rstrip(": "),
        )
    elif current_disagree:
        ready = ("False", PODS_DISAGREE, pipeline["message"])
    else:
        msg = f"{ready_replicas}/{desired} replicas ready"
        if unschedulable:
            msg += f"; {len(unschedulable)} unschedulable: {unschedulable[0].unschedulable}"
        ready = ("False", Reason.LOADING.value, msg)

    # ---- PipelineResolved
    if disagree:
        resolved_c = ("False", PODS_DISAGREE, pipeline["message"])
    elif len(keys) == 1 and speaking[0].failed:
        resolved_c = ("False", pipeline["reason"], pipeline["message"])
    elif len(keys) == 1 and pipeline["resolved"]:
        resolved_c = ("True", pipeline["reason"], pipeline["message"] or f"running {pipeline['resolved']}")
    else:
        why = ready[1] if ready[1] in PENDING_REASONS else Reason.LOADING.value
        resolved_c = ("Unknown", why, "no runtime pod has resolved its pipeline yet")

    # ---- Fallback
    if pipeline["fallback"]:
        fallback_c = (
            "True",
            pipeline["fallbackReason"] or Reason.PAGED_ATTENTION_NOT_SUPPORTED.value,
            f"requested {requested.value}, running {pipeline['resolved']}: {pipeline['message']}",
        )
    elif requested in CB_PIPELINES and failed_views:
        fallback_c = ("False", PINNED_PIPELINE, f"pipelineType {requested.value} is pinned: never downgraded")
    elif disagree:
        fallback_c = ("False", PODS_DISAGREE, f"no pod fell back; {pipeline['message']}")
    elif pipeline["resolved"]:
        fallback_c = ("False", pipeline["reason"], f"running the {pipeline['resolved']} pipeline")
    else:
        fallback_c = ("Unknown", resolved_c[1], "no runtime pod has resolved its pipeline yet")

    conditions = [
        _condition(READY, *ready, generation),
        _condition(PIPELINE_RESOLVED, *resolved_c, generation),
        _condition(FALLBACK, *fallback_c, generation),
    ]
    stamp = _ts(now)
    conditions = _with_transition_times(conditions, previous.get("conditions"), stamp)
    phase = derive_phase(conditions)
    status = {
        "observedGeneration": generation,
        "phase": phase.value,
        "pipeline": pipeline,
        "replicas": len(views),
        "readyReplicas": ready_replicas,
        "readyDisplay": f"{ready_replicas}/{desired}",
        "selector": render.selector_string(name),
        "endpoint": render.endpoint(name, namespace),
        "conditions": conditions,
    }
    return Result(status=status, events=events_for(previous, status, requested))


def invalid_spec_status(
    *,
    name: str,
    namespace: str,
    generation: int | None,
    message: str,
    previous: Mapping[str, Any] | None,
    now: dt.datetime,
) -> Result:
    """A spec the typed model refuses (an old CRD let it in): Failed, nothing rendered."""
    previous = previous or {}
    conds = [
        _condition(READY, "False", INVALID_SPEC, message, generation),
        _condition(PIPELINE_RESOLVED, "Unknown", INVALID_SPEC, message, generation),
        _condition(FALLBACK, "Unknown", INVALID_SPEC, message, generation),
    ]
    conds = _with_transition_times(conds, previous.get("conditions"), _ts(now))
    status = {
        "observedGeneration": generation,
        "phase": api.Phase.FAILED.value,
        "replicas": 0,
        "readyReplicas": 0,
        "readyDisplay": "0/0",
        "selector": render.selector_string(name),
        "endpoint": render.endpoint(name, namespace),
        "conditions": conds,
    }
    return Result(status=status, events=events_for(previous, status, None))


def _cond(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), {})


def _changed(prev: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return (prev.get("status"), prev.get("reason")) != (new.get("status"), new.get("reason"))


def events_for(previous: Mapping[str, Any], status: Mapping[str, Any], requested: Any) -> list[Event]:
    """Events for the transitions between two statuses (pure)."""
    events: list[Event] = []
    pipeline = status.get("pipeline") or {}
    ready_old, ready_new = _cond(previous, READY), _cond(status, READY)
    fb_old, fb_new = _cond(previous, FALLBACK), _cond(status, FALLBACK)
    res_old, res_new = _cond(previous, PIPELINE_RESOLVED), _cond(status, PIPELINE_RESOLVED)

    if fb_new.get("status") == "True" and _changed(fb_old, fb_new):
        events.append(
            Event(
                "Warning",
                PIPELINE_FALLBACK_EVENT,
                f"{fb_new.get('reason')}: {fb_new.get('message', '')}"[:1024],
            )
        )
    if res_new.get("status") == "True" and _changed(res_old, res_new) and pipeline.get("continuousBatching"):
        events.append(
            Event(
                "Normal",
                Reason.CONTINUOUS_BATCHING.value,
                f"running {pipeline.get('resolved')} (continuous batching)",
            )
        )
    if _changed(ready_old, ready_new):
        reason = ready_new.get("reason", "")
        if ready_new.get("status") == "True":
            events.append(
                Event("Normal", READY, f"{ready_new.get('message', '')}; pipeline {pipeline.get('resolved')}")
            )
        elif reason in FAILED_REASONS or reason in (UNSCHEDULABLE, PODS_DISAGREE):
            events.append(Event("Warning", reason, ready_new.get("message", "")[:1024]))
    if (
        res_new.get("reason") == PODS_DISAGREE
        and _changed(res_old, res_new)
        and ready_new.get("reason") != PODS_DISAGREE
    ):
        events.append(Event("Warning", PODS_DISAGREE, res_new.get("message", "")[:1024]))
    return events


def _strip_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value]
    return value


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Equal as the apiserver stores them (null fields are absent there)."""
    return _strip_none(dict(a or {})) == _strip_none(dict(b or {}))


def status_patch(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """A merge patch that turns `old` into `new`: keys of old that new lacks are set to null."""
    patch: dict[str, Any] = dict(new)
    for key in old or {}:
        if key not in patch:
            patch[key] = None
    return patch
