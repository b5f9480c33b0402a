"""Two real nodes: node2 of hack/node2.sh joins the shared cluster, tainted, with its own pod network, and its
faults (kubelet stopped, node killed, link cut, drain) behave as on a real cluster. Plain pods only (the base
image's python3), so nothing here depends on the operator."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest

from tests.cluster.node2 import IP, ON_NODE1, ON_NODE2, TAINT_KEY, node2  # noqa: F401  (the fixture)
from tests.conftest import HACK, make_namespace, run_on_host_network, wait_for

pytestmark = pytest.mark.cluster

BASE_IMAGE = "localhost/ovserve-base:1"
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from " + os.environ["HOSTNAME"]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print('connected')"
# The controller-manager's node-monitor-grace-period (50 s, the 1.34 default) after the kubelet's last lease
# renewal (every 10 s), checked every 5 s (node-monitor-period): Unknown 40-55 s after the kubelet stops.
UNKNOWN_WITHIN_S = 75


def container(command: list[str]) -> dict:
    return {
        "name": "main",
        "image": BASE_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": RESTRICTED,
    }


def server_pod(name: str, placement: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    **container(["python3", "-c", SERVER]),
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }
            ],
            **placement,
        },
    }


def service(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def http_get(url: str, timeout: float = 3) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def answers(url: str) -> bool:
    try:
        http_get(url, timeout=2)
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def base_image(cluster) -> str:
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "base"], timeout=1800)
    assert proc.returncode == 0, proc.stderr
    return BASE_IMAGE


@pytest.fixture(scope="module")
def ns(cluster):
    name = make_namespace(cluster, "t-two-nodes")
    yield name

    def deleted() -> bool:  # retried: an apiserver outage elsewhere must not leak a budget that blocks drains
        proc = cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
        return proc.returncode == 0

    wait_for(deleted, 120, f"namespace {name} deleted", interval=5)


class Servers:
    """An HTTP server pod on each node (s1 on node1, s2 on node2) and a Service for each."""

    def __init__(self, cluster, ns: str) -> None:
        self.cluster, self.ns = cluster, ns

    def pod(self, name: str) -> dict:
        return self.cluster.get("pod", name, self.ns)

    def ip(self, name: str) -> str:
        return self.pod(name)["status"]["podIP"]

    def cluster_ip(self, name: str) -> str:
        return self.cluster.get("service", name, self.ns)["spec"]["clusterIP"]

    def ready(self, name: str) -> bool:
        pod = self.pod(name)
        conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        return conds.get("Ready") == "True"

    def exec(self, name: str, *argv: str) -> str:
        return self.cluster.kubectl("exec", name, "-n", self.ns, "--", *argv, timeout=60).stdout.strip()

    def wait_serving(self, name: str, timeout: float = 120) -> str:
        wait_for(lambda: self.ready(name), timeout, f"pod {name} Ready")
        ip = self.ip(name)
        wait_for(lambda: answers(f"http://{ip}:8080/"), 30, f"pod {name} answering on {ip}")
        return ip


@pytest.fixture(scope="module")
def servers(cluster, base_image, node2, ns) -> Servers:  # noqa: F811
    cluster.apply([server_pod("s1", ON_NODE1), server_pod("s2", ON_NODE2), service("s1"), service("s2")], ns)
    s = Servers(cluster, ns)
    for name in ("s1", "s2"):
        s.wait_serving(name)
    return s


def test_node2_is_ready_tainted_and_has_its_own_address(cluster, node2):  # noqa: F811
    print(f"node2 up in {node2.seconds_to_start:.1f}s")
    node = node2.node()
    assert node2.ready_status() == "True"
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert {"type": "InternalIP", "address": IP} in node["status"]["addresses"]
    assert node["metadata"]["labels"]["ovserve.dev/test-node2"] == "true"
    assert not node["spec"].get("unschedulable")
    # node1 is as before: untainted, so the shared cluster's pods keep landing there
    assert not [t for t in cluster.get("node", "node1")["spec"].get("taints", []) if t["key"] == TAINT_KEY]


def test_pods_without_the_toleration_never_land_on_node2(cluster, node2, ns, base_image):  # noqa: F811
    stray = server_pod("stray", {"nodeSelector": {"kubernetes.io/hostname": "node2"}})
    plain = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"plain-{i}"},
            "spec": {
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 1,
                "containers": [container(["sleep", "300"])],
            },
        }
        for i in range(3)
    ]
    cluster.apply([stray, *plain], ns)

    def unschedulable():
        conds = cluster.get("pod", "stray", ns)["status"].get("conditions", [])
        return [c for c in conds if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"]

    cond = wait_for(unschedulable, 30, "pod stray to be refused by the scheduler")[0]
    # node1 is not selected, node2's taint is not tolerated (1.34 does not name the taint here)
    assert "1 node(s) had untolerated taint" in cond["message"], cond["message"]
    names = [p["metadata"]["name"] for p in plain]

    def scheduled():
        nodes = [cluster.get("pod", n, ns)["spec"].get("nodeName") for n in names]
        return nodes if all(nodes) else None

    nodes = wait_for(scheduled, 30, "the plain pods to be scheduled")
    assert nodes == ["node1"] * 3
    cluster.kubectl("delete", "pod", "stray", *(p["metadata"]["name"] for p in plain), "-n", ns, "--wait=false")


def test_pods_on_the_two_nodes_reach_each_other_directly_and_through_services(cluster, servers, node2):  # noqa: F811
    s1, s2 = servers.pod("s1"), servers.pod("s2")
    assert (s1["spec"]["nodeName"], s2["spec"]["nodeName"]) == ("node1", "node2")
    assert s2["status"]["hostIP"] == IP and s2["status"]["podIP"].startswith("10.244.1.")
    ip1, ip2 = servers.ip("s1"), servers.ip("s2")
    svc1, svc2 = servers.cluster_ip("s1"), servers.cluster_ip("s2")
    # from the cluster's namespace, where the tests and the operator run
    assert http_get(f"http://{ip2}:8080/") == "hello from s2"
    assert wait_for(lambda: http_get(f"http://{svc2}/"), 30, "Service s2 from the test") == "hello from s2"
    # node1's pod -> node2's pod, directly and through the Service (kube-proxy on node1)
    assert servers.exec("s1", "python3", "-c", FETCH, f"http://{ip2}:8080/") == "hello from s2"
    assert servers.exec("s1", "python3", "-c", FETCH, f"http://{svc2}/") == "hello from s2"
    # node2's pod -> node1's pod, directly and through a Service (kube-proxy on node2), and the apiserver's
    assert servers.exec("s2", "python3", "-c", FETCH, f"http://{ip1}:8080/") == "hello from s1"
    assert servers.exec("s2", "python3", "-c", FETCH, f"http://{svc1}/") == "hello from s1"
    assert servers.exec("s2", "python3", "-c", CONNECT, "10.96.0.1", "443") == "connected"
    # apiserver -> node2's kubelet: logs (exec above went the same way)
    assert cluster.kubectl("logs", "s2", "-n", servers.ns).returncode == 0


def test_drain_evicts_and_honours_the_disruption_budget(cluster, node2, ns, base_image):  # noqa: F811
    labels = {"app": "drainee", "ovserve.dev/test-ns": ns}  # drain only this module's pod, wherever others run
    tmpl = server_pod("drainee", ON_NODE2)
    cluster.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "drainee"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": tmpl["spec"]},
                },
            },
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "drainee"},
                "spec": {"selector": {"matchLabels": labels}, "maxUnavailable": 0},
            },
        ],
        ns,
    )
    cluster.kubectl("rollout", "status", "deployment/drainee", "-n", ns, "--timeout=120s", timeout=150)
    pods = lambda: cluster.get("pods", namespace=ns)["items"]  # noqa: E731
    # other pods of the namespace may carry no labels at all
    drainees = lambda: [p for p in pods() if (p["metadata"].get("labels") or {}).get("app") == "drainee"]  # noqa: E731
    (before,) = drainees()
    args = ("--ignore-daemonsets", "--delete-emptydir-data", f"--pod-selector=app=drainee,ovserve.dev/test-ns={ns}")
    try:
        proc = node2.drain(*args, "--timeout=8s", check=False)
        assert proc.returncode != 0
        assert "disruption budget" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert node2.node()["spec"].get("unschedulable") is True  # cordoned all the same
        assert [p["metadata"]["uid"] for p in drainees()] == [before["metadata"]["uid"]]
        cluster.kubectl("patch", "pdb", "drainee", "-n", ns, "--type=merge", "-p", '{"spec":{"maxUnavailable":1}}')
        node2.drain(*args, "--timeout=60s")

        def replaced():
            now = drainees()
            return now if now and all(p["metadata"]["uid"] != before["metadata"]["uid"] for p in now) else None

        (after,) = wait_for(replaced, 30, "the evicted pod to be replaced")
        # node2 is cordoned and the pod may run nowhere else: Pending until uncordon
        assert "nodeName" not in after["spec"]
    finally:
        node2.uncordon()
    cluster.kubectl("rollout", "status", "deployment/drainee", "-n", ns, "--timeout=60s", timeout=90)
    assert [p["spec"]["nodeName"] for p in drainees()] == ["node2"]
    cluster.kubectl("delete", "deployment,pdb", "drainee", "-n", ns, "--wait=false")


def test_kubelet_stopped_the_node_goes_unknown_and_comes_back(cluster, servers, node2):  # noqa: F811
    ip2 = servers.ip("s2")
    t0 = time.monotonic()
    node2.stop_kubelet()
    try:
        node2.wait_ready("Unknown", UNKNOWN_WITHIN_S)
        unknown_after = time.monotonic() - t0
        node = node2.node()
        assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"} in [
            {"key": t["key"], "effect": t["effect"]} for t in node["spec"]["taints"]
        ]
        # the node lifecycle controller marks its pods not ready; the container itself keeps serving
        wait_for(lambda: not servers.ready("s2"), 15, "pod s2 marked not ready")
        assert http_get(f"http://{ip2}:8080/") == "hello from s2"
    finally:
        t1 = time.monotonic()
        node2.start_kubelet()
    ready_after = time.monotonic() - t1
    servers.wait_serving("s2", timeout=60)
    wait_for(
        lambda: "node.kubernetes.io/unreachable" not in [t["key"] for t in node2.node()["spec"].get("taints", [])],
        30,
        "the unreachable taint to be removed",
    )
    print(f"kubelet stopped: Unknown after {unknown_after:.1f}s; started: Ready after {ready_after:.1f}s")


def test_partitioned_node_is_unreachable_until_healed(cluster, servers, node2):  # noqa: F811
    ip2 = servers.ip("s2")
    node2.partition()
    try:
        assert not answers(f"http://{ip2}:8080/")
        with pytest.raises(OSError):
            socket.create_connection((IP, 10250), timeout=2)
    finally:
        node2.heal()
    assert wait_for(lambda: http_get(f"http://{ip2}:8080/"), 15, "s2 after heal") == "hello from s2"


def test_killed_node_loses_its_containers_and_up_brings_it_back(cluster, servers, node2):  # noqa: F811
    ip2 = servers.ip("s2")
    restarts = servers.pod("s2")["status"]["containerStatuses"][0]["restartCount"]
    node2.kill()
    assert not answers(f"http://{ip2}:8080/")
    with pytest.raises(OSError):
        socket.create_connection((IP, 10250), timeout=2)  # no kubelet
    t0 = time.monotonic()
    node2.up()
    up_after = time.monotonic() - t0

    def restarted():
        # the sandbox and its container died with the node: the kubelet starts them again (the status read
        # before it does is the one from before the kill)
        st = servers.pod("s2")["status"]
        return st if st["containerStatuses"][0]["restartCount"] > restarts or st.get("podIP") != ip2 else None

    status = wait_for(restarted, 60, "the kubelet to restart pod s2")
    ip = servers.wait_serving("s2", timeout=60)
    assert http_get(f"http://{ip}:8080/") == "hello from s2", json.dumps(status)
    print(f"killed node2: up again in {up_after:.1f}s, s2 serving after {time.monotonic() - t0:.1f}s")
