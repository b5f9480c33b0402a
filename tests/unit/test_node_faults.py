"""Node faults in status (issue 44): what a Node says about the pods on it (nodes.py), read by the status rules.

Table-driven over plain dicts, as the apiserver serves Nodes and pods: a pod not ready because its node is
NotReady, unreachable or gone reads NodeNotReady naming the node and since when (Degraded with replicas serving
elsewhere); pods evicted by a node fault or a drain read PodRescheduled while their replacements start; the reason
clears when replicas are Ready again.
"""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import intake, nodes
from ovserve_operator import spec as api
from ovserve_operator.reasons import REGISTRY

from .podfixtures import CB_READY, LOADING, pod, readings
from .podfixtures import compute as compute_status

NOW = dt.datetime(2026, 12, 7, 12, 0, 0, tzinfo=dt.UTC)
SINCE = "2026-12-07T11:59:20Z"


def node(name: str, ready: str = "True", *, cordoned: bool = False, taints: tuple[str, ...] = ()) -> dict:
    """A Node as the apiserver serves it (with the bulk a real one carries, which the snapshot drops)."""
    reason = {"True": "KubeletReady", "False": "KubeletNotReady", "Unknown": "NodeStatusUnknown"}[ready]
    message = {"Unknown": "Kubelet stopped posting node status."}.get(ready, "")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name}},
        "spec": {
            "unschedulable": cordoned,
            "taints": [{"key": k, "effect": "NoExecute"} for k in taints]
            + [{"key": "example.com/other", "effect": "NoSchedule"}],
        },
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready, "reason": reason, "message": message, "lastTransitionTime": SINCE},
            ],
            "images": [{"names": ["x" * 100], "sizeBytes": 1}] * 50,
        },
    }


def on(p: dict, node_name: str, *, disruption: str | None = None) -> dict:
    """`p` bound to `node_name` (and, with `disruption`, being deleted by Kubernetes for that reason)."""
    p["spec"]["nodeName"] = node_name
    if disruption is not None:
        p["metadata"]["deletionTimestamp"] = "2026-12-07T11:59:50Z"
        p["status"]["conditions"].append({"type": nodes.DISRUPTION_TARGET, "status": "True", "reason": disruption})
    return p


def view(body: dict) -> nodes.NodeView:
    return intake.node_change(None, body).view


def spec(replicas: int) -> api.LLMServingSpec:
    return api.parse_spec({"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": replicas})


def ready_of(result) -> tuple[str, str, str]:
    c = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    return c["status"], c["reason"], c["message"]


# ------------------------------------------------------------------------------------------ nodes.py


def test_snapshot_keeps_only_what_status_reads():
    snap = nodes.snapshot(node("n1", "Unknown", cordoned=True, taints=(nodes.TAINT_UNREACHABLE,)))
    assert snap == {
        "name": "n1",
        "uid": "uid-n1",
        "ready": "Unknown",
        "since": SINCE,
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "unschedulable": True,
        "taints": [nodes.TAINT_UNREACHABLE],
    }
    assert intake.to_change("Node", "DELETED", node("n1")) == intake.NodeChange("uid-n1", "n1", None)


@pytest.mark.parametrize(
    ("body", "known", "expected"),
    [
        (node("n1"), True, None),
        (node("n1", cordoned=True), True, None),  # cordoned alone: its pods still serve
        (
            node("n1", "Unknown"),
            True,
            f"node n1 is unreachable: its kubelet stopped reporting (Ready Unknown since {SINCE}",
        ),
        (node("n1", "False"), True, f"node n1 is NotReady since {SINCE} (KubeletNotReady)"),
        (node("n1", taints=(nodes.TAINT_UNREACHABLE,)), True, "node n1 is unreachable (tainted"),
        (node("n1", taints=(nodes.TAINT_NOT_READY,)), True, "node n1 is not ready (tainted"),
        (None, True, "node n1 is gone"),
        (None, False, None),  # the Nodes cannot be read: an absent Node says nothing
    ],
)
def test_fault(body, known, expected):
    found = nodes.fault("n1", view(body) if body else None, known)
    assert (found is None) if expected is None else (found is not None and found.startswith(expected)), found


@pytest.mark.parametrize(
    ("disruption", "body", "expected"),
    [
        (nodes.BY_EVICTION_API, node("n1", cordoned=True), "evicted by a drain of node n1 (cordoned)"),
        (nodes.BY_EVICTION_API, node("n1"), "evicted from node n1 through the Eviction API"),
        (nodes.BY_TAINT_MANAGER, node("n1", "Unknown"), "evicted: node n1 is unreachable"),
        (nodes.BY_POD_GC, None, "deleted with node n1"),
        (None, node("n1", "Unknown"), "terminating: node n1 is unreachable"),
        (None, node("n1"), None),  # a rollout or a scale-down deletes it: not an eviction
    ],
)
def test_eviction(disruption, body, expected):
    p = on(pod("p1"), "n1", disruption=disruption)
    p["metadata"]["deletionTimestamp"] = "2026-12-07T11:59:50Z"
    found = nodes.eviction(p, view(body) if body else None, True)
    assert (found is None) if expected is None else (found is not None and found.startswith(expected)), found
    live = on(pod("p2"), "n1", disruption=None)
    assert nodes.eviction(live, view(node("n1", "Unknown")), True) is None  # not terminating


# ------------------------------------------------------------------------------------------ the rules

BAD, GOOD = node("bad", "Unknown", taints=(nodes.TAINT_UNREACHABLE,)), node("good")


def marked_not_ready(p: dict) -> dict:
    """`p` as the node controller leaves it after its node did not report: the pod not Ready, its containers (as
    the kubelet last said) still ready."""
    for c in p["status"]["conditions"]:
        if c["type"] == "Ready":
            c["status"] = "False"
    return p


DRAINED = node("bad", cordoned=True, taints=(nodes.TAINT_UNSCHEDULABLE,))


@pytest.mark.parametrize(
    ("case", "replicas", "pods", "reports", "node_bodies", "known", "ready", "phase", "says"),
    [
        (
            "the only replica's node stopped reporting: NodeNotReady names it, never Loading",
            1,
            [on(pod("a", ready=False), "bad")],
            {"a": CB_READY},
            [BAD, GOOD],
            True,
            ("False", "NodeNotReady"),
            "Pending",
            ["node bad is unreachable", SINCE, "1 of 1 pods on a faulty node"],
        ),
        (
            "still Ready by its last status, but on a node NotReady: not counted as serving",
            1,
            [on(pod("a"), "bad")],
            {"a": CB_READY},
            [BAD],
            True,
            ("False", "NodeNotReady"),
            "Pending",
            ["node bad is unreachable"],
        ),
        (
            "one replica on a healthy node: Degraded, naming the node",
            2,
            [on(pod("a", ready=False), "bad"), on(pod("b"), "good")],
            {"a": CB_READY, "b": CB_READY},
            [BAD, GOOD],
            True,
            ("False", "Degraded"),
            "Degraded",
            ["1/2 replicas ready", "NodeNotReady", "a: node bad is unreachable"],
        ),
        (
            "the node was deleted with the pod on it",
            1,
            [on(pod("a", ready=False), "gone")],
            {"a": None},
            [GOOD],
            True,
            ("False", "NodeNotReady"),
            "Pending",
            ["node gone is gone"],
        ),
        (
            "evicted by the taint manager, the replacement loading elsewhere: PodRescheduled, not Loading",
            1,
            [on(pod("a", ready=False), "bad", disruption=nodes.BY_TAINT_MANAGER), on(pod("b", ready=False), "good")],
            {"a": CB_READY, "b": LOADING},
            [BAD, GOOD],
            True,
            ("False", "PodRescheduled"),
            "Loading",
            ["0/1 replicas ready", "a evicted: node bad is unreachable", "replacement b starting"],
        ),
        (
            "a drain evicted one of two: Degraded naming the drain",
            2,
            [
                on(pod("a"), "bad", disruption=nodes.BY_EVICTION_API),
                on(pod("b"), "good"),
                on(pod("c", ready=False), "good"),
            ],
            {"a": CB_READY, "b": CB_READY, "c": LOADING},
            [DRAINED, GOOD],
            True,
            ("False", "Degraded"),
            "Degraded",
            ["1/2 replicas ready", "a evicted by a drain of node bad (cordoned)", "replacement c starting"],
        ),
        (
            "the replacement is Ready: the reason clears though the evicted pod still terminates",
            1,
            [on(pod("a", ready=False), "bad", disruption=nodes.BY_TAINT_MANAGER), on(pod("b"), "good")],
            {"a": CB_READY, "b": CB_READY},
            [BAD, GOOD],
            True,
            ("True", "AllReplicasReady"),
            "Ready",
            ["1/1 replicas ready"],
        ),
        (
            "the node came back: Ready again",
            1,
            [on(pod("a"), "bad")],
            {"a": CB_READY},
            [node("bad")],
            True,
            ("True", "AllReplicasReady"),
            "Ready",
            [],
        ),
        (
            "the node is back but the kubelet has not marked the pod Ready again: the node mark is named, not Loading",
            1,
            [marked_not_ready(on(pod("a"), "bad"))],
            {"a": CB_READY},
            [node("bad")],
            True,
            ("False", "NodeNotReady"),
            "Pending",
            ["a: marked not ready by the node controller while node bad did not report"],
        ),
        (
            "a readiness probe failing is the pod's own state, not a node mark",
            1,
            [on(pod("a", ready=False), "good")],
            {"a": CB_READY},
            [GOOD],
            True,
            ("False", "Loading"),
            "Loading",
            [],
        ),
        (
            "the Nodes cannot be read: nothing is claimed about them (the pod's own state speaks)",
            1,
            [on(pod("a", ready=False), "bad")],
            {"a": LOADING},
            [],
            False,
            ("False", "Loading"),
            "Loading",
            [],
        ),
        (
            "a rollout's terminating pod is not an eviction",
            1,
            [on(pod("a", ready=False, deleting=True), "good"), on(pod("b", ready=False), "good")],
            {"a": CB_READY, "b": LOADING},
            [GOOD],
            True,
            ("False", "Loading"),
            "Loading",
            [],
        ),
    ],
    ids=lambda x: x if isinstance(x, str) and " " in x else "",
)
def test_status_names_node_faults(case, replicas, pods, reports, node_bodies, known, ready, phase, says):
    node_names = {nodes.node_name(p) for p in pods}
    views = {b["metadata"]["name"]: view(b) for b in node_bodies}
    result = compute_status(
        spec(replicas), pods, readings(reports), now=NOW, nodes={n: views.get(n) for n in node_names}, nodes_known=known
    )
    status, reason, message = ready_of(result)
    assert (status, reason) == ready, message
    assert result.status["phase"] == phase
    for text in says:
        assert text in message, (text, message)
    if reason in ("NodeNotReady", "PodRescheduled", "Degraded"):  # a Warning Event on the transition
        assert any(e.type == "Warning" and e.reason == reason for e in result.events), result.events


def test_reasons_are_registered_with_their_phases():
    assert REGISTRY["NodeNotReady"].phase == api.Phase.PENDING
    assert REGISTRY["PodRescheduled"].phase == api.Phase.LOADING


def test_an_eviction_stays_named_after_the_evicted_pod_is_gone_until_the_replicas_are_ready():
    """A drained pod terminates in seconds, its replacement loads longer: the pass remembers the eviction
    (memory.evictions, decide) and status keeps naming it instead of a plain Loading; Ready clears it."""
    remembered = {"a": "evicted by a drain of node bad (cordoned)"}  # decide: memory.evictions with the pods' own
    loading = compute_status(
        spec(2),
        [on(pod("b"), "good"), on(pod("c", ready=False), "good")],
        readings({"b": CB_READY, "c": LOADING}),
        now=NOW,
        nodes={"good": view(GOOD)},
        nodes_known=True,
        evicted=remembered,
    )
    status, reason, message = ready_of(loading)
    assert (status, reason) == ("False", "Degraded") and "a evicted by a drain of node bad" in message, message
    assert "replacement c starting" in message
    ready = compute_status(
        spec(2),
        [on(pod("b"), "good"), on(pod("c"), "good")],
        readings({"b": CB_READY, "c": CB_READY}),
        now=NOW,
        nodes={"good": view(GOOD)},
        nodes_known=True,
        evicted=remembered,
    )
    assert ready_of(ready)[:2] == ("True", "AllReplicasReady")
