"""The operator's own caches and the start-up gate (cache.py), and the child event handler that feeds them.

The gate's promise: an LLMServing is refreshed only once every child it had at start came through the watch
(or is known gone), so a refresh never runs on a cache that still lacks a pod kopf has not listed yet.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from ovserve_operator import cache, handlers, render, statusqueue
from ovserve_operator import spec as api
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


# steps: ("put", uid, key) | ("stamp",) | ("prune", {listed uids}) [prune uses the latest stamp]
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
            keys = c.prune(step[1], stamp)
    assert keys == last_keys
    assert {snap["uid"] for key in c for snap in c[key]} == left


class _Listing:
    """What the apiserver lists now, by kind (the glue around Cache.prune, without a cluster)."""

    def __init__(self, listed: dict[str, list[tuple[str, str, str]]]) -> None:
        self.listed = listed

    def list_owned(self, api_version, kind, namespaces, selector, owner_label):
        return self.listed.get(kind, [])


def test_prune_caches_marks_owners_of_children_deleted_unseen(ctx):
    saved = handlers.CTX.llmservings, handlers.CTX.deployments, handlers.CTX.services
    handlers.CTX.llmservings, handlers.CTX.deployments, handlers.CTX.services = (
        cache.Cache(),
        cache.Cache(),
        cache.Cache(),
    )
    try:
        ctx.llmservings.put("s-a", A, {})
        ctx.llmservings.put("s-b", B, {})
        ctx.pods.put("p-a", A, {})
        ctx.deployments.put("d-a", A, {})
        ctx.deployments.put("d-b", B, {})
        listing = _Listing(
            {
                api.KIND: [("s-a", "ns", "a")],  # b was deleted unseen
                "Pod": [("p-a", "ns", "a")],
                "Deployment": [("d-b", "ns", "b")],  # a's Deployment was deleted unseen
            }
        )
        lost = asyncio.run(handlers._prune_caches(listing, ()))
        assert lost == 2
        assert list(ctx.llmservings) == [A]  # the controller forgets b
        assert A not in ctx.deployments and B in ctx.deployments
        assert A in ctx.pods
        assert ctx.queue.dirty == {A}  # a is refreshed: its Deployment is missing and is re-applied
    finally:
        handlers.CTX.llmservings, handlers.CTX.deployments, handlers.CTX.services = saved


# steps: ("seed", kind, uid, key) | ("confirm", kind, uid) | ("sweep", kind, {listed uids})
# then the keys ready and the keys that the last step made ready
GATE_CASES = {
    "nothing seeded: every key is ready": ([], {A: True}, []),
    "a key waits for each of its children": (
        [("seed", "Pod", "p1", A), ("seed", "Pod", "p2", A), ("seed", "Deployment", "d1", A), ("confirm", "Pod", "p1")],
        {A: False, B: True},
        [],
    ),
    "the last child that came makes it ready": (
        [
            ("seed", "Pod", "p1", A),
            ("seed", "Service", "s1", A),
            ("confirm", "Service", "s1"),
            ("confirm", "Pod", "p1"),
        ],
        {A: True},
        [A],
    ),
    "keys are ready independently": (
        [("seed", "Pod", "p1", A), ("seed", "Pod", "p2", B), ("confirm", "Pod", "p2")],
        {A: False, B: True},
        [B],
    ),
    "a child of another kind with the same uid does not count": (
        [("seed", "Pod", "x", A), ("confirm", "Service", "x")],
        {A: False},
        [],
    ),
    "confirmed twice (a re-list): no harm": (
        [("seed", "Pod", "p1", A), ("seed", "Pod", "p2", A), ("confirm", "Pod", "p1"), ("confirm", "Pod", "p1")],
        {A: False},
        [],
    ),
    "a child deleted before kopf listed it: the sweep drops it": (
        [("seed", "Pod", "p1", A), ("seed", "Pod", "p2", A), ("confirm", "Pod", "p1"), ("sweep", "Pod", {"p1"})],
        {A: True},
        [A],
    ),
    "the sweep keeps what is still listed (kopf will deliver it)": (
        [("seed", "Pod", "p1", A), ("sweep", "Pod", {"p1"})],
        {A: False},
        [],
    ),
}


@pytest.mark.parametrize("steps,ready,released", list(GATE_CASES.values()), ids=list(GATE_CASES))
def test_sync_gate(steps, ready, released):
    gate = cache.SyncGate()
    last: list = []
    for step in steps:
        if step[0] == "seed":
            gate.seed(step[1], [(step[2], step[3])])
            last = []
        elif step[0] == "confirm":
            last = [k] if (k := gate.confirm(step[1], step[2])) is not None else []
        else:
            last = gate.sweep(step[1], step[2])
    assert {k: gate.ready(k) for k in ready} == ready
    assert last == released


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
    saved = handlers.CTX.queue, handlers.CTX.pods, handlers.CTX.gate
    handlers.CTX.queue, handlers.CTX.pods, handlers.CTX.gate = (
        statusqueue.WorkQueue(5.0),
        cache.Cache(),
        cache.SyncGate(),
    )
    yield handlers.CTX
    handlers.CTX.queue, handlers.CTX.pods, handlers.CTX.gate = saved


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
        handlers.on_child_event("Pod", event_type, kopf.Body(body))
    assert [k for k in (A, B) if k in ctx.pods] == ([key] if key else [])
    assert ctx.queue.dirty == marked


def test_the_last_seeded_child_to_come_marks_its_owner(ctx):
    ctx.gate.seed("Pod", [("u1", A), ("u2", A)])
    handlers.on_child_event("Pod", None, kopf.Body(pod("u1", "a")))
    assert not ctx.gate.ready(A)
    ctx.queue.dirty.clear()
    handlers.on_child_event("Pod", None, kopf.Body(pod("u2", "a")))
    assert ctx.gate.ready(A) and A in ctx.queue.dirty


def test_controller_holds_a_key_until_ready_and_keeps_its_mark():
    async def scenario():
        q = statusqueue.WorkQueue(5.0)
        gate = cache.SyncGate()
        gate.seed("Pod", [("p1", A)])
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
        assert await c.cycle() == [B]  # A waits for its pod; not gone either
        await c.drain()
        assert gone == [] and A in q.dirty
        gate.confirm("Pod", "p1")
        assert await c.cycle() == [A]
        await c.drain()
        assert seen == [B, A]

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
    return handlers._child_snapshot(kopf.Body(obj))


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
def test_children_current(changes, spec, deployment, service, want):
    saved = handlers.CTX.settings, handlers.CTX.deployments, handlers.CTX.services
    settings = Settings(allow_host_path=True)
    handlers.CTX.settings = settings.model_copy(update=changes)
    handlers.CTX.deployments, handlers.CTX.services = cache.Cache(), cache.Cache()
    try:
        for kind, store, live in (
            ("Deployment", handlers.CTX.deployments, deployment),
            ("Service", handlers.CTX.services, service),
        ):
            if live is not None:
                uid = live.pop("uid", UID)
                store.put(f"{kind}-uid", A, _live(kind, spec, settings, uid, **live))
        assert handlers._children_current(A, UID, api.parse_spec(spec)) is want
    finally:
        handlers.CTX.settings, handlers.CTX.deployments, handlers.CTX.services = saved


@pytest.mark.parametrize(
    "group,plural,want",
    [
        (
            "",
            "pods",
            "app.kubernetes.io/managed-by=ovserve-operator,app.kubernetes.io/component=runtime,ovserve.dev/llmserving",
        ),
        ("apps", "deployments", "app.kubernetes.io/managed-by=ovserve-operator,ovserve.dev/llmserving"),
        ("", "services", "app.kubernetes.io/managed-by=ovserve-operator,ovserve.dev/llmserving"),
        ("ovserve.dev", "llmservings", None),  # every LLMServing
    ],
)
def test_kopf_watches_only_the_operators_children(group, plural, want):
    ks = kopf.OperatorSettings()
    handlers.narrow_watches(ks)
    resource = kopf.Resource(group, "v1" if group != "ovserve.dev" else "v1alpha1", plural)
    assert (ks.watching.label_selectors.collect(resource) or [None]) == [want]
