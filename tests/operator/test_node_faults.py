"""Node faults on the real two-node cluster (issue 44): an LLMServing with a replica on each node, then node2's
kubelet stopped (the Node goes Unknown), and node2 drained. Status names the node (never Loading), the evicted
replica is reported as such while its replacement starts on node1, Ready again once it is; the drain goes through
the operator's PodDisruptionBudget one pod at a time.

node2 (hack/node2.sh) is tainted so that only pods that tolerate it land there: the serving tolerates it, and
shortens its toleration of the unreachable / not-ready taints to EVICT_AFTER_S so that the taint manager evicts in
seconds instead of 5 minutes.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time

from tests.cluster.node2 import NAME as NODE2
from tests.cluster.node2 import TOLERATION, node2  # noqa: F401  (the module-scoped fixture)

from .test_operator_e2e import condition, has_event, llms, pvc_model, runtime, status  # noqa: F401
from .test_zero_loss import NAME as LOADED
from .test_zero_loss import Load, _answers

EVICT_AFTER_S = 15
OUTAGE_S = 45  # the control-plane outage
RECOVERY_S = 180  # status is watched at most this long after it
SETTLE_S = 75  # and at least this long (the node controller's grace is 50 s)
TOLERATIONS = [
    TOLERATION,
    *(
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": EVICT_AFTER_S}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ),
]


def ready(cluster, namespace: str, name: str) -> dict:
    return condition(status(cluster, namespace, name), "Ready")


def pods_by_node(cluster, namespace: str, name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    pods = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"ovserve.dev/llmserving={name}", "-o", "json")
    for p in json.loads(pods.stdout)["items"]:
        if not p["metadata"].get("deletionTimestamp"):
            out.setdefault(p["spec"].get("nodeName") or "", []).append(p["metadata"]["name"])
    return out


def two_replicas(cluster, namespace: str, name: str) -> str:
    """A serving of 2 replicas, one on each node (the default spread over kubernetes.io/hostname), Ready and
    answering through its Service; returns the Service's base URL."""
    # one per node for sure (the default spread is a preference: an image only node1 has yet outweighs it), node
    # faults' taints honoured (a node tainted unreachable or cordoned counts for nothing: the replacement goes on)
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "nodeTaintsPolicy": "Honor",
        "labelSelector": {"matchLabels": {"ovserve.dev/llmserving": name}},
        "matchLabelKeys": ["pod-template-hash"],
    }
    spec = {
        "model": pvc_model("tiny-llm"),
        "replicas": 2,
        "tolerations": TOLERATIONS,
        "topologySpreadConstraints": [spread],
        "scheduler": {"maxNumSeqs": 8},
    }
    cluster.apply(llms(name, spec), namespace)
    cluster.wait_for(lambda: ready(cluster, namespace, name).get("reason") == "AllReplicasReady", 300, "2/2 Ready")
    on = pods_by_node(cluster, namespace, name)
    assert len(on.get(NODE2, [])) == 1 and len(on) == 2, f"spread over both nodes: {on}"
    ip = cluster.get("service", name, namespace)["spec"]["clusterIP"]
    cluster.wait_for(lambda: _answers(f"http://{ip}:8000/v2/health/ready"), 60, "the Service to answer")
    return f"http://{ip}:8000/v3"


def test_a_node_that_stops_reporting_is_named_and_its_replica_rescheduled(cluster, operator, namespace, runtime, node2):  # noqa: F811
    """Streaming clients through the Service while node2's kubelet is stopped: its runtime keeps running (only
    the node stops reporting), so nothing is lost; status names node2 within seconds of it going Unknown, then the
    eviction, and is Ready again once the replacement on node1 is."""
    url = two_replicas(cluster, namespace, LOADED)
    load = Load(url).start()
    load.wait_served(10)
    node2.stop_kubelet()
    try:
        t_unknown = time.monotonic() + node2.wait_ready("Unknown", 120)
        # status names the node within seconds of the Node going Unknown: Degraded (node1's replica serves)
        cond = cluster.wait_for(
            lambda: (
                (c := ready(cluster, namespace, LOADED)).get("reason") == "Degraded" and NODE2 in c["message"] and c
            ),
            30,
            "Degraded naming node2",
        )
        print(f"named {time.monotonic() - t_unknown:.1f} s after Unknown: {cond['message']}")
        assert "unreachable" in cond["message"] and "Loading" not in cond["reason"]
        assert status(cluster, namespace, LOADED)["readyReplicas"] == 1
        cluster.wait_for(lambda: has_event(cluster, namespace, LOADED, "Warning", "Degraded"), 30, "Warning Event")
        # past the toleration the taint manager evicts it; the replacement starts on node1; never a plain Loading
        seen: list[str] = []

        def back() -> bool:
            c = ready(cluster, namespace, LOADED)
            seen.append(f"{c.get('reason')}: {c.get('message', '')[:160]}")
            return c.get("reason") == "AllReplicasReady"

        cluster.wait_for(back, EVICT_AFTER_S + 180, "2/2 Ready again on node1", interval=1)
        print("\n".join(dict.fromkeys(seen)))
        assert not any(s.startswith("Loading") for s in seen), seen
        assert any("evicted" in s for s in seen), seen  # the eviction was named while the replacement started
        assert pods_by_node(cluster, namespace, LOADED).keys() == {"node1"}
        load.wait_served(10)
        load.stop()
        assert not load.failures, f"{len(load.failures)} of {len(load.ok) + len(load.failures)}: {load.failures[:5]}"
    finally:
        load._stop.set()
        node2.start_kubelet()


def test_a_drain_goes_through_the_disruption_budget_and_is_named(cluster, operator, namespace, runtime, node2):  # noqa: F811
    """Streaming clients through the Service lose nothing while node2 is drained (the budget, preStop and the
    runtime's drain hold); status names the drain, never Loading; the replica is back on node1."""
    url = two_replicas(cluster, namespace, LOADED)
    pdb = cluster.get("pdb", LOADED, namespace)
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["status"]["expectedPods"] == 2
    seen: list[str] = []
    load = Load(url).start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        load.wait_served(10)
        drained = pool.submit(
            node2.drain,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--pod-selector=ovserve.dev/llmserving",  # ours only: other tests may leave bare pods there
            "--timeout=240s",
            timeout=300,
            check=False,
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # the status while the drain evicts, until Ready again on node1
                c = ready(cluster, namespace, LOADED)
                seen.append(f"{c.get('reason')}: {c.get('message', '')[:160]}")
                if drained.done() and c.get("reason") == "AllReplicasReady":
                    break
                time.sleep(0.5)
            proc = drained.result()
            assert proc.returncode == 0, proc.stdout + proc.stderr
            load.wait_served(10)  # and the replacement serves
            load.stop()
            print("\n".join(dict.fromkeys(seen)))
            assert not load.failures, (
                f"{len(load.failures)} of {len(load.ok) + len(load.failures)}: {load.failures[:5]}"
            )
            assert pods_by_node(cluster, namespace, LOADED).keys() == {"node1"}
            assert not any(s.startswith("Loading") for s in seen), seen
            assert any(f"drain of node {NODE2}" in s for s in seen), seen
            assert seen[-1].startswith("AllReplicasReady"), seen
        finally:
            load._stop.set()
            drained.result()
            node2.uncordon()


def test_a_control_plane_outage_loses_nothing_and_status_never_says_loading(
    cluster,
    operator,
    start_operator,
    namespace,
    runtime,  # noqa: F811
):
    """The kube-apiserver killed for OUTAGE_S with streaming clients on a Ready serving: the data plane loses
    nothing while it is down; afterwards the status never reads Loading for what is a node condition; the operator
    is back (leader, reconciling) and a serving created after the recovery is Ready within the usual time. What the
    operator did meanwhile (its liveness, its Lease) is printed for docs/operator.md."""
    from tests.cluster.node2 import apiserver_outage

    spec = {"model": pvc_model("tiny-llm"), "scheduler": {"maxNumSeqs": 8}}
    cluster.apply(llms(LOADED, spec), namespace)
    cluster.wait_for(lambda: ready(cluster, namespace, LOADED).get("reason") == "AllReplicasReady", 300, "Ready")
    ip = cluster.get("service", LOADED, namespace)["spec"]["clusterIP"]
    cluster.wait_for(lambda: _answers(f"http://{ip}:8000/v2/health/ready"), 60, "the Service to answer")
    load = Load(f"http://{ip}:8000/v3").start()
    roles: list[tuple[float, str]] = []
    stop_watch = threading.Event()

    def watch_operator() -> None:  # the operator's own view, each second (its health server is not the apiserver)
        while not stop_watch.is_set():
            roles.append((time.monotonic(), (operator.health() or {}).get("role", "down")))
            time.sleep(1)

    watcher = threading.Thread(target=watch_operator, daemon=True)
    watcher.start()
    try:
        load.wait_served(10)
        t0 = time.monotonic()
        apiserver_outage(OUTAGE_S)
        t_back = time.monotonic()
        served_during = sum(1 for t in load.ok if t0 < t < t_back)
        assert not load.failures, load.failures[:5]  # nothing lost while the control plane was down
        assert served_during >= 10, f"only {served_during} requests served during the outage"
    finally:
        load._stop.set()
    load.stop()
    if not operator.alive():  # it could not renew its Lease: stepped down and exited 1, as designed; its pod's
        # kubelet would start it again: so does the test, with the same Lease
        assert operator.proc.returncode == 1 and "leadership lost" in operator.logs(), operator.logs()[-3000:]
        t_restart = time.monotonic()
        restarted = start_operator("op-restarted")
        cluster.wait_for(lambda: (restarted.health() or {}).get("role") == "leader", 60, "the restarted leader")
        print(f"restarted operator leader {time.monotonic() - t_restart:.1f} s after its start")
    seen: list[str] = []
    deadline = time.monotonic() + RECOVERY_S
    while time.monotonic() < deadline:  # what status says while the node controller catches up
        try:
            c = ready(cluster, namespace, LOADED)
        except Exception as e:  # the apiserver may still refuse a moment
            c = {"reason": "unreadable", "message": str(e)}
        seen.append(f"{c.get('reason')}: {c.get('message', '')[:160]}")
        # past the node controller's grace (50 s): a node it marks Unknown meanwhile is seen
        if time.monotonic() > t_back + SETTLE_S and c.get("reason") == "AllReplicasReady":
            break
        time.sleep(1)
    stop_watch.set()
    watcher.join(5)
    changes = [(round(t - t0, 1), r) for i, (t, r) in enumerate(roles) if i == 0 or roles[i - 1][1] != r]
    print(f"operator role over the outage (s after the kill): {changes}")
    print("\n".join(dict.fromkeys(seen)))
    assert not any(s.startswith("Loading") for s in seen), seen
    assert seen[-1].startswith("AllReplicasReady"), seen
    # reconciling again: a serving created after the recovery is Ready within the usual time
    t1 = time.monotonic()
    cluster.apply(llms("after", {"model": pvc_model("tiny-llm")}), namespace)
    cluster.wait_for(lambda: ready(cluster, namespace, "after").get("reason") == "AllReplicasReady", 180, "Ready")
    print(f"a serving created after the outage Ready in {time.monotonic() - t1:.1f} s")
