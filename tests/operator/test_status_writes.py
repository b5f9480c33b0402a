"""End-to-end: a settled LLMServing is not written (issue 29), on the real cluster, through a leader failover.

Two operators (local processes, leader election on a Lease of their own) and two settled objects: one Ready
(a runtime pod of the stand-in image, hack/standin, read back on every resync) and one Pending
(Unschedulable). Writes are counted as the apiserver counts them: every write of an object, its status
included, moves its resourceVersion. Over the period of the old per-object heartbeat (one write per
object per minute), while the leader recomputes each object every second, nothing is written; after the
leader is killed, the new one recomputes every object and writes nothing either. A real change (the
runtime pod deleted) is still written.
"""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest

from tests.conftest import HACK, make_namespace, run_on_host_network

from .conftest import OperatorProcess
from .test_operator_e2e import NOWHERE, UNSTARTED, condition, llms, status
from .test_security import STANDIN, TINY

pytestmark = [pytest.mark.cluster]

OLD_HEARTBEAT_S = 60.0  # the period at which the old design rewrote every settled status
OBJECTS = ("ready", "pending")


def metrics(op: OperatorProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{op.port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in lines if ln and not ln.startswith("#"))}


def refreshes(op: OperatorProcess) -> float:
    return metrics(op).get("ovserve_operator_status_refreshes_total", 0.0)


def versions(cluster, namespace: str) -> dict[str, str]:
    """resourceVersion of each LLMServing and of its children: any write moves it."""
    out = {}
    for kind in ("llmservings", "deployments", "services"):
        for obj in cluster.get(kind, namespace=namespace)["items"]:
            out[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return out


def recomputed(cluster, op: OperatorProcess, times: int) -> None:
    """Until `op` has recomputed the status of every object `times` times more (counted, not timed)."""
    start = refreshes(op)
    cluster.wait_for(lambda: refreshes(op) >= start + times * len(OBJECTS), 60, f"{times} refreshes of each object")


def settled(cluster, namespace: str, op: OperatorProcess) -> dict[str, str]:
    """The versions once three full recomputations of every object in a row wrote nothing."""

    def quiet():
        before = versions(cluster, namespace)
        recomputed(cluster, op, 3)
        return before if versions(cluster, namespace) == before else None

    return cluster.wait_for(quiet, 120, "three recomputations of every object that write nothing")


@pytest.fixture(scope="module")
def standin(cluster) -> str:
    """The stand-in runtime image (hack/standin): ready at once, a well-formed report."""
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "standin"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return STANDIN


@pytest.fixture(scope="module")
def writes_ns(cluster, crd):
    ns = make_namespace(cluster, "t-writes", psa="privileged")  # the hostPath model volume of the stand-in
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def operators(cluster, writes_ns, tmp_path, request):
    """Two operators on one Lease of their own, recomputing every object every second."""
    lease = f"ovserve-operator-{uuid.uuid4().hex[:6]}"
    env = {"OVSERVE_ALLOWED_IMAGES": "localhost/ovserve-standin", "OVSERVE_STATUS_INTERVAL_SECONDS": "1"}
    procs = [OperatorProcess(writes_ns, "op-a", lease, tmp_path, env)]
    cluster.wait_for(lambda: (procs[0].health() or {}).get("kopf") or not procs[0].alive(), 60, "op-a leader")
    procs.append(OperatorProcess(writes_ns, "op-b", lease, tmp_path, env))  # op-a leads: op-b waits
    yield procs
    for p in procs:
        p.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        request.node.add_report_section("teardown", "cluster diagnostics", cluster.diagnostics(writes_ns))
        for p in procs:
            request.node.add_report_section("teardown", f"operator {p.identity} log", p.logs()[-10000:])


def test_settled_objects_are_not_written_through_a_failover(cluster, writes_ns, operators, standin):
    a, b = operators
    assert (a.health() or {}).get("kopf"), a.logs()
    cluster.wait_for(lambda: (b.health() or {}).get("role") == "standby", 60, "op-b standby")
    spec = {"model": {"hostPath": {"path": TINY}, "servedName": "standin"}, "image": standin}
    cluster.apply(llms("ready", spec), writes_ns)
    cluster.apply(llms("pending", {"model": UNSTARTED, "nodeSelector": NOWHERE}), writes_ns)
    cluster.wait_for(lambda: status(cluster, writes_ns, "ready").get("readyDisplay") == "1/1", 180, "ready 1/1")
    cluster.wait_for(
        lambda: condition(status(cluster, writes_ns, "pending"), "Ready").get("reason") == "Unschedulable",
        60,
        "pending: Unschedulable",
    )
    quiet = settled(cluster, writes_ns, a)
    m = metrics(a)
    # its writes came back as watch events and were recognised as its own (no refresh for them)
    assert m.get("ovserve_operator_status_echoes_total", 0) >= 1, m
    changed_at = {n: status(cluster, writes_ns, n)["computedAt"] for n in OBJECTS}

    # the old heartbeat's period: the leader recomputes each object every second, reads the pod back, writes nothing
    start, t0 = refreshes(a), time.monotonic()
    while time.monotonic() - t0 < OLD_HEARTBEAT_S:
        time.sleep(5)
        assert versions(cluster, writes_ns) == quiet, "a settled object or child was written"
    assert refreshes(a) - start >= 10 * len(OBJECTS), "the leader did recompute them meanwhile"
    assert {n: status(cluster, writes_ns, n)["computedAt"] for n in OBJECTS} == changed_at

    # failover: the new leader recomputes every object (and re-applies the children) and writes nothing
    a.kill()
    cluster.wait_for(lambda: (b.health() or {}).get("kopf"), 60, "op-b to take over")
    recomputed(cluster, b, 3)
    assert versions(cluster, writes_ns) == quiet, "the new leader wrote a settled object or child"
    assert metrics(b).get("ovserve_operator_status_patches_total", 0) == 0, metrics(b)

    # level-triggered still: a real change is written (the runtime pod goes, a new one comes)
    pod = next(
        p["metadata"]["name"]
        for p in cluster.get("pods", namespace=writes_ns)["items"]
        if p["metadata"]["labels"].get("ovserve.dev/llmserving") == "ready"
    )
    cluster.kubectl("delete", "pod", pod, "-n", writes_ns, "--wait=false")
    cluster.wait_for(
        lambda: status(cluster, writes_ns, "ready")["computedAt"] != changed_at["ready"], 60, "the change written"
    )
    cluster.wait_for(lambda: status(cluster, writes_ns, "ready").get("readyDisplay") == "1/1", 120, "ready again")
    assert versions(cluster, writes_ns)["llmservings/pending"] == quiet["llmservings/pending"]
