"""The operator's own caches and the start-up gate (cache.py), and the child event handler that feeds them.

The gate's promise: no LLMServing is refreshed before every child kind was listed once, so a refresh never runs
on a cache that still lacks a pod its reflector has not listed yet.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from ovserve_operator import cache, intake, reflector, render, statusqueue
from ovserve_operator import spec as api
from ovserve_operator.controller import Controller
from ovserve_operator.decide import children_current, render_children
from ovserve_operator.observe import Observed, ours
from ovserve_operator.settings import Settings

A, B = ("ns", "a"), ("ns", "b")


def test_cache_put_delete_and_owner_change():
    c = cache.Cache()
    c.put("u1", A, {"n": 1})
    c.put("u2", A, {"n": 2})
    c.put("u3", B, {"n": 3})
    assert c[A] == [{"n": 1}, {"n": 2}] and A in c and len(c) == 2
    c.put("u1", A, {"n": 11})  # a newer event of the same object replaces it
    assert c[A] == [{"n": 11}, {"n": 2}]
    c.put("u2", B, {"n": 22})  # its owner label changed: it moves
    assert c[A] == [{"n": 11}] and c[B] == [{"n": 3}, {"n": 22}]
    assert c.delete("u1") == A and A not in c and c.get(A, []) == []
    assert c.delete("unknown") is None


C = ("other", "c")


def test_a_read_is_a_copy():
    """Snapshots are kept pickled: a reader that changes what it read changes nothing cached."""
    c = cache.Cache()
    c.put("u1", A, {"spec": {"replicas": 1}})
    c[A][0]["spec"]["replicas"] = 5
    assert c[A] == [{"spec": {"replicas": 1}}]


# steps: ("put", uid, key) | ("stamp",) | ("prune", {listed uids}[, namespace]) [prune uses the latest stamp]
PRUNES = {
    "deleted in a watch gap (not listed, put before the LIST): dropped": (
        [("put", "p1", A), ("put", "p2", A), ("stamp",), ("prune", {"p1"})],
        [A],
        {"p1"},
    ),
    "still listed: kept": ([("put", "p1", A), ("stamp",), ("prune", {"p1"})], [], {"p1"}),
    "put after the LIST started (created meanwhile): kept though not listed": (
        [("put", "p1", A), ("stamp",), ("put", "p2", B), ("prune", {"p1"})],
        [],
        {"p1", "p2"},
    ),
    "updated after the LIST started, then missing from it: kept (its DELETED event will come)": (
        [("put", "p1", A), ("stamp",), ("put", "p1", A), ("prune", set())],
        [],
        {"p1"},
    ),
    "several gone under two keys: each key once, sorted": (
        [("put", "p1", B), ("put", "p2", A), ("put", "p3", A), ("put", "p4", B), ("stamp",), ("prune", {"p4"})],
        [A, B],
        {"p4"},
    ),
    "a LIST of one namespace judges only that namespace's entries": (
        [("put", "p1", A), ("put", "p2", C), ("stamp",), ("prune", set(), "other")],
        [C],
        {"p1"},
    ),
    "a deleted uid is not pruned again": (
        [("put", "p1", A), ("stamp",), ("prune", set()), ("prune", set())],
        [],
        set(),
    ),
}


@pytest.mark.parametrize("steps,last_keys,left", PRUNES.values(), ids=PRUNES.keys())
def test_cache_prune(steps, last_keys, left):
    c = cache.Cache()
    stamp, keys = 0, None
    for step in steps:
        if step[0] == "put":
            c.put(step[1], step[2], {"uid": step[1]})
        elif step[0] == "stamp":
            stamp = c.stamp()
        else:
            keys = c.prune(step[1], stamp, *step[2:])
    assert keys == last_keys
    assert {snap["uid"] for key in c for snap in c[key]} == left


@pytest.mark.parametrize(
    "labels,want",
    [
        ({"app.kubernetes.io/managed-by": "ovserve-operator", "ovserve.dev/llmserving": "a"}, True),
        ({"app.kubernetes.io/managed-by": "ovserve-operator", "ovserve.dev/llmserving": ""}, True),
        ({"app.kubernetes.io/managed-by": "ovserve-operator"}, False),  # no owner
        ({"app.kubernetes.io/managed-by": "helm", "ovserve.dev/llmserving": "a"}, False),
        ({}, False),
    ],
)
def test_labels_match_and_selector(labels, want):
    selector = {"app.kubernetes.io/managed-by": "ovserve-operator", "ovserve.dev/llmserving": kopf.PRESENT}
    assert cache.labels_match(labels, selector, kopf.PRESENT) is want
    assert (
        cache.label_selector(selector, kopf.PRESENT)
        == "app.kubernetes.io/managed-by=ovserve-operator,ovserve.dev/llmserving"
    )


def pod(uid: str, owner: str | None, component: str = "runtime") -> dict:
    labels = {render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_COMPONENT: component}
    if owner is not None:
        labels[render.LABEL_OWNER] = owner
    return {"metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid, "labels": labels}, "spec": {}}


@pytest.fixture
def ctx():
    """A Controller of its own (no API client: these tests make no call, or give it a fake)."""
    ctl = Controller(Settings(), kube=None)  # type: ignore[arg-type]
    ctl.queue = statusqueue.WorkQueue(5.0)
    return ctl


# (events of one pod, its key in the cache afterwards (None: absent), the keys marked by the last event)
POD_EVENTS = {
    "listed": ([(None, pod("u", "a"))], A, {A}),
    "added then deleted: gone, the owner marked": ([("ADDED", pod("u", "a")), ("DELETED", pod("u", "a"))], None, {A}),
    "relabelled away from the selector: gone like a deleted one": (
        [("ADDED", pod("u", "a")), ("MODIFIED", pod("u", None))],
        None,
        {A},
    ),
    "not a runtime pod: never cached, nothing marked": ([("ADDED", pod("u", "a", component="x"))], None, set()),
    "owner label changed": ([("ADDED", pod("u", "a")), ("MODIFIED", pod("u", "b"))], B, {B}),
}


@pytest.mark.parametrize("events,key,marked", list(POD_EVENTS.values()), ids=list(POD_EVENTS))
def test_child_events_feed_the_cache(ctx, events, key, marked):
    for event_type, body in events:
        ctx.queue.dirty.clear()
        ctx.on_child_event("Pod", event_type, kopf.Body(body))
    assert [k for k in (A, B) if k in ctx.pods] == ([key] if key else [])
    assert ctx.queue.dirty == marked


def test_a_child_change_reaches_the_loop_packed_and_reads_back_as_its_snapshot(ctx):
    """The reflector's thread packs the snapshot: the loop's queue holds bytes, and the cache reads back exactly
    what the snapshot function made of the body."""
    body = pod("u", "a")
    body["status"] = {"podIP": "10.0.0.7", "phase": "Running"}
    change = intake.child_change("Pod", "ADDED", body)
    assert isinstance(change.packed, bytes) and change.key == A
    ctx.apply_child_change(change)
    assert ctx.pods[A] == [intake.CHILD_KINDS["Pod"][2](body)]
    assert intake.child_change("Pod", "DELETED", body).packed == b""


# Only what the operator reads of a child's labels and annotations is cached (issue 38): whoever can create a pod
# with the runtime's labels must not grow the operator's memory with annotations or labels of their own.
HUGE = "x" * 100_000
OURS = {render.ANNOTATION_TEMPLATE_HASH: "abc123", "ovserve.dev/generation": "3"}


def _hostile(kind: str) -> dict:
    body = pod("u", "a")
    body["apiVersion"], body["kind"] = ("v1", kind) if kind != "Deployment" else ("apps/v1", kind)
    meta = body["metadata"]
    meta["labels"].update({render.LABEL_INSTANCE: "a", "team": "x", **{f"l{i}": "v" for i in range(100)}})
    meta["annotations"] = {**OURS, "big": HUGE, render.LABEL_OWNER: "a", **{f"a{i}": "v" for i in range(100)}}
    meta["ownerReferences"] = [
        {"apiVersion": "ovserve.dev/v1alpha1", "kind": "LLMServing", "name": "a", "uid": "o", "controller": True},
        *({"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}", "uid": f"c{i}"} for i in range(50)),
    ]
    return body


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "Service"])
def test_a_snapshot_keeps_only_the_labels_and_annotations_the_operator_reads(kind):
    snap = intake.CHILD_KINDS[kind][2](_hostile(kind))
    meta = snap["metadata"]
    assert meta["labels"] == {
        render.LABEL_MANAGED_BY: render.MANAGED_BY,
        render.LABEL_COMPONENT: "runtime",
        render.LABEL_OWNER: "a",
        render.LABEL_INSTANCE: "a",
    }
    assert meta["annotations"] == OURS
    if kind != "Pod":  # ownership.conflict reads the controller's reference only
        assert meta["ownerReferences"] == [_hostile(kind)["metadata"]["ownerReferences"][0]]
    assert len(cache.pack(snap)) < 2_000


def test_an_annotation_of_ours_longer_than_any_the_operator_writes_is_not_kept():
    body = _hostile("Pod")
    body["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH] = HUGE
    assert render.ANNOTATION_TEMPLATE_HASH not in intake.pod_snapshot(body)["metadata"]["annotations"]


# steps: ("expect", [names][, namespace]) | ("listed", name) | ("refuse", name, namespace) | ("readable", name);
# then whether keys A (namespace "ns") and C (namespace "other") are ready, and what the last step returned
LIST_GATE = {
    "nothing expected: open": ([], True, True, None),
    "closed until every reflector listed once": (
        [("expect", ["Pod", "Service"]), ("listed", "Pod")],
        False,
        False,
        False,
    ),
    "the last LIST opens it (once)": (
        [("expect", ["Pod", "Service"]), ("listed", "Pod"), ("listed", "Service")],
        True,
        True,
        True,
    ),
    "a later LIST (after a 410) changes nothing": (
        [("expect", ["Pod"]), ("listed", "Pod"), ("listed", "Pod")],
        True,
        True,
        False,
    ),
    "an unknown name does not open it": ([("expect", ["Pod"]), ("listed", "Deployment")], False, False, False),
    # issue 38: one namespace never waits for another's reflectors
    "each namespace waits for its own reflectors only": (
        [("expect", ["Pod in ns"], "ns"), ("expect", ["Pod in other"], "other"), ("listed", "Pod in other")],
        False,
        True,
        True,
    ),
    "a refused reflector holds nothing back: its namespace's refresh says so": (
        [("expect", ["Pod in ns"], "ns"), ("expect", ["Pod in other"], "other"), ("refuse", "Pod in other", "other")],
        False,
        True,
        True,
    ),
    "readable again: its namespace waits for its LIST again": (
        [("expect", ["Pod in other"], "other"), ("refuse", "Pod in other", "other"), ("readable", "Pod in other")],
        True,
        False,
        True,
    ),
    "a cluster-wide reflector holds every namespace": (
        [("expect", ["Pod in ns"], "ns"), ("expect", ["Pod in every namespace"], ""), ("listed", "Pod in ns")],
        False,
        False,
        False,
    ),
}


@pytest.mark.parametrize("steps,ready_a,ready_c,last", list(LIST_GATE.values()), ids=list(LIST_GATE))
def test_list_gate(steps, ready_a, ready_c, last):
    gate = cache.ListGate()
    result = None
    for step in steps:
        if step[0] == "expect":
            gate.expect(step[1], *step[2:])
        elif step[0] == "listed":
            result = gate.listed(step[1])
        elif step[0] == "refuse":
            result = gate.refuse(step[1], step[2], "HTTP 403: forbidden")
        else:
            result = gate.readable(step[1])
    assert (gate.ready(A), gate.ready(C)) == (ready_a, ready_c)
    assert result is last


def test_unreadable_names_the_refused_reflectors_of_a_namespace_and_the_cluster_wide_ones():
    gate = cache.ListGate()
    assert gate.refuse("Pod in other", "other", "HTTP 403: pods is forbidden")
    assert not gate.refuse("Pod in other", "other", "HTTP 403: pods is forbidden")  # told once
    assert gate.unreadable("other") == "Pod in other: HTTP 403: pods is forbidden" and gate.unreadable("ns") == ""
    gate.refuse("LLMServing in every namespace", "", "HTTP 401: Unauthorized")
    assert gate.unreadable("ns") == "LLMServing in every namespace: HTTP 401: Unauthorized"
    assert gate.refused() == ["LLMServing in every namespace", "Pod in other"]
    gate.listed("Pod in other")  # a complete LIST: readable
    assert gate.unreadable("other") == "LLMServing in every namespace: HTTP 401: Unauthorized"


def _reflector(kind: str, namespace: str = "") -> reflector.Reflector:
    return reflector.Reflector(kind, namespace, "", lambda **_: None, sink=None)  # never started: no API call


def test_first_lists_open_the_gate_and_mark_every_llmserving(ctx):
    pods, services = _reflector("Pod"), _reflector("Service")
    ctx.llmservings.put("s-a", A, {})
    ctx.llmservings.put("s-b", B, {})
    ctx.gate.expect([pods.name, services.name])
    ctx.listed(pods, [intake.child_change("Pod", None, pod("u1", "a"))], True)
    ctx.synced(pods, {"u1"})
    assert not ctx.gate.ready(A)
    ctx.queue.dirty.clear()
    ctx.listed(services, [], True)
    ctx.synced(services, set())
    assert ctx.gate.ready(A)
    assert ctx.queue.dirty == {A, B}


def llmserving(uid: str, name: str, generation: int = 1, status: dict | None = None) -> dict:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": generation, "resourceVersion": "7"},
        "spec": {"model": {"huggingFace": {"repo": "o/m"}}},
        "status": status or {},
    }


def test_llmserving_events_feed_the_cache_activate_and_mark(ctx):
    """The LLMServings' reflector: a listed or changed LLMServing is cached (its snapshot packed in the reflector's
    thread), activated and marked; a deleted one leaves the cache (the controller forgets it), unmarked."""
    r = _reflector(api.KIND, "ns")
    ctx.listed(r, [intake.to_change(api.KIND, None, llmserving("s-a", "a"))], True)
    assert ctx.llmservings[A] == [intake.llmserving_snapshot(llmserving("s-a", "a"), *A)]
    assert A in ctx.queue.active and ctx.queue.dirty == {A}
    ctx.queue.dirty.clear()
    ctx.apply_change(intake.to_change(api.KIND, "MODIFIED", llmserving("s-a", "a", generation=2)))
    assert ctx.llmservings[A][0]["metadata"]["generation"] == 2 and ctx.queue.dirty == {A}
    ctx.queue.dirty.clear()
    ctx.apply_change(intake.to_change(api.KIND, "DELETED", llmserving("s-a", "a", generation=2)))
    assert A not in ctx.llmservings and not ctx.queue.dirty


def test_an_llmserving_relist_drops_what_was_deleted_unseen(ctx):
    """After a 410 the LLMServings' reflector lists again: one that LIST no longer returns was deleted in the gap
    and leaves the cache (the controller forgets it); nothing is marked for it."""
    r = _reflector(api.KIND, "ns")
    ctx.listed(r, [intake.to_change(api.KIND, None, llmserving(u, n)) for u, n in (("s-a", "a"), ("s-b", "b"))], True)
    ctx.synced(r, {"s-a", "s-b"})
    ctx.queue.dirty.clear()
    ctx.listed(r, [intake.to_change(api.KIND, None, llmserving("s-a", "a"))], True)  # b deleted unseen
    ctx.synced(r, {"s-a"})
    assert list(ctx.llmservings) == [A]
    assert ctx.queue.dirty == {A}  # listed again: refreshed; b is not marked (gone)


def test_a_relist_drops_children_deleted_unseen_and_marks_their_owners(ctx):
    """After a 410 the reflector lists again: what that LIST no longer returns was deleted in the gap."""
    ctx.gate.expect([])
    pods = _reflector("Pod", "ns")
    ctx.listed(pods, [intake.child_change("Pod", None, pod(u, o)) for u, o in (("u1", "a"), ("u2", "b"))], True)
    ctx.synced(pods, {"u1", "u2"})
    ctx.pods.put("u3", ("other", "c"), {})  # another namespace's reflector put it: not judged by this LIST
    ctx.queue.dirty.clear()
    # u2 was deleted while no watch ran
    ctx.listed(pods, [intake.child_change("Pod", None, pod("u1", "a"))], True)
    assert ctx.queue.dirty == {A}
    ctx.synced(pods, {"u1"})
    assert ctx.queue.dirty == {A, B}  # b's pod is missing: its refresh says so
    assert A in ctx.pods and B not in ctx.pods and ("other", "c") in ctx.pods


def test_controller_holds_every_key_until_the_gate_opens_and_keeps_marks():
    async def scenario():
        q = statusqueue.WorkQueue(5.0)
        gate = cache.ListGate()
        gate.expect(["Pod in every namespace"])
        seen: list = []
        gone: list = []

        async def refresh(key, _snap):
            seen.append(key)

        c = statusqueue.StatusController(
            q, {A: [{}], B: [{}]}, refresh, on_gone=gone.append, ready=gate.ready, coalesce_s=0
        )
        q.activate(A)
        q.activate(B)
        q.mark(A)
        assert await c.cycle() == []  # both wait for the pods' LIST; not gone either
        await c.drain()
        assert gone == [] and A in q.dirty
        gate.listed("Pod in every namespace")
        assert await c.cycle() == [A, B]  # the marked one first, then the one due for its first refresh
        await c.drain()
        assert seen == [A, B]

    asyncio.run(scenario())


# ------------------------------------------------------------------ a takeover re-applies only what differs

UID = "uid-a"
SPEC = {"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 1}


def _live(kind: str, spec: dict, settings: Settings, uid: str = UID, **changes: Any) -> dict:
    """The child of `kind` as the watch would deliver it after an apply of `spec` (with `changes` to its spec)."""
    (obj,) = [o for o in render.render(A[1], A[0], UID, api.parse_spec(spec), settings) if o["kind"] == kind]
    obj = copy.deepcopy(obj)
    obj["spec"].update(changes)
    obj["metadata"]["ownerReferences"][0]["uid"] = uid
    return intake.child_snapshot(kopf.Body(obj))


# (settings changes, spec, Deployment live (None: absent), Service live) -> re-applying would change nothing
CURRENT_CASES = {
    "both ours and as rendered: nothing to apply": ({}, SPEC, {}, {}, True),
    "the Deployment missing": ({}, SPEC, None, {}, False),
    "the Service edited by hand": ({}, SPEC, {}, {"ports": [{"port": 1}]}, False),
    "the Deployment scaled by hand": ({}, SPEC, {"replicas": 3}, {}, False),
    "the Deployment of another LLMServing": ({}, SPEC, {"uid": "other"}, {}, False),
    "autoscaling: the full apply (its ScaledObject)": (
        {},
        {**SPEC, "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": 4}},
        {},
        {},
        False,
    ),
    "NetworkPolicies managed: the full apply": ({"network_policies": True}, SPEC, {}, {}, False),
    "the policy denies the spec now": ({"allow_host_path": False}, SPEC, {}, {}, False),
}


@pytest.mark.parametrize("changes,spec,deployment,service,want", list(CURRENT_CASES.values()), ids=list(CURRENT_CASES))
def test_children_current(changes, spec, deployment, service, want, pdb_live: bool = True):
    settings = Settings(allow_host_path=True)
    live: dict[str, Any] = {}
    budget = any(
        o["kind"] == "PodDisruptionBudget" for o in render.render(A[1], A[0], UID, api.parse_spec(spec), settings)
    )
    pdb = {} if pdb_live and budget else None  # as rendered (with more than one replica), or absent
    for kind, fields in (("Deployment", deployment), ("Service", service), ("PodDisruptionBudget", pdb)):
        store = cache.Cache()
        if fields is not None:
            uid = fields.pop("uid", UID)
            store.put(f"{kind}-uid", A, _live(kind, spec, settings, uid, **fields))
        live[kind] = ours(store.get(A, []), UID)
    settings = settings.model_copy(update=changes)
    typed = api.parse_spec(spec)
    snapshot = {"metadata": {"namespace": A[0], "name": A[1], "uid": UID}}
    observed = Observed(snapshot, settings, typed, {}, live=live)
    assert children_current(observed, render_children(A[1], A[0], UID, typed, settings)) is want


def test_children_current_needs_the_disruption_budget_too():
    """Issue 44: with more than one replica the PodDisruptionBudget is a child like the others: missing, a
    takeover applies; present, nothing is applied."""
    test_children_current({}, {**SPEC, "replicas": 2}, {}, {}, False, pdb_live=False)
    test_children_current({}, {**SPEC, "replicas": 2}, {}, {}, True, pdb_live=True)


# ------------------------------------------------------------------ a refused namespace degrades that one only


class _EventSink:
    """Kube.create_event only: the Events the operator posts about itself (on its Lease)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    def create_event(self, namespace: str, body: dict) -> None:
        self.posted.append((namespace, body["type"], body["reason"], body["involvedObject"]["kind"]))


def test_a_refused_namespace_degrades_that_namespace_only(ctx):
    """Issue 38: a watched namespace deleted with its RoleBinding refuses its LISTs for ever. The other namespace's
    LLMServings are refreshed once their own LISTs are done; the refused one's are marked (their refresh says
    NamespaceUnreadable); a metric, /healthz and an Event on the operator's Lease say which; readable again, all
    of that is undone."""

    async def scenario() -> None:
        ctx.kube = sink = _EventSink()  # type: ignore[assignment]
        try:
            ns_pods, other_pods = _reflector("Pod", "ns"), _reflector("Pod", "other")
            ctx.llmservings.put("s-a", A, {})
            ctx.llmservings.put("s-c", C, {})
            ctx.gate.expect([ns_pods.name], "ns")
            ctx.gate.expect([other_pods.name], "other")
            ctx.queue.dirty.clear()
            ctx.refused(other_pods, "HTTP 403: pods is forbidden")
            ctx.refused(other_pods, "HTTP 403: pods is forbidden")  # every retry: counted, told once
            assert ctx.queue.dirty == {C} and ctx.gate.ready(C) and not ctx.gate.ready(A)
            assert "forbidden" in ctx.gate.unreadable("other") and not ctx.gate.unreadable("ns")
            ctx.listed(ns_pods, [], True)
            ctx.synced(ns_pods, set())
            assert ctx.gate.ready(A) and ctx.queue.dirty == {A, C}
            metric = 'ovserve_operator_reflector_refused{kind="Pod",namespace="other"}'
            assert ctx.health.counters[metric] == 1.0
            assert ctx.health.healthy() == (
                True,
                {**ctx.health.healthy()[1], "unreadable": [other_pods.name]},
            )
            await asyncio.sleep(0.2)
            assert sink.posted == [("default", "Warning", "NamespaceUnreadable", "Lease")]

            ctx.queue.dirty.clear()
            ctx.readable(other_pods)
            assert ctx.queue.dirty == {C} and not ctx.gate.unreadable("other")
            assert not ctx.gate.ready(C)  # its LIST is awaited again
            assert ctx.health.counters[metric] == 0.0 and "unreadable" not in ctx.health.healthy()[1]
            await asyncio.sleep(0.2)
            assert sink.posted[1:] == [("default", "Normal", "NamespaceReadable", "Lease")]
        finally:
            ctx.health.unreadable = []

    asyncio.run(scenario())


def test_every_label_and_annotation_the_operator_writes_on_a_child_is_kept():
    """The snapshots keep a fixed set of keys: whatever render writes (and drift compares) must be in it, or every
    child would look drifted."""
    settings = Settings(allow_host_path=True)
    spec = api.parse_spec({**SPEC, "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": 4}})
    for obj in render.render(A[1], A[0], UID, spec, settings):
        for meta in (obj["metadata"], (obj.get("spec") or {}).get("template", {}).get("metadata") or {}):
            assert set(meta.get("labels") or {}) <= intake.KEPT_LABELS, obj["kind"]
    deployment = next(o for o in render.render(A[1], A[0], UID, spec, settings) if o["kind"] == "Deployment")
    template_annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert set(template_annotations) <= intake.KEPT_ANNOTATIONS  # what a pod carries: podview reads the hash
