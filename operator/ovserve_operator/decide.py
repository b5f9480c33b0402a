"""Decide: the second step of a sync pass, pure. From what `observe` read and what the controller remembers, the
whole outcome of one pass: the status (every condition, status.autoscaling, status.rollout,
status.resourceDefaults), whether it is written (only when it changed), the Events of its transitions, the
children rendered once (the Deployment, the Service, the NetworkPolicy, the ScaledObject), and whether and why
they are applied. `act` carries it out. No I/O, no clock, no global: table-tested in tests/unit/test_decide.py.

What is applied when (level-triggered, as in kubernetes/sample-controller: the desired children against the
live ones, every pass):
- a generation not applied yet: at once (GENERATION), decided by `begin` from the caches alone, so that act.begin
  starts it before the pods are read back; a new leader whose live children already are as rendered records the
  generation as applied and writes nothing (UNCHANGED);
- a child missing: re-applied at most every MISSING_REAPPLY_AFTER_S after the last apply (REFUSED_RETRY_S when the
  apiserver refused this very spec); a child edited by hand: at once, then at most every REAPPLY_AFTER_S (never a
  tight fight with another controller); a Deployment held by the rollout budget once a slot frees (REAPPLY);
- the ScaledObject alone when it is missing (a refusal retried every REFUSED_RETRY_S) or edited by hand.
- the InferencePool of spec.routing alone, the same way (routing_io).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from . import (
    autoscaling,
    autoscaling_io,
    drift,
    policy,
    reasons,
    render,
    resourcedefaults,
    rolloutbudget,
    routing,
    routing_io,
    scaledobject,
    status,
)
from . import spec as api
from .memory import (
    Memory,
    generation_apply_due,
    missing_children,
    reapply_due,
    remember_mount_failures,
    revert_due,
)
from .observe import CHILDREN, Observed
from .readback import PodMemory
from .settings import Settings
from .statusqueue import needs_patch

REAPPLY_AFTER_S = 30.0  # a child edited by hand is reverted at once, then at most this often
MISSING_REAPPLY_AFTER_S = 5.0  # children missing or drifted are re-applied at most this often after an apply
REFUSED_RETRY_S = 60.0  # a refused apply is retried this often (a webhook or a quota may change)
APPLY_RETRY_S = 5.0  # an apply that failed otherwise (the apiserver unreachable, a timeout) is retried after
# the fields of the memory record a pass decides (act writes them back); the rest is written by act's own I/O
DECIDED = (
    "applied_at",
    "reverted_at",
    "applied_generation",
    "attempted_generation",
    "apply_error",
    "children_seen",
    "scaler_error",
    "scaler_reverted_at",
    "pool_reverted_at",
    "pool_written_at",
    "mount_failures",
    "events_read_at",
    "evictions",
)


@dataclasses.dataclass(frozen=True)
class Now:
    """The pass's clock readings: wall time (status timestamps, readback grace) and monotonic seconds (retry and
    re-apply intervals)."""

    wall: dt.datetime
    tick: float


@dataclasses.dataclass(frozen=True)
class Desired:
    """Every child of one LLMServing, rendered once per pass (one list from the one pure render)."""

    objects: list[dict[str, Any]]  # render.render: every child, in apply order, the ScaledObject included
    denied: tuple[str, ...] = ()  # the tenant policy's violations: nothing is applied
    # live children of ours the spec no longer renders (a PodDisruptionBudget at 1 replica): (kind, uid), deleted
    # by the apply
    stale: tuple[tuple[str, str], ...] = ()
    # the endpoint picker is not rendered but status says the operator ran one: ours are deleted (routing_io)
    remove_picker: bool = False

    @property
    def serving(self) -> list[dict[str, Any]]:
        """The serving's own children (the endpoint picker's Deployment and Service are not the runtime's)."""
        return [o for o in self.objects if not routing.is_picker_object(o)]

    def has(self, kind: str) -> bool:
        return any(o["kind"] == kind for o in self.serving)

    def of(self, kind: str) -> dict[str, Any]:
        return next(o for o in self.serving if o["kind"] == kind)

    @property
    def picker_objects(self) -> list[dict[str, Any]]:
        """spec.routing.picker's six objects, in apply order; empty: the operator runs no picker."""
        return [o for o in self.objects if routing.is_picker_object(o)]

    @property
    def scaled_object(self) -> dict[str, Any] | None:
        """spec.autoscaling's ScaledObject; None: autoscaling is off (ours is deleted)."""
        return next((o for o in self.objects if o["kind"] == scaledobject.KIND), None)

    @property
    def inference_pool(self) -> dict[str, Any] | None:
        """spec.routing's InferencePool; None: routing is off (ours is deleted)."""
        return next((o for o in self.objects if o["kind"] == routing.POOL_KIND), None)

    @property
    def applied(self) -> list[dict[str, Any]]:
        """The children written with server-side apply as they are (the ScaledObject and the InferencePool have
        their own writes: KEDA and the Inference Extension may be absent, and a refusal of either leaves the
        others serving)."""
        return [o for o in self.serving if o["kind"] not in (scaledobject.KIND, routing.POOL_KIND)]

    @property
    def template_hash(self) -> str:
        return self.of("Deployment")["spec"]["template"]["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH]


def render_children(name: str, namespace: str, uid: str, spec: api.LLMServingSpec, settings: Settings) -> Desired:
    return Desired(render.render(name, namespace, uid, spec, settings), tuple(policy.violations(spec, settings)))


class Apply(enum.Enum):
    NONE = "none"
    GENERATION = "generation"  # the children of a generation not applied yet (runs beside the status write)
    UNCHANGED = "unchanged"  # a new leader's first look: the live children already are as rendered
    REAPPLY = "reapply"  # children missing, edited by hand, or held by the rollout budget and a slot freed


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one pass does."""

    key: tuple[str, str]
    uid: str
    generation: int | None
    resource_version: str | None
    status: dict[str, Any]
    stored: dict[str, Any]  # what is stored now (the status patch is the difference)
    patch: bool  # the status changed: write it
    events: list[status.Event]
    memory: Memory  # the record as decided (act writes back DECIDED)
    pod_memory: dict[str, PodMemory] | None = None  # the readback grace to remember; None: unchanged
    desired: Desired | None = None
    apply: Apply = Apply.NONE
    drifted: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # why a REAPPLY
    write_scaler: bool = False  # the ScaledObject alone
    write_pool: bool = False  # the InferencePool alone
    finish_rollout: bool = False  # its rollout slot frees
    events_forbidden: str | None = None  # pod Events may not be read (RBAC): stop asking (observe found it)


@dataclasses.dataclass(frozen=True)
class Start:
    """A pass's first decision, from the caches alone (observe.cached): the children rendered (once a pass; `decide`
    takes them from here) and whether a generation not applied yet is applied (GENERATION: act.begin starts it at
    once, so that it never waits for the pods' readback; UNCHANGED: a new leader finds it applied)."""

    key: tuple[str, str]
    uid: str
    generation: int | None
    desired: Desired | None
    apply: Apply
    memory: Memory  # the record as decided (act.begin writes back DECIDED)


def begin(observed: Observed, memory: Memory, now: Now) -> Start:
    """The pass's first decision (pure: `memory` is read, never changed)."""
    o = observed
    m = _copy(memory)
    if o.unreadable is not None or isinstance(o.spec, ValidationError):
        return Start(o.key, o.uid, o.generation, None, Apply.NONE, m)
    (namespace, name) = o.key
    desired = render_children(name, namespace, o.uid, o.spec, o.settings)
    stale = tuple((k, v["metadata"]["uid"]) for k, v in o.live.items() if v is not None and not desired.has(k))
    # status says the operator ran a picker the spec no longer asks for: the apply deletes ours
    previous = ((memory.last_status or o.stored).get("routing") or {}).get("picker")
    desired = dataclasses.replace(desired, stale=stale, remove_picker=bool(previous) and not desired.picker_objects)
    return Start(o.key, o.uid, o.generation, desired, _generation_apply(o, m, desired, now.tick), m)


def _copy(memory: Memory) -> Memory:  # decided on a copy
    return dataclasses.replace(memory, children_seen=set(memory.children_seen), evictions=dict(memory.evictions))


def decide(observed: Observed, memory: Memory, now: Now, start: Start | None = None) -> Plan:
    """The whole outcome of one pass (pure: `memory` is read, never changed; the decided record is in the Plan).
    `start`: the pass's first decision, when it was taken (and carried out) before the reads that `observed` adds
    (controller.sync); otherwise it is taken here."""
    o = observed
    (namespace, name), generation = o.key, o.generation
    previous = memory.last_status or o.stored
    if start is None:
        start = begin(o, memory, now)
        m = start.memory
    else:  # act.begin wrote its decisions back into `memory` already
        m = _copy(memory)
    if o.unreadable is not None:
        result = status.unreadable_status(generation=generation, message=o.unreadable, previous=previous, now=now.wall)
        return _plan(o, memory, m, result.status, previous)
    if isinstance(o.spec, ValidationError):
        result = status.invalid_spec_status(
            name=name,
            namespace=namespace,
            generation=generation,
            message=f"invalid spec: {o.spec}",
            previous=previous,
            now=now.wall,
        )
        return _plan(o, memory, m, result.status, previous)
    spec = o.spec
    desired, apply = start.desired, start.apply
    assert desired is not None  # rendered for every readable, valid spec

    rendered_hash = desired.template_hash
    # held back by the rollout budget: the live template is the current one (and not healed meanwhile)
    held_hash = o.budget.held_hash(rendered_hash)
    live = o.live
    drift_paths = {kind: drift.differences(desired.of(kind), live.get(kind)) for kind in live if desired.has(kind)}
    drift_paths.update({kind: ["not rendered any more: deleted"] for kind, _ in desired.stale})
    missing = missing_children(m, [k for k, v in live.items() if v is None and desired.has(k)], now.tick)
    readings, pod_memory = memory.readback.graced(o.pods, o.reports, now.wall)
    mounts = remember_mount_failures(m, o.pods, o.pod_events, o.events_read_at)
    deployed = live.get("Deployment")
    # evictions stay named until the replicas are all Ready again (a drained pod is gone before its replacement loads)
    evicted = {**m.evictions, **status.evictions(o.pods, o.nodes, o.nodes_known)}
    st = status.compute(
        name=name,
        namespace=namespace,
        generation=generation,
        spec=spec,
        pods=o.pods,
        readings=readings,
        previous=previous,
        desired_hash=held_hash or rendered_hash,
        now=now.wall,
        deployment={"conditions": deployed["status"]["conditions"]} if deployed else None,
        apply_error=m.apply_error,
        mount_failures=mounts,
        missing_children=missing,
        desired_template=None if held_hash else desired.of("Deployment")["spec"]["template"],
        nodes=o.nodes,
        nodes_known=o.nodes_known,
        evicted=evicted,
    ).status
    m.evictions = {} if (st.get("readyReplicas") or 0) >= spec.replicas else evicted
    scaling, write_scaler = _scaler(o, m, desired, st, now.tick)
    stamp = status.timestamp(now.wall)
    autoscaling_io.apply_to_status(st, scaling, previous=previous, generation=generation, now=stamp)
    routed, write_pool = _router(o, m, desired, now.tick)
    if routed is _KEEP:  # the pool could not be read this pass: what status said stays
        if (previous or {}).get("routing") is not None:
            st["routing"] = previous["routing"]
    elif routed is None:
        st.pop("routing", None)
    else:
        st["routing"] = routed
    if (applied_defaults := resourcedefaults.defaults(spec, o.settings).status()) is not None:
        st["resourceDefaults"] = applied_defaults
    live_hash = ((deployed or {}).get("metadata", {}).get("annotations") or {}).get(render.ANNOTATION_TEMPLATE_HASH)
    finish = o.budget.granted and live_hash == rendered_hash and rolloutbudget.rollout_done(st, spec.replicas)
    # a finished rollout frees its slot: it holds none any more (and a granted one is never held)
    if not finish and (rollout := o.budget.status) is not None:
        st["rollout"] = rollout

    drifted = {kind: paths for kind, paths in drift_paths.items() if paths}
    if held_hash and deployed is not None:
        drifted.pop("Deployment", None)  # left on its template until a slot frees
    missing_now = any(live.get(k) is None for k in drifted) or bool(desired.stale)
    # a live child that differs from what this very generation rendered and applied: edited by hand (a newer spec
    # is the generation apply's, not a revert)
    edited = any(live.get(k) is not None for k in drifted) and m.applied_generation == generation
    slot_freed = bool(held_hash) and o.budget.free
    # a refusal of this very spec (NameConflict, a webhook, a quota) is retried slowly; a changed spec at once
    refused = m.apply_error is not None and m.apply_error.generation == generation
    after = REFUSED_RETRY_S if refused else MISSING_REAPPLY_AFTER_S
    if apply is not Apply.GENERATION and (  # `live` was read before the generation's apply: not drift
        (missing_now and reapply_due(m, True, now.tick, after, generation))
        or (edited and revert_due(m, now.tick, REAPPLY_AFTER_S))
        or (slot_freed and reapply_due(m, True, now.tick, REAPPLY_AFTER_S, generation))
    ):
        apply = Apply.REAPPLY
        if slot_freed:
            drifted["Deployment"] = ["held: a rollout slot freed"]
    return _plan(
        o,
        memory,
        m,
        st,
        previous,
        pod_memory=pod_memory,
        desired=desired,
        apply=apply,
        drifted=drifted,
        write_scaler=write_scaler and apply in (Apply.NONE, Apply.UNCHANGED),  # an apply writes it anyway
        write_pool=write_pool and apply in (Apply.NONE, Apply.UNCHANGED),
        finish_rollout=finish,
    )


def _plan(o: Observed, memory: Memory, m: Memory, st: dict[str, Any], previous: Mapping[str, Any], **kw: Any) -> Plan:
    meta = o.snapshot["metadata"]
    return Plan(
        key=o.key,
        uid=o.uid,
        generation=o.generation,
        resource_version=meta.get("resourceVersion"),
        status=st,
        stored=o.stored,
        patch=needs_patch(st, o.stored, memory.last_status),
        # the Events of the whole status's transitions, chosen once it is complete
        events=status.events_for(previous, st),
        memory=m,
        events_forbidden=o.events_forbidden,
        **kw,
    )


def children_current(o: Observed, desired: Desired) -> bool:
    """Whether the live children are exactly what `desired` renders, so that re-applying them would change nothing
    (a GET and an apply per child saved on a takeover). Only for the plain case: the Deployment, the Service and
    the PodDisruptionBudget, all ours and without drift, allowed by policy, no autoscaler, no NetworkPolicy
    handling; anything else takes the full apply."""
    spec = o.spec
    if o.settings.network_policies or desired.denied or (isinstance(spec, api.LLMServingSpec) and spec.autoscaling):
        return False
    if desired.stale or not {obj["kind"] for obj in desired.objects} <= set(CHILDREN):
        return False
    if (o.stored or {}).get("routing"):  # routing turned off while no operator ran: the apply deletes the pool
        return False
    for obj in desired.objects:
        live = o.live.get(obj["kind"])
        if live is None or drift.differences(obj, live):
            return False
    return True


def _generation_apply(o: Observed, m: Memory, desired: Desired, tick: float) -> Apply:
    """The pass's apply of a generation (what kopf's create, update and resume handlers once did): once per
    generation this leader has not applied yet. A new leader (nothing attempted yet) first checks whether the live
    children are already as rendered: then nothing is written. A failed apply is retried after REFUSED_RETRY_S
    (refused) or APPLY_RETRY_S (anything else); a newer generation at once. Records the attempt in `m`."""
    generation = o.generation
    if generation is None:  # never from the apiserver (it stores one for every object): nothing to track by
        return Apply.NONE
    if not generation_apply_due(m, generation, tick, REFUSED_RETRY_S, APPLY_RETRY_S):
        return Apply.NONE
    if m.attempted_generation is None and children_current(o, desired):
        m.attempted_generation = m.applied_generation = generation
        m.applied_at, m.apply_error = tick, None
        return Apply.UNCHANGED
    m.attempted_generation = generation
    return Apply.GENERATION


def _scaler(
    o: Observed, m: Memory, desired: Desired, resolved: Mapping[str, Any], tick: float
) -> tuple[autoscaling.AutoscalingState | None, bool]:
    """status.autoscaling's state (None: KEDA could not be read this pass, the last status stands) and whether the
    ScaledObject is written: missing (KEDA installed later, or deleted by hand; a refusal retried every
    REFUSED_RETRY_S) or edited by hand (at once, then at most every REAPPLY_AFTER_S). Records in `m`. `resolved`:
    the status computed from the pods (the chain's MetricNotExported rule reads what they resolved)."""
    spec = o.spec
    assert isinstance(spec, api.LLMServingSpec)
    if spec.autoscaling is None:
        return autoscaling.AutoscalingState(None, None), False
    seen = o.scaler
    if seen is None:
        return None, False
    write = False
    if seen.installed:
        if seen.problem is not None:
            m.scaler_error = seen.problem  # not readable, or not ours: kept until a write goes through
        elif seen.scaled_object is None:
            refused_at = m.scaler_refused_at
            write = refused_at is None or tick - refused_at >= autoscaling_io.REFUSED_RETRY_S
        elif (
            desired.scaled_object is not None
            and drift.differences(desired.scaled_object, seen.scaled_object)
            and tick - (m.scaler_reverted_at if m.scaler_reverted_at is not None else -1e9)
            > autoscaling_io.REAPPLY_AFTER_S
        ):
            m.scaler_reverted_at = tick
            write = True
    state = autoscaling.autoscaling_status(
        spec,
        keda_installed=seen.installed,
        scaled_object=seen.scaled_object,
        hpa=seen.hpa,
        apply_error=m.scaler_error,
        resolved=resolved,
    )
    return state, write


_KEEP: dict[str, Any] = {}  # a marker (never written): status.routing as it was


def _router(o: Observed, m: Memory, desired: Desired, tick: float) -> tuple[dict[str, Any] | None, bool]:
    """status.routing (None: routing off, no status.routing; _KEEP: not read this pass) and whether to write the
    InferencePool alone: when it is missing (a refusal retried every REFUSED_RETRY_S, a re-create at most every
    MISSING_REWRITE_AFTER_S) or edited by hand (reverted at most every REAPPLY_AFTER_S). Records the write in `m`."""
    spec = o.spec
    assert isinstance(spec, api.LLMServingSpec)
    if not routing.enabled(spec):
        return None, False
    (_, name) = o.key
    denied = [d for d in desired.denied if d.startswith("spec.routing")]
    if denied:
        st = api.RoutingStatus(reason=reasons.POLICY_DENIED, message="; ".join(denied), display=reasons.POLICY_DENIED)
        return st.model_dump(exclude_none=True), False
    seen = o.pool
    if seen is None:
        return _KEEP, False
    write = False
    pickers = desired.picker_objects
    live_picker = seen.picker or {}
    if seen.installed and seen.problem is None and not desired.denied:
        picker_drift = routing_io.picker_drift(pickers, live_picker) if seen.picker is not None else []
        # missing: the pool, a picker object, or ours left over from a picker turned off
        missing = seen.pool is None or any(p.endswith(": missing") for p in picker_drift)
        missing = missing or (not pickers and any(v is not None for v in live_picker.values()))
        edited = (seen.pool is not None and bool(drift.differences(desired.inference_pool or {}, seen.pool))) or any(
            not p.endswith(": missing") for p in picker_drift
        )
        if missing:
            refused_at, written_at = m.pool_refused_at, m.pool_written_at
            write = (refused_at is None or tick - refused_at >= routing_io.REFUSED_RETRY_S) and (
                written_at is None or tick - written_at >= routing_io.MISSING_REWRITE_AFTER_S
            )
        elif edited and (
            tick - (m.pool_reverted_at if m.pool_reverted_at is not None else -1e9) > routing_io.REAPPLY_AFTER_S
        ):
            m.pool_reverted_at = tick
            write = True
    if write:
        m.pool_written_at = tick
    picker_missing = any(live_picker.get(obj["kind"]) is None for obj in pickers)
    problem = seen.problem or (m.pool_error if seen.pool is None or picker_missing else None)
    st = routing.pool_status(
        name,
        installed=seen.installed,
        pool=seen.pool,
        pods=o.pods,
        problem=problem,
        picker_ready=routing_io.picker_available(seen.picker) if pickers else None,
    )
    return st, write
