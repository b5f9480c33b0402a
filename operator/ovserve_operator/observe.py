"""Observe: the first step of a sync pass. Everything one LLMServing's status and children are decided from, read
in two parts: `cached`, from the controller's caches (the object, its pods and live children: no I/O, so that a
generation's apply, decided from these alone, starts at once), then `read`, where no cache can hold it, from the
pods and the apiserver: the runtime reports (GET /v1/status of each pod), the mount-failure Events of pods stuck
creating, KEDA's ScaledObject and HPA, the InferencePool of spec.routing. Nothing is written anywhere, the
memory record included: it is read (which pods' Events are due: at most one LIST per pod every EVENTS_EVERY_S),
and what was read goes to `decide` in the `Observed`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from . import autoscaling_io, nodes, ownership, podview, readback, render, rolloutbudget, routing, routing_io
from . import spec as api
from .kube import error_status, error_text
from .memory import Memory
from .settings import Settings
from .statusqueue import stored_status

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
EVENTS_EVERY_S = 10.0  # a creating pod's Events are read at most this often
# the children whose live object is compared with the render (and re-applied when missing or drifted)
CHILDREN = ("Deployment", "Service", "PodDisruptionBudget")


@dataclasses.dataclass(frozen=True)
class Observed:
    """One LLMServing and what runs for it, as read at the start of a pass."""

    snapshot: Mapping[str, Any]  # the cached LLMServing
    settings: Settings
    spec: api.LLMServingSpec | ValidationError
    stored: dict[str, Any]  # its status as the apiserver stores it, as far as is known (statusqueue.stored_status)
    unreadable: str | None = None  # why its namespace's children cannot be read (cache.ListGate), else None
    pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    live: dict[str, dict[str, Any] | None] = dataclasses.field(default_factory=dict)  # kind -> ours, or None
    # the Nodes of its pods: name -> view (None: not in the cache); `nodes_known`: the Nodes are listed and
    # readable, so that a Node absent is a deleted one
    nodes: dict[str, nodes.NodeView | None] = dataclasses.field(default_factory=dict)
    nodes_known: bool = False
    reports: dict[str, readback.Reading] = dataclasses.field(default_factory=dict)  # pod name -> raw reading
    # the pod Events read this pass (memory.remember_mount_failures): pod uid -> (pod name, its mount failure or
    # None), when (monotonic), and why they may not be read (RBAC without `list events`), if that was just found
    pod_events: dict[str, tuple[str, str | None]] = dataclasses.field(default_factory=dict)
    events_read_at: float = 0.0
    events_forbidden: str | None = None
    scaler: autoscaling_io.Seen | None = None  # None: not read (autoscaling off, or the read failed)
    pool: routing_io.Seen | None = None  # None: not read (routing off, or the read failed)
    budget: rolloutbudget.View = dataclasses.field(default_factory=rolloutbudget.View)

    @property
    def key(self) -> Key:
        meta = self.snapshot["metadata"]
        return meta["namespace"], meta["name"]

    @property
    def uid(self) -> str:
        return self.snapshot["metadata"].get("uid") or ""

    @property
    def generation(self) -> int | None:
        return self.snapshot["metadata"].get("generation")


def ours(snapshots: Any, uid: str) -> dict[str, Any] | None:
    """Of a key's cached children of one kind, the one controlled by the LLMServing of `uid` (the one ownership
    check, ownership.conflict, that every child's write also passes)."""
    for snap in list(snapshots or []):
        if ownership.conflict(snap, uid) is None:
            return snap
    return None


def parse(snapshot: Mapping[str, Any]) -> api.LLMServingSpec | ValidationError:
    try:
        return api.parse_spec(dict(snapshot.get("spec") or {}))
    except ValidationError as e:
        return e


def cached(ctl: Controller, snapshot: Mapping[str, Any], memory: Memory) -> Observed:
    """What the controller's caches hold of one LLMServing: the object, its pods and live children (no I/O, no
    wait). Enough to decide a generation's apply (decide.begin), which therefore never waits for the pods."""
    meta = snapshot["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta.get("uid") or ""
    stored = stored_status(snapshot, memory)
    typed = parse(snapshot)
    if why := ctl.gate.unreadable(key[0]):  # nothing computed from a cache that cannot refresh
        return Observed(snapshot, ctl.settings, typed, stored, unreadable=why)
    if isinstance(typed, ValidationError):
        return Observed(snapshot, ctl.settings, typed, stored)
    pods = list(ctl.pods.get(key, []))
    live = {kind: ours(ctl.cache_of(kind).get(key, []), uid) for kind in CHILDREN}
    on = {n: ctl.nodes.get(n) for p in pods if (n := nodes.node_name(p))}
    return Observed(snapshot, ctl.settings, typed, stored, pods=pods, live=live, nodes=on, nodes_known=ctl.nodes_known)


async def read(ctl: Controller, observed: Observed, memory: Memory) -> Observed:
    """`observed` (from `cached`) with what only the pods and the apiserver can tell: the pods' runtime reports
    (GET /v1/status, up to the readback timeout), the Events of pods stuck creating, KEDA's ScaledObject and HPA,
    the InferencePool, and the rollout budget as it is after those reads (reads only)."""
    o = observed
    if o.unreadable is not None or isinstance(o.spec, ValidationError):
        return o
    (namespace, name), uid = o.key, o.uid
    reports = await readback.read_reports(o.pods, timeout=ctl.settings.status_http_timeout_s)
    events_read_at = time.monotonic()
    pod_events, events_forbidden = await read_pod_events(ctl, memory, namespace, o.pods, events_read_at)
    scaler = None
    if o.spec.autoscaling is not None:
        try:
            scaler = await ctl.call(ctl.io_pool, autoscaling_io.read, ctl.kube, ctl.keda, name, namespace, uid)
        except Exception as e:
            log.warning("%s/%s: reading the autoscaler failed: %s", namespace, name, error_text(e))
    pool = None
    if routing.enabled(o.spec):
        # the picker's objects: wanted, or ours that status says run (deleted when no longer wanted)
        ran = ((memory.last_status or o.stored).get("routing") or {}).get("picker")
        picker = render.picker_wanted(o.spec) or bool(ran)
        try:
            pool = await ctl.call(ctl.io_pool, routing_io.read, ctl.kube, ctl.gie, name, namespace, uid, picker)
        except Exception as e:
            log.warning("%s/%s: reading the InferencePool failed: %s", namespace, name, error_text(e))
    return dataclasses.replace(
        o,
        pool=pool,
        reports=reports,
        pod_events=pod_events,
        events_read_at=events_read_at,
        events_forbidden=events_forbidden,
        scaler=scaler,
        budget=ctl.memories.budget.view(o.key, memory.rollout_hold),
    )


async def read_pod_events(
    ctl: Controller, memory: Memory, namespace: str, pods: list[dict[str, Any]], now: float
) -> tuple[dict[str, tuple[str, str | None]], str | None]:
    """The Events of the pods stuck before their containers start (a missing hostPath shows nowhere else), each
    pod's at most every EVENTS_EVERY_S (by `memory.events_read_at`, read only): pod uid -> (pod name, the kubelet's
    latest volume failure or None; a failed read too, so that it waits its turn), and why no Events may be read,
    when a LIST was refused 403 now (RBAC without `list events`: act remembers it, and stops asking)."""
    read: dict[str, tuple[str, str | None]] = {}
    if ctl.events_forbidden:
        return read, None
    for pod in pods:
        uid, name = podview.uid(pod), podview.name(pod)
        if not podview.is_creating(pod) or now - memory.events_read_at.get(uid, -1e9) < EVENTS_EVERY_S:
            continue
        read[uid] = (name, None)
        try:
            events = await ctl.call(ctl.io_pool, ctl.kube.list_pod_events, namespace, name)
        except Exception as e:
            if error_status(e) == 403:
                return read, error_text(e)
            log.warning("%s: listing pod events failed: %s", name, error_text(e))
            continue
        read[uid] = (name, podview.mount_failure(events))
    return read, None
