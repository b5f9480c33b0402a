"""The controller's Node watch (issue 44): a Node event that changes what status reads of it marks exactly the
LLMServings with pods on that node; a new leader's first LIST marks those on faulty or deleted nodes; a refused
Node LIST degrades no namespace. Driven through the real Controller with its real caches and intake.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ovserve_operator import intake, nodes, reflector
from ovserve_operator.controller import Controller
from ovserve_operator.settings import Settings

from .podfixtures import pod
from .test_node_faults import node


class Marks:
    def __init__(self, ctl: Controller) -> None:
        self.keys: list[tuple[str, str]] = []
        ctl.queue.mark = self.keys.append  # type: ignore[method-assign]


def controller() -> tuple[Controller, Marks]:
    ctl = Controller(Settings(), kube=None)  # type: ignore[arg-type]
    for name, node_name in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        ctl.llmservings.put(f"uid-{name}", ("ns", name), {"metadata": {"name": name, "namespace": "ns"}})
        p = pod(f"{name}-pod", uid=f"uid-{name}-pod")
        p["spec"]["nodeName"] = node_name
        ctl.pods.put(f"uid-{name}-pod", ("ns", name), intake.pod_snapshot(p))
    return ctl, Marks(ctl)


def node_reflector(ctl: Controller) -> reflector.Reflector:
    return reflector.Reflector(intake.NODE, "", "", lambda **_: None, sink=None)  # type: ignore[arg-type]


def test_the_pod_snapshot_keeps_its_node():
    p = pod("x")
    p["spec"]["nodeName"] = "n7"
    assert nodes.node_name(intake.pod_snapshot(p)) == "n7"


def test_a_node_fault_marks_the_servings_on_that_node_only():
    ctl, marks = controller()
    r = node_reflector(ctl)
    ctl.listed(r, [intake.to_change("Node", None, node("n1")), intake.to_change("Node", None, node("n2"))], True)
    ctl.synced(r, {"uid-n1", "uid-n2"})
    assert ctl.nodes_known and marks.keys == []  # healthy nodes: nothing to say
    ctl.apply_change(intake.to_change("Node", "MODIFIED", node("n1")))
    assert marks.keys == []  # nothing status reads changed (a heartbeat)
    ctl.apply_change(intake.to_change("Node", "MODIFIED", node("n1", "Unknown")))
    assert sorted(marks.keys) == [("ns", "a"), ("ns", "c")]
    marks.keys.clear()
    ctl.apply_change(intake.to_change("Node", "MODIFIED", node("n2", cordoned=True)))
    assert marks.keys == [("ns", "b")]
    marks.keys.clear()
    ctl.apply_change(intake.to_change("Node", "DELETED", node("n2", cordoned=True)))
    assert marks.keys == [("ns", "b")] and "n2" not in ctl.nodes


def test_a_new_leader_marks_the_servings_on_faulty_or_deleted_nodes_after_its_first_list():
    ctl, marks = controller()
    r = node_reflector(ctl)
    ctl.listed(r, [intake.to_change("Node", None, node("n1", "False"))], True)
    assert marks.keys == []  # not before the LIST ended: n2 may be on a later page
    ctl.synced(r, {"uid-n1"})  # n2 is not listed: deleted
    assert sorted(marks.keys) == [("ns", "a"), ("ns", "b"), ("ns", "c")]


def test_a_refused_node_list_degrades_no_namespace():
    ctl, _ = controller()
    r = node_reflector(ctl)

    async def scenario() -> None:
        ctl.refused(r, "nodes is forbidden")
        ctl.refused(r, "nodes is forbidden")  # said once

    asyncio.run(scenario())
    assert ctl.gate.unreadable("ns") == "" and not ctl.nodes_known and ctl.nodes_refused == "nodes is forbidden"
    ctl.readable(r)
    assert ctl.nodes_refused is None


def test_observe_gives_decide_the_nodes_of_the_pods(monkeypatch: Any):
    from ovserve_operator import observe

    ctl, _ = controller()
    r = node_reflector(ctl)
    ctl.listed(r, [intake.to_change("Node", None, node("n1", "Unknown"))], True)
    ctl.synced(r, {"uid-n1"})
    snap = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"},
        "spec": {"model": {"hostPath": {"path": "/m"}}},
    }
    o = observe.cached(ctl, snap, ctl.memories.of(("ns", "a"), "uid-a"))
    assert o.nodes_known and set(o.nodes) == {"n1"} and o.nodes["n1"].ready == "Unknown"


def test_a_disruption_budgets_status_update_marks_nothing_its_spec_change_does():
    """The disruption controller rewrites a PodDisruptionBudget's status at every pod readiness change: a pass
    for each would only cost (bulk loads: thousands); a change of what drift reads (its spec) marks the owner."""
    from ovserve_operator import render
    from ovserve_operator import spec as api

    ctl, marks = controller()
    typed = api.parse_spec({"model": {"hostPath": {"path": "/m"}}})
    pdb = render.render_pdb("a", "ns", "uid-a", typed)
    pdb["metadata"]["uid"] = "uid-pdb"
    ctl.apply_change(intake.to_change("PodDisruptionBudget", "ADDED", pdb))
    assert marks.keys == [("ns", "a")]
    for healthy in (1, 2, 1):
        pdb["status"] = {"currentHealthy": healthy, "disruptionsAllowed": healthy - 1, "observedGeneration": 1}
        ctl.apply_change(intake.to_change("PodDisruptionBudget", "MODIFIED", pdb))
    assert marks.keys == [("ns", "a")]
    pdb["spec"]["maxUnavailable"] = 3  # edited by hand: drift
    ctl.apply_change(intake.to_change("PodDisruptionBudget", "MODIFIED", pdb))
    assert marks.keys == [("ns", "a"), ("ns", "a")]
    assert ctl.pdbs[("ns", "a")][0]["spec"]["maxUnavailable"] == 3
