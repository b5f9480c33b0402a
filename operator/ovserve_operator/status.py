"""Pure status computation: observations -> LLMServing status, conditions, phase and Events.

Recomputed from scratch every cycle (never latched). `facts()` turns pods, runtime readings, the
Deployment and a refused apply into rules.Facts; the rule chains of rules.py decide each condition;
`phase` is derived from the Ready reason (reasons.phase_of); `status.pipeline` and the conditions
describe the pods of the current template only, pods of earlier specs go to `status.previous`.
`lastTransitionTime` changes only when a condition's status does; Events are emitted on transitions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from ovserve_runtime import decisions as runtime_decisions
from ovserve_runtime.report import CB_PIPELINES, CacheState, Decisions

from . import drift, podview, render
from . import nodes as nodeview
from . import reasons as R
from . import spec as api
from .readback import Reading
from .rules import (
    CHAINS,
    FALLBACK,
    PIPELINE_RESOLVED,
    READY,
    SPECULATIVE_CHAIN,
    ApplyError,
    Facts,
    PodFacts,
    disagreement,
    evaluate,
)

CONDITION_TYPES = tuple(CHAINS)


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Result:
    status: dict[str, Any]
    events: list[Event]


def timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_current(pod: Mapping[str, Any], desired_hash: str | None, desired_template: Mapping[str, Any] | None) -> bool:
    """Of the current spec: the template hash matches and, when the pod's containers are known, they run what
    the desired template says (a pod made from a hand-edited Deployment carries the same hash annotation)."""
    if desired_hash is not None and podview.template_hash(pod) != desired_hash:
        return False
    containers = (pod.get("spec") or {}).get("containers")
    return desired_template is None or containers is None or drift.pod_matches(desired_template, containers)


def pod_facts(
    pod: Mapping[str, Any],
    reading: Reading | None,
    desired_hash: str | None,
    mount_failure: str | None = None,
    desired_template: Mapping[str, Any] | None = None,
    node_fault: str | None = None,
) -> PodFacts:
    reading = reading or Reading(None, "none")
    return PodFacts(
        node_fault=node_fault,
        node=nodeview.node_name(pod),
        name=podview.name(pod),
        current=is_current(pod, desired_hash, desired_template),
        pod_ready=podview.pod_ready(pod),
        container_ready=podview.container_ready(pod),
        report=reading.report,
        readback_error=reading.error,
        failing_since=reading.failing_since,
        unschedulable=podview.unschedulable_message(pod),
        waiting=podview.waiting(pod),
        init=podview.init_state(pod),
        mount_failure=mount_failure,
        oom_limit=podview.oom_killed(pod),
        started=((podview.container_status(pod).get("state") or {}).get("running") or {}).get("startedAt") or "",
    )


def evictions(
    pods: Sequence[Mapping[str, Any]], nodes: Mapping[str, nodeview.NodeView | None] | None, nodes_known: bool
) -> dict[str, str]:
    """pod name -> why, of the terminating pods a node fault or a drain took off their node (nodes.eviction)."""
    nodes = nodes or {}
    out = {}
    for p in pods:
        name = nodeview.node_name(p)
        if (why := nodeview.eviction(p, nodes.get(name), nodes_known and name in nodes)) is not None:
            out[podview.name(p)] = why
    return out


def _node_fault(pod: Mapping[str, Any], nodes: Mapping[str, nodeview.NodeView | None], nodes_known: bool) -> str | None:
    name = nodeview.node_name(pod)
    return nodeview.fault(name, nodes.get(name), nodes_known and name in nodes)


def facts(
    *,
    name: str,
    namespace: str,
    generation: int | None,
    spec: api.LLMServingSpec | None,
    pods: Sequence[Mapping[str, Any]] = (),
    readings: Mapping[str, Reading] | None = None,
    desired_hash: str | None = None,
    deployment: Mapping[str, Any] | None = None,
    apply_error: ApplyError | None = None,
    mount_failures: Mapping[str, str] | None = None,
    spec_error: str = "",
    missing_children: Sequence[str] = (),
    desired_template: Mapping[str, Any] | None = None,
    nodes: Mapping[str, nodeview.NodeView | None] | None = None,
    nodes_known: bool = False,
    evicted: Mapping[str, str] | None = None,
) -> Facts:
    """`deployment`: {"conditions"} of the runtime Deployment; `mount_failures`: pod name -> the kubelet's
    FailedMount Event message; `missing_children`: kinds of children that are gone (deleted by hand); `nodes`:
    the Nodes of the pods (name -> view, None: not cached), `nodes_known`: whether an absent Node is a deleted
    one (nodes.fault); `evicted`: pod name -> why, the evictions to name (None: those of `pods`, `evictions`)."""
    readings, mount_failures, nodes = readings or {}, mount_failures or {}, nodes or {}
    live = [p for p in pods if podview.is_live(p)]
    if evicted is None:
        evicted = evictions(pods, nodes, nodes_known)
    replica_failure = next(
        (
            c.get("message") or c.get("reason") or "ReplicaFailure"
            for c in (deployment or {}).get("conditions") or []
            if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
        ),
        None,
    )
    return Facts(
        name=name,
        namespace=namespace,
        generation=generation,
        spec=spec,
        spec_error=spec_error,
        pods=tuple(
            pod_facts(
                p,
                readings.get(podview.name(p)),
                desired_hash,
                mount_failures.get(podview.name(p)),
                desired_template,
                _node_fault(p, nodes, nodes_known),
            )
            for p in live
        ),
        replica_failure=replica_failure,
        apply_error=apply_error,
        missing_children=tuple(missing_children),
        evicted=tuple(sorted(evicted.items())),
    )


def pipeline_status(f: Facts) -> api.PipelineStatus:
    """status.pipeline: what the pods of the current template say (a disagreement as such)."""
    speaking = f.speaking
    keys = {p.resolved_key for p in speaking}
    out = api.PipelineStatus(requested=f.requested, reason=R.LOADING_REASON)
    if len(keys) == 1 and speaking[0].report is not None:
        pl = speaking[0].report.pipeline
        out.resolved = pl.resolved.value if pl.resolved else None
        out.continuousBatching = pl.continuousBatching
        out.fallback = pl.fallback
        out.fallbackReason = pl.reason.value if pl.fallback else None
        out.reason, out.message = pl.reason.value, pl.message
    elif len(keys) > 1:
        fb = [p for p in speaking if p.resolved_key and p.resolved_key[1]]
        out.resolved = ",".join(sorted({k[0] for k in keys if k and k[0]})) or None
        out.continuousBatching = all(k and k[0] in {t.value for t in CB_PIPELINES} for k in keys)
        out.fallback = bool(fb)
        out.fallbackReason = fb[0].resolved_key[2] if fb and fb[0].resolved_key else None
        out.reason, out.message = R.PODS_DISAGREE, disagreement(speaking)
    if f.pinned_cb:  # never a fallback for a pinned *_CB, whatever a pod says
        out.fallback, out.fallbackReason = False, None
    return out


def task_status(f: Facts) -> tuple[api.TaskStatus | None, Any]:
    """status.task and status.embeddings: what the current spec's pods resolved (the first by name with a
    resolved task; a pod that refused the task reports it unresolved)."""
    if f.spec is None:
        return None, None
    out = api.TaskStatus(requested=f.spec.task)
    reports = sorted((p for p in f.current if p.report is not None), key=lambda p: p.name)
    resolved = [p for p in reports if p.report.task.resolved is not None]  # type: ignore[union-attr]
    if not resolved:
        return out, None
    rep = resolved[0].report
    assert rep is not None
    out.resolved = rep.task.resolved.value if rep.task.resolved else None
    out.source = rep.task.source
    return out, rep.embeddings


def capabilities_status(f: Facts) -> Any:
    """status.capabilities: what the current spec's pods serve (the first by name that reports it)."""
    reports = sorted((p for p in f.current if p.report is not None), key=lambda p: p.name)
    return next((p.report.capabilities for p in reports if p.report.capabilities is not None), None)  # type: ignore[union-attr]


def startup_status(f: Facts) -> api.StartupStatus | None:
    """status.startup: the newest start among the current spec's pods that report one (by container start time,
    then name), and how many of them hit the compiled-model cache."""
    started = [p for p in f.current if p.report is not None and p.report.startup is not None]
    if not started:
        return None
    newest = max(started, key=lambda p: (p.started, p.name))
    st = newest.report.startup  # type: ignore[union-attr]
    assert st is not None
    hits = sum(1 for p in started if p.report.startup.cache == CacheState.HIT)  # type: ignore[union-attr]
    return api.StartupStatus(
        pod=newest.name,
        weightsReadSeconds=st.weightsReadSeconds,
        compileSeconds=st.compileSeconds,
        firstTokenSeconds=st.firstTokenSeconds,
        totalSeconds=st.totalSeconds,
        cache=st.cache.value,
        previousVersions=st.previousVersions,
        message=st.message,
        cacheHits=f"{hits}/{len(started)}",
    )


def previous_status(f: Facts) -> api.PreviousPods | None:
    """status.previous: pods of earlier specs that still exist, with what they run."""
    old = f.previous
    if not old:
        return None
    ready = sum(1 for p in old if p.ready)
    keys = sorted({k for p in old if (k := p.resolved_key) and k[0]}, key=str)
    resolved = ",".join(sorted({k[0] for k in keys if k[0]})) or None
    fb = next((k[2] for k in keys if k[1]), None)
    what = f"serving {resolved}" if ready and resolved else (f"running {resolved}" if resolved else "not resolved")
    summary = f"{ready}/{len(old)} {what}" + (f" (fallback {fb})" if fb else "")
    return api.PreviousPods(
        replicas=len(old), readyReplicas=ready, resolved=resolved, fallbackReason=fb, summary=summary
    )


def decisions_status(f: Facts) -> tuple[Decisions | None, str | None]:
    """status.decisions and status.decisionsDiffer: what the current spec's pods resolved (the first by name
    that reports it speaks), and which of them resolved a setting differently with the same ask."""
    told = sorted(
        (p for p in f.current if p.report is not None and p.report.decisions is not None), key=lambda p: p.name
    )
    if not told:
        return None, None
    first = told[0]
    base = first.report.decisions  # type: ignore[union-attr]
    diffs = []
    for other in told[1:]:
        changed = runtime_decisions.changes(base, other.report.decisions)  # type: ignore[union-attr]
        if changed:
            diffs.append(f"{first.name} -> {other.name}: {', '.join(changed)}")
    return base, "; ".join(diffs)[:4096] or None


def speculative_status(f: Facts) -> api.SpeculativeStatus | None:
    """status.speculative: what the current spec's pods run (absent without spec.speculative)."""
    if f.spec is None or f.spec.speculative is None:
        return None
    requested = "draft" if f.spec.speculative.draftModel is not None else "promptLookup"
    told = [
        p.report.speculative for p in f.current if p.report is not None and p.report.speculative.requested != "none"
    ]
    out = api.SpeculativeStatus(requested=requested, reason=R.LOADING_REASON)
    if not told:
        return out
    keys = {(t.resolved.value, t.reason.value) for t in told}
    first = told[0]
    out.fallback = any(t.fallback for t in told)
    if len(keys) == 1:
        out.resolved, out.reason, out.message = first.resolved.value, first.reason.value, first.message
    else:
        out.resolved = ",".join(sorted({k[0] for k in keys}))
        out.reason = R.PODS_DISAGREE
        out.message = "; ".join(sorted(f"{k[0]} ({k[1]})" for k in keys))
    fb = next((t for t in told if t.fallback), None)
    out.display = f"none ({fb.reason.value})" if fb is not None else (out.resolved or "")
    return out


def speculative_condition(sp: api.SpeculativeStatus, f: Facts, stamp: str) -> api.Condition:
    """The Speculative condition, decided by rules.SPECULATIVE_CHAIN."""
    status, reason, message = evaluate(SPECULATIVE_CHAIN, sp)
    return api.Condition(
        type=R.SPECULATIVE_CONDITION,
        status=status,
        observedGeneration=f.generation,
        lastTransitionTime=stamp,
        reason=reason,
        message=message[:32768],
    )


def _with_transition_times(
    conditions: list[api.Condition], previous: Sequence[Mapping[str, Any]] | None
) -> list[api.Condition]:
    prev = {c.get("type"): c for c in previous or []}
    out = []
    for c in conditions:
        old = prev.get(c.type)
        if old is not None and old.get("status") == c.status.value and old.get("lastTransitionTime"):
            c = c.model_copy(update={"lastTransitionTime": old["lastTransitionTime"]})
        out.append(c)
    return out


def derive_phase(conditions: Sequence[Mapping[str, Any]]) -> api.Phase:
    ready = next((c for c in conditions if c.get("type") == READY), None)
    if ready is None:
        return api.Phase.PENDING
    return R.phase_of(ready.get("status", ""), ready.get("reason", ""))


def compute_from(f: Facts, *, previous: Mapping[str, Any] | None, now: dt.datetime) -> Result:
    """The whole status for `f` (pure)."""
    previous = previous or {}
    if f.scales_to_zero and previous.get("phase") in (api.Phase.SCALED_TO_ZERO, api.Phase.ACTIVATING):
        f = dataclasses.replace(f, was_idle=True)  # a start now is an activation (rules.activating)
    stamp = timestamp(now)
    prev_pods = previous_status(f)
    conditions = []
    for ctype, chain in CHAINS.items():
        status, reason, message = evaluate(chain, f)
        if ctype == READY and status != api.ConditionStatus.TRUE and prev_pods and prev_pods.readyReplicas:
            # the traffic truth after a refused or unfinished rollout: the Service still routes to these
            message += (
                f"; meanwhile {prev_pods.readyReplicas} pod(s) of an earlier spec still serve ({prev_pods.summary})"
            )
        conditions.append(
            api.Condition(
                type=ctype,
                status=status,
                observedGeneration=f.generation,
                lastTransitionTime=stamp,
                reason=reason,
                message=message[:32768],
            )
        )
    speculative = speculative_status(f)
    if speculative is not None:
        conditions.append(speculative_condition(speculative, f, stamp))
    conditions = _with_transition_times(conditions, previous.get("conditions"))
    ready = conditions[0]
    decided, differ = decisions_status(f)
    if decided is None and previous.get("decisions"):
        # no current pod says (a rollout between its pods, a restart): keep the last record, so that the next
        # pod's record is compared with it (an image upgrade that changes a default is an Event)
        decided = Decisions.model_validate(previous["decisions"])
    task, embeddings = task_status(f)
    typed = api.LLMServingStatus(
        observedGeneration=f.generation,
        phase=R.phase_of(ready.status.value, ready.reason),
        pipeline=pipeline_status(f),
        replicas=len(f.pods),
        readyReplicas=f.ready_replicas,
        readyDisplay=f"{f.ready_replicas}/{f.desired}",
        selector=render.selector_string(f.name),
        # no Service, no endpoint: never a dead address
        endpoint=None if "Service" in f.missing_children else render.endpoint(f.name, f.namespace),
        previous=prev_pods,
        computedAt=stamp,
        task=task,
        embeddings=embeddings,
        capabilities=capabilities_status(f),
        speculative=speculative,
        decisions=decided,
        decisionsDiffer=differ,
        startup=startup_status(f),
        conditions=conditions,
    )
    status = typed.model_dump(mode="json")
    if f.spec is None:
        status.pop("pipeline")  # nothing was requested that we understand
    return Result(status=status, events=events_for(previous, status))


def compute(
    *,
    name: str,
    namespace: str,
    generation: int | None,
    spec: api.LLMServingSpec | None,
    pods: Sequence[Mapping[str, Any]],
    readings: Mapping[str, Reading],
    previous: Mapping[str, Any] | None,
    desired_hash: str | None,
    now: dt.datetime,
    deployment: Mapping[str, Any] | None = None,
    apply_error: ApplyError | None = None,
    mount_failures: Mapping[str, str] | None = None,
    spec_error: str = "",
    missing_children: Sequence[str] = (),
    desired_template: Mapping[str, Any] | None = None,
    nodes: Mapping[str, nodeview.NodeView | None] | None = None,
    nodes_known: bool = False,
    evicted: Mapping[str, str] | None = None,
) -> Result:
    f = facts(
        nodes=nodes,
        nodes_known=nodes_known,
        evicted=evicted,
        name=name,
        namespace=namespace,
        generation=generation,
        spec=spec,
        pods=pods,
        readings=readings,
        desired_hash=desired_hash,
        deployment=deployment,
        apply_error=apply_error,
        mount_failures=mount_failures,
        spec_error=spec_error,
        missing_children=missing_children,
        desired_template=desired_template,
    )
    return compute_from(f, previous=previous, now=now)


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
    f = Facts(name=name, namespace=namespace, generation=generation, spec=None, spec_error=message)
    return compute_from(f, previous=previous, now=now)


def unreadable_status(
    *, generation: int | None, message: str, previous: Mapping[str, Any] | None, now: dt.datetime
) -> Result:
    """The operator cannot read this namespace's children (its LIST or watch is refused): what runs is unknown.
    Ready turns Unknown, NamespaceUnreadable with the apiserver's message; the rest of the last status is kept
    (never a 0/N computed from a cache that cannot be refreshed)."""
    previous = previous or {}
    stamp = timestamp(now)
    ready = api.Condition(
        type=READY,
        status=api.ConditionStatus.UNKNOWN,
        observedGeneration=generation,
        lastTransitionTime=stamp,
        reason=R.NAMESPACE_UNREADABLE,
        message=f"the operator cannot read this namespace: {message}"[:32768],
    )
    (ready,) = _with_transition_times([ready], previous.get("conditions"))
    others = [c for c in previous.get("conditions") or [] if c.get("type") != READY]
    status = {
        **previous,
        "phase": R.phase_of(ready.status.value, ready.reason).value,
        "computedAt": stamp,
        "conditions": [ready.model_dump(mode="json"), *others],
    }
    return Result(status=status, events=events_for(previous, status))


def _cond(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), {})


def _changed(prev: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return (prev.get("status"), prev.get("reason")) != (new.get("status"), new.get("reason"))


_WARN_READY = R.FAILED_REASONS | {
    R.CHILD_MISSING,
    R.NAMESPACE_UNREADABLE,
    R.DEGRADED_REASON,
    R.UNSCHEDULABLE,
    R.PODS_DISAGREE,
    R.READBACK_FAILED,
    R.NODE_NOT_READY,
    R.POD_RESCHEDULED,
}


def events_for(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Event]:
    """Events for the transitions between two statuses (pure)."""
    events: list[Event] = []
    pipeline = status.get("pipeline") or {}
    pinned_cb = pipeline.get("requested") in {t.value for t in CB_PIPELINES}
    ready_old, ready_new = _cond(previous, READY), _cond(status, READY)
    fb_old, fb_new = _cond(previous, FALLBACK), _cond(status, FALLBACK)
    res_old, res_new = _cond(previous, PIPELINE_RESOLVED), _cond(status, PIPELINE_RESOLVED)

    if fb_new.get("status") == "True" and _changed(fb_old, fb_new) and not pinned_cb:
        msg = f"{fb_new.get('reason')}: {fb_new.get('message', '')}"
        events.append(Event("Warning", R.PIPELINE_FALLBACK_EVENT, msg[:1024]))
    if res_new.get("status") == "True" and _changed(res_old, res_new) and pipeline.get("continuousBatching"):
        msg = f"running {pipeline.get('resolved')} (continuous batching)"
        events.append(Event("Normal", R.CONTINUOUS_BATCHING, msg))
    if _changed(ready_old, ready_new):
        reason = ready_new.get("reason", "")
        if ready_new.get("status") == "True":
            msg = f"{ready_new.get('message', '')}; pipeline {pipeline.get('resolved')}"
            events.append(Event("Normal", R.READY_EVENT, msg))
        elif reason in _WARN_READY:
            events.append(Event("Warning", reason, ready_new.get("message", "")[:1024]))
        elif reason in (R.SCALED_TO_ZERO, R.ACTIVATING):  # by intent or by demand: news, not a warning
            events.append(Event("Normal", reason, ready_new.get("message", "")[:1024]))
    sp_old, sp_new = _cond(previous, R.SPECULATIVE_CONDITION), _cond(status, R.SPECULATIVE_CONDITION)
    if sp_new.get("status") == "False" and _changed(sp_old, sp_new):
        msg = f"{sp_new.get('reason')}: {sp_new.get('message', '')}"
        events.append(Event("Warning", R.SPECULATIVE_FALLBACK_EVENT, msg[:1024]))
    differ = status.get("decisionsDiffer")
    if differ and differ != previous.get("decisionsDiffer"):
        events.append(Event("Warning", R.DECISIONS_DIFFER_EVENT, differ[:1024]))
    old_d, new_d = previous.get("decisions"), status.get("decisions")
    if old_d and new_d:
        changed = runtime_decisions.changes(Decisions.model_validate(old_d), Decisions.model_validate(new_d))
        if changed:
            events.append(Event("Warning", R.DECISION_CHANGED_EVENT, "; ".join(changed)[:1024]))
    start_old, start_new = previous.get("startup") or {}, status.get("startup") or {}
    if start_new.get("previousVersions") and (
        start_new.get("pod"),
        start_new.get("previousVersions"),
    ) != (start_old.get("pod"), start_old.get("previousVersions")):
        msg = (
            f"pod {start_new.get('pod')} compiled the model again: the compiled-model cache holds it for "
            f"{start_new.get('previousVersions')}, not for this image's versions (a version change)"
        )
        events.append(Event("Warning", R.COMPILE_CACHE_VERSION_MISS_EVENT, msg[:1024]))
    if (
        res_new.get("reason") == R.PODS_DISAGREE
        and _changed(res_old, res_new)
        and ready_new.get("reason") != R.PODS_DISAGREE
    ):
        events.append(Event("Warning", R.PODS_DISAGREE, res_new.get("message", "")[:1024]))
    return events


def stored_form(value: Any) -> Any:
    """`value` as the apiserver stores it: null fields are absent there."""
    if isinstance(value, Mapping):
        return {k: stored_form(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [stored_form(v) for v in value]
    return value


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, ignore: tuple[str, ...] = ("computedAt",)) -> bool:
    """Equal as the apiserver stores them (null fields are absent there), apart from `ignore`."""

    def norm(x: Mapping[str, Any] | None) -> Any:
        return stored_form({k: v for k, v in (x or {}).items() if k not in ignore})

    return norm(a) == norm(b)


def status_patch(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """A merge patch that turns `old` into `new`: keys of old that new lacks are set to null, in nested objects too
    (a merge patch merges objects: status.routing.picker would stay after a picker is turned off); lists are
    replaced whole."""
    patch: dict[str, Any] = dict(new)
    for key, was in (old or {}).items():
        if key not in patch:
            patch[key] = None
        elif isinstance(was, Mapping) and isinstance(patch[key], Mapping):
            patch[key] = status_patch(patch[key], was)
    return patch
