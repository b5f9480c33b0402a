"""decide (pure): what one sync pass does, from what was observed and what is remembered. Table-driven, no I/O and
no patched global: each case builds an Observed and a Memory and reads the Plan.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from typing import Any

import pytest
from ovserve_operator import autoscaling_io, intake, render, rolloutbudget
from ovserve_operator import spec as api
from ovserve_operator.decide import DECIDED, Apply, Now, begin, decide, render_children
from ovserve_operator.memory import Memory, remember_mount_failures
from ovserve_operator.observe import Observed, parse
from ovserve_operator.readback import ReadbackMemory
from ovserve_operator.rules import ApplyError
from ovserve_operator.settings import Settings

from .podfixtures import creating, pod

NS, NAME, UID, GEN = "ns", "a", "uid-a", 3
NOW = Now(dt.datetime(2026, 12, 7, 8, 0, 0, tzinfo=dt.UTC), 1000.0)
SETTINGS = Settings(allow_host_path=True, default_cpu_request="", default_memory_request="")
SPEC = {"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 1}
AUTOSCALING = {**SPEC, "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": 4}}


def snapshot(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": NAME, "namespace": NS, "uid": UID, "generation": GEN, "resourceVersion": "7"}
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": meta, "spec": spec, "status": status or {}}


def live_children(spec: dict[str, Any], settings: Settings = SETTINGS, **edits: dict) -> dict[str, Any]:
    """The children as the cache holds them after an apply of `spec`; `edits`: kind -> spec fields changed by hand."""
    typed = api.parse_spec(spec)
    out: dict[str, Any] = {}
    for obj in render.render(NAME, NS, UID, typed, settings):
        if obj["kind"] in ("Deployment", "Service", "PodDisruptionBudget"):
            obj = copy.deepcopy(obj)
            obj["spec"].update(edits.get(obj["kind"], {}))
            out[obj["kind"]] = intake.child_snapshot(obj)
    return out


def observed(
    spec: dict[str, Any] = SPEC, *, settings: Settings = SETTINGS, stored: dict | None = None, **fields: Any
) -> Observed:
    fields.setdefault("live", {"Deployment": None, "Service": None, "PodDisruptionBudget": None})
    snap = snapshot(spec, stored)
    return Observed(snap, settings, parse(snap), stored or {}, **fields)


def memory(**fields: Any) -> Memory:
    return Memory(readback=ReadbackMemory(30.0), uid=UID, **fields)


APPLIED = {"applied_generation": GEN, "attempted_generation": GEN, "applied_at": NOW.tick - 100}
SEEN = {**APPLIED, "children_seen": {"Deployment", "Service", "PodDisruptionBudget"}}
HELD_HASH = "live-hash"


def rendered_hash(spec: dict[str, Any] = SPEC) -> str:
    return render_children(NAME, NS, UID, api.parse_spec(spec), SETTINGS).template_hash


def ready(plan: Any) -> tuple[str, str]:
    c = next(c for c in plan.status["conditions"] if c["type"] == "Ready")
    return c["status"], c["reason"]


# id -> (observed, memory, what the plan must say: attribute or status key -> value, or a callable on the plan)
CASES: dict[str, tuple[Observed, Memory, dict[str, Any]]] = {
    "a create: the generation is applied, the status written": (
        observed(),
        memory(),
        {"apply": Apply.GENERATION, "patch": True, "memory.attempted_generation": GEN},
    ),
    "a new leader, the children as rendered: nothing written but the status": (
        observed(live=live_children(SPEC)),
        memory(),
        {"apply": Apply.UNCHANGED, "memory.applied_generation": GEN, "memory.applied_at": NOW.tick, "patch": True},
    ),
    "a new leader, the Service edited by hand: the full apply": (
        observed(live=live_children(SPEC, Service={"ports": [{"port": 1}]})),
        memory(),
        {"apply": Apply.GENERATION},
    ),
    "applied, the Service deleted by hand: re-applied, the status says it is missing": (
        observed(live={**live_children(SPEC), "Service": None}),
        memory(**SEEN),
        {"apply": Apply.REAPPLY, "drifted": lambda d: "Service" in d, "status.endpoint": None},
    ),
    "the Service deleted 2 s after the last apply: not yet": (
        observed(live={**live_children(SPEC), "Service": None}),
        memory(**{**SEEN, "applied_at": NOW.tick - 2}),
        {"apply": Apply.NONE},
    ),
    "the Deployment edited by hand: reverted at once, the revert recorded": (
        observed(live=live_children(SPEC, Deployment={"replicas": 5})),
        memory(**SEEN),
        {"apply": Apply.REAPPLY, "memory.reverted_at": NOW.tick},
    ),
    "edited again 10 s after a revert: not a tight fight": (
        observed(live=live_children(SPEC, Deployment={"replicas": 5})),
        memory(**SEEN, reverted_at=NOW.tick - 10),
        {"apply": Apply.NONE},
    ),
    "an apply running: no re-apply beside it": (
        observed(live={**live_children(SPEC), "Service": None}),
        memory(**SEEN, applying=1),
        {"apply": Apply.NONE},
    ),
    "refused for this generation 30 s ago: shown, not retried yet": (
        observed(),
        memory(
            attempted_generation=GEN,
            applied_at=NOW.tick - 30,
            apply_error=ApplyError(GEN, 422, "Deployment/a", "invalid", "ApplyFailed"),
        ),
        {"apply": Apply.NONE, "ready": ("False", "ApplyFailed")},
    ),
    "a spec the typed model refuses: Failed, nothing rendered": (
        observed({"model": {"hostPath": {"path": "/m"}}, "replicas": "many"}),
        memory(),
        {"apply": Apply.NONE, "desired": None, "status.phase": "Failed"},
    ),
    "the namespace unreadable: Unknown, nothing applied": (
        observed(unreadable="Pod in ns: HTTP 403: forbidden"),
        memory(),
        {"apply": Apply.NONE, "desired": None, "ready": ("Unknown", "NamespaceUnreadable")},
    ),
    "autoscaling without KEDA: said in status.autoscaling and the Autoscaling condition": (
        observed(AUTOSCALING, scaler=autoscaling_io.Seen(installed=False)),
        memory(**SEEN),
        {"status.autoscaling.reason": "KEDANotInstalled", "write_scaler": False, "condition.Autoscaling": "False"},
    ),
    "autoscaling, the ScaledObject missing: written alone": (
        observed(AUTOSCALING, live=live_children(AUTOSCALING), scaler=autoscaling_io.Seen(installed=True)),
        memory(**SEEN),
        {"apply": Apply.NONE, "write_scaler": True, "status.autoscaling.reason": "ScaledObjectPending"},
    ),
    "autoscaling, the ScaledObject refused 30 s ago: shown, not retried yet": (
        observed(AUTOSCALING, live=live_children(AUTOSCALING), scaler=autoscaling_io.Seen(installed=True)),
        memory(**SEEN, scaler_error="HTTP 403: forbidden", scaler_refused_at=NOW.tick - 30),
        {"write_scaler": False, "status.autoscaling.reason": "ScaledObjectRefused"},
    ),
    "autoscaling, a ScaledObject of that name not ours: NameConflict, never written": (
        observed(
            AUTOSCALING,
            live=live_children(AUTOSCALING),
            scaler=autoscaling_io.Seen(installed=True, problem="NameConflict: not ours", ours=False),
        ),
        memory(**SEEN),
        {"write_scaler": False, "memory.scaler_error": "NameConflict: not ours"},
    ),
    "autoscaling, KEDA could not be read: the last status.autoscaling stands": (
        observed(AUTOSCALING, live=live_children(AUTOSCALING), scaler=None),
        memory(**SEEN, last_status={"autoscaling": {"reason": "AbleToScale"}}),
        {"status.autoscaling.reason": "AbleToScale"},
    ),
    "KEDA could not be read, metric KVCacheUsage: no rule runs, the last status.autoscaling stands": (
        observed(
            {**SPEC, "autoscaling": {"maxReplicas": 2, "target": 50, "metric": "KVCacheUsage"}},
            live=live_children(AUTOSCALING),
            scaler=None,
        ),
        memory(**SEEN, last_status={"autoscaling": {"reason": "AbleToScale"}}),
        {"status.autoscaling.reason": "AbleToScale"},
    ),
    "a creating pod's Events read: its mount failure remembered (by act) and told": (
        observed(
            live=live_children(SPEC),
            pods=[creating("a-1", hash=rendered_hash())],
            pod_events={"uid-a-1": ("a-1", "hostPath type check failed: /models/tiny is not a directory")},
            events_read_at=NOW.tick - 1,
        ),
        memory(**SEEN),
        {
            "memory.mount_failures": {"a-1": "hostPath type check failed: /models/tiny is not a directory"},
            "memory.events_read_at": {"uid-a-1": NOW.tick - 1},
            "ready": ("False", "ModelNotFound"),
        },
    ),
    "pod Events refused (RBAC): the plan says so, act stops asking": (
        observed(live=live_children(SPEC), events_forbidden="HTTP 403: forbidden"),
        memory(**SEEN),
        {"events_forbidden": "HTTP 403: forbidden"},
    ),
    "requests defaulted: status.resourceDefaults says which": (
        observed(settings=SETTINGS.model_copy(update={"default_cpu_request": "500m"})),
        memory(),
        {"status.resourceDefaults.cpu": "500m"},
    ),
    "an operator change held by the rollout budget: status.rollout, the Deployment left alone": (
        observed(
            live=live_children(SPEC, Deployment={"replicas": 5}),
            budget=rolloutbudget.View(held=(HELD_HASH, rendered_hash()), status={"held": True, "message": "m"}),
        ),
        memory(**SEEN),
        {"apply": Apply.NONE, "status.rollout.held": True},
    ),
    "held, and a slot freed: the Deployment is re-applied": (
        observed(
            live=live_children(SPEC),
            budget=rolloutbudget.View(held=(HELD_HASH, rendered_hash()), free=True, status={"held": True}),
        ),
        memory(**SEEN),
        {"apply": Apply.REAPPLY, "drifted": lambda d: d.get("Deployment") == ["held: a rollout slot freed"]},
    ),
    "a granted rollout done (0 replicas wanted): the slot frees, no status.rollout": (
        observed(
            {**SPEC, "replicas": 0},
            live=live_children({**SPEC, "replicas": 0}),
            budget=rolloutbudget.View(granted=True, status={"held": False, "message": "rolling"}),
        ),
        memory(**SEEN),
        {"finish_rollout": True, "status.rollout": None},
    ),
}


def _get(plan: Any, path: str) -> Any:
    if path == "ready":
        return ready(plan)
    if path.startswith("condition."):
        c = next((c for c in plan.status["conditions"] if c["type"] == path.split(".", 1)[1]), {})
        return c.get("status")
    obj: Any = plan
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


@pytest.mark.parametrize("obs,mem,want", list(CASES.values()), ids=list(CASES))
def test_decide(obs, mem, want):
    before = copy.deepcopy(dataclasses.asdict(dataclasses.replace(mem, readback=None)))
    plan = decide(obs, mem, NOW)
    for path, value in want.items():
        got = _get(plan, path)
        assert value(got) if callable(value) else got == value, (path, got)
    # pure: the memory given is never changed (the decided record is the plan's)
    assert dataclasses.asdict(dataclasses.replace(mem, readback=None)) == before


def test_the_status_is_written_only_when_it_changed_and_its_events_only_on_transitions():
    first = decide(observed(live=live_children(SPEC)), memory(), NOW)
    assert first.patch
    stored = copy.deepcopy(first.status)
    later = Now(NOW.wall + dt.timedelta(hours=1), NOW.tick + 3600)  # no heartbeat: an hour later, the same facts
    again = decide(observed(live=live_children(SPEC), stored=stored), memory(**SEEN, last_status=stored), later)
    assert not again.patch and again.events == []
    deleted = decide(observed(live={**live_children(SPEC), "Service": None}, stored=stored), memory(**SEEN), later)
    assert deleted.patch and [e.reason for e in deleted.events] == ["ChildMissing"]


def test_one_render_holds_every_child_the_scaled_object_included():
    desired = render_children(NAME, NS, UID, api.parse_spec(AUTOSCALING), SETTINGS)
    # one list, one render
    assert [o["kind"] for o in desired.objects] == ["Service", "Deployment", "PodDisruptionBudget", "ScaledObject"]
    assert desired.scaled_object is desired.objects[-1]
    # the ScaledObject has its own write
    assert [o["kind"] for o in desired.applied] == ["Service", "Deployment", "PodDisruptionBudget"]
    assert render_children(NAME, NS, UID, api.parse_spec(SPEC), SETTINGS).scaled_object is None


A1, A2, RUNNING = creating("a-1"), creating("a-2"), pod("a-3")


# (remembered failures, remembered reads, pods, read this pass) -> (failures told, reads remembered)
MOUNT_CASES = {
    "nothing read, nothing remembered": ({}, {}, [A1], {}, {}, {}),
    "a failure read": ({}, {}, [A1], {"uid-a-1": ("a-1", "no dir")}, {"a-1": "no dir"}, {"uid-a-1": 50.0}),
    "a read that failed or found nothing: the last failure kept, the read recorded": (
        {"a-1": "no dir"},
        {"uid-a-1": 10.0},
        [A1],
        {"uid-a-1": ("a-1", None)},
        {"a-1": "no dir"},
        {"uid-a-1": 50.0},
    ),
    "not read this pass (read 5 s ago): kept as remembered": (
        {"a-1": "no dir"},
        {"uid-a-1": 45.0},
        [A1, A2],
        {"uid-a-2": ("a-2", "quota")},
        {"a-1": "no dir", "a-2": "quota"},
        {"uid-a-1": 45.0, "uid-a-2": 50.0},
    ),
    "a pod no longer creating (or gone): forgotten": (
        {"a-3": "no dir", "gone": "x"},
        {"uid-a-3": 45.0, "uid-gone": 1.0},
        [RUNNING],
        {},
        {},
        {},
    ),
}


@pytest.mark.parametrize(
    "failures,reads,pods,read,want_failures,want_reads", list(MOUNT_CASES.values()), ids=list(MOUNT_CASES)
)
def test_remember_mount_failures(failures, reads, pods, read, want_failures, want_reads):
    m = memory(mount_failures=dict(failures), events_read_at=dict(reads))
    before = (dict(m.mount_failures), dict(m.events_read_at))
    copied = dataclasses.replace(m)
    assert remember_mount_failures(copied, pods, read, 50.0) == want_failures
    assert (copied.mount_failures, copied.events_read_at) == (want_failures, want_reads)
    assert (m.mount_failures, m.events_read_at) == before  # a copy's dicts are new: the record given stays


@pytest.mark.parametrize(
    "obs,mem,want",
    [
        (observed(), memory(), Apply.GENERATION),  # a create: applied at once, from the caches alone
        (observed(live=live_children(SPEC)), memory(), Apply.UNCHANGED),  # a new leader, children as rendered
        (observed(live=live_children(SPEC)), memory(**SEEN), Apply.NONE),  # applied already
        (observed(unreadable="forbidden"), memory(), Apply.NONE),
    ],
)
def test_begin_decides_a_generations_apply_from_the_caches_and_decide_carries_it(obs, mem, want):
    """begin (what act.begin starts before the pods are read back) and then decide with its Start: the same plan as
    decide alone, the children rendered once (begin's)."""
    start = begin(obs, mem, NOW)
    assert start.apply is want
    carried = copy.deepcopy(mem)
    for field in DECIDED:  # act.begin writes the decided record back
        setattr(carried, field, getattr(start.memory, field))
    plan, alone = decide(obs, carried, NOW, start), decide(obs, mem, NOW)
    assert plan.apply is alone.apply is want and plan.status == alone.status
    assert plan.desired is start.desired


def test_an_eviction_is_remembered_until_the_replicas_are_ready():
    """Issue 44: a drained pod terminates in seconds and leaves the cache; the pass keeps naming its eviction
    (memory.evictions) while the replacement loads, and forgets it once the replicas are all Ready."""
    from ovserve_operator import nodes

    from .podfixtures import readings, report

    current = render_children(NAME, NS, UID, api.parse_spec(SPEC), SETTINGS).template_hash
    drained = pod("a-old", hash=current, ready=True, deleting=True)
    drained["spec"]["nodeName"] = "n2"
    drained["status"]["conditions"].append(
        {"type": nodes.DISRUPTION_TARGET, "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    cordoned = nodes.NodeView("n2", ready="True", unschedulable=True)
    replacement = pod("a-new", hash=current, ready=False)
    replacement["spec"]["nodeName"] = "n1"
    live = live_children(SPEC)
    first = decide(
        observed(
            live=live,
            pods=[drained, replacement],
            nodes={"n2": cordoned, "n1": nodes.NodeView("n1", "True")},
            nodes_known=True,
        ),
        memory(**SEEN),
        NOW,
    )
    assert set(first.memory.evictions) == {"a-old"}
    gone = decide(
        observed(live=live, pods=[replacement], nodes={"n1": nodes.NodeView("n1", "True")}, nodes_known=True),
        first.memory,
        NOW,
    )
    ready = next(c for c in gone.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PodRescheduled" and "a-old evicted by a drain of node n2" in ready["message"]
    back = pod("a-new", hash=current)
    back["spec"]["nodeName"] = "n1"
    done = decide(
        observed(
            live=live,
            pods=[back],
            reports=readings({"a-new": report()}),
            nodes={"n1": nodes.NodeView("n1", "True")},
            nodes_known=True,
        ),
        gone.memory,
        NOW,
    )
    assert done.memory.evictions == {}
    assert next(c for c in done.status["conditions"] if c["type"] == "Ready")["reason"] == "AllReplicasReady"
