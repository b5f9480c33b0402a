"""node2, the second real node of hack/node2.sh, for tests that need two nodes or node faults.

Usage in a test module (the e2e tests of node faults import the same):

    from tests.cluster.node2 import ON_NODE2, node2  # noqa: F401  (node2 is a module-scoped fixture)

    def test_x(cluster, node2):
        pod["spec"].update(ON_NODE2)       # tolerate node2's taint and select it
        node2.stop_kubelet(); node2.wait_ready("Unknown", 90); node2.start_kubelet()

node2 is tainted `ovserve.dev/test-node2=true:NoSchedule`: a pod lands there only if it tolerates that.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from tests.conftest import HACK, Cluster, wait_for

NAME = "node2"
IP = "10.245.2.2"
TAINT_KEY = "ovserve.dev/test-node2"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# Tolerate the taint and select node2: the pod runs there or nowhere.
ON_NODE2: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": NAME}, "tolerations": [TOLERATION]}
ON_NODE1: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": "node1"}}
USE_WAIT_S = 600


def cluster_script(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", str(HACK / "cluster.sh"), *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        out = f"{proc.stdout}\n{proc.stderr}"
        pytest.fail(f"hack/cluster.sh {' '.join(args)} exited {proc.returncode}:\n{out}", pytrace=False)
    return proc


class Node2:
    """Control of node2 through hack/cluster.sh node2 ...; every call waits for what it says."""

    name = NAME
    ip = IP
    seconds_to_start = 0.0  # what the fixture's `up` took

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def script(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        return cluster_script("node2", *args, timeout=timeout, check=check)

    def up(self) -> float:
        """Start node2 (or leave a healthy one alone) and wait for Ready; returns the seconds it took."""
        t0 = time.monotonic()
        self.script("up", timeout=600)
        return time.monotonic() - t0

    def down(self) -> None:
        self.script("down")

    def running(self) -> bool:
        return self.script("status", check=False).returncode == 0

    def stop_kubelet(self) -> None:
        self.script("stop-kubelet")

    def start_kubelet(self) -> None:
        """Start the kubelet again and wait for the Node to read Ready."""
        self.script("start-kubelet")

    def kill(self) -> None:
        """Node lost: kubelet, kube-proxy, containerd and every container SIGKILLed; `up` brings it back."""
        self.script("kill")

    def partition(self) -> None:
        self.script("partition")

    def heal(self) -> None:
        self.script("heal")

    def drain(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.script("drain", *args, timeout=timeout, check=check)

    def uncordon(self) -> None:
        self.script("uncordon")

    def node(self) -> dict | None:
        return self.cluster.get("node", NAME)

    def ready_status(self) -> str | None:
        """The Node's Ready condition status: True, False, Unknown (None without a Node)."""
        node = self.node()
        if node is None:
            return None
        conds = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
        return conds[0]["status"] if conds else None

    def wait_ready(self, status: str, timeout: float) -> float:
        """Wait until the Ready condition reads `status`; returns the seconds waited."""
        t0 = time.monotonic()
        wait_for(lambda: self.ready_status() == status, timeout, f"node2 Ready={status}", interval=1)
        return time.monotonic() - t0


def apiserver_outage(seconds: float, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The kube-apiserver killed for `seconds`, then started (returns when /readyz answers again)."""
    return cluster_script("apiserver", "outage", str(seconds), timeout=timeout + seconds)


@pytest.fixture(scope="module")
def node2(cluster: Cluster) -> Iterable[Node2]:
    """node2 up and Ready for a module; stopped afterwards unless it ran before (OVSERVE_KEEP_NODE2=1 keeps it).

    The module holds node2 alone: its faults (a stopped kubelet, a drain) would break another session's test on
    it, so test sessions sharing the cluster take turns (an exclusive lock on $OVSERVE_CLUSTER_DIR/node2.use.lock,
    waited for up to USE_WAIT_S)."""
    fd = os.open(cluster.state_dir / "node2.use.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + USE_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 100, 0).decode(errors="replace").strip()
                    pytest.fail(f"node2 is still in use by another test session ({holder}) after {USE_WAIT_S}s")
                time.sleep(2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        n = Node2(cluster)
        started = not n.running()
        n.seconds_to_start = n.up()
        yield n
        if started and os.environ.get("OVSERVE_KEEP_NODE2") != "1":
            n.down()
    finally:
        os.close(fd)  # releases the lock


class ThrowawayCluster:
    """A cluster of its own (state dir and network namespace), for what the shared one must not suffer (an
    apiserver outage, `down`): `with ThrowawayCluster(nodes=2) as c: c.sh("apiserver", "outage", "5")`.
    Only the pause image is imported; `reset` on exit."""

    def __init__(self, nodes: int = 1) -> None:
        tag = uuid.uuid4().hex[:6]
        self.state_dir = f"/tmp/ovserve-throwaway-{tag}"
        self.netns = f"ovthrow-{tag}"
        self.env = {
            **os.environ,
            "OVSERVE_CLUSTER_DIR": self.state_dir,
            "OVSERVE_NETNS": self.netns,
            "OVSERVE_FAKE_GPUS": "0",
            "OVSERVE_AUTOSCALING": "off",
            "OVSERVE_NODES": str(nodes),
        }

    def sh(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300):
        proc = subprocess.run(
            ["bash", str(HACK / "cluster.sh"), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"cluster.sh {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}", pytrace=False
            )
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True):
        return self.sh("kubectl", *args, input=input, check=check)

    def apply(self, manifest: dict) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def __enter__(self) -> ThrowawayCluster:
        self.sh("up")
        return self

    def __exit__(self, *exc) -> None:
        self.sh("reset", check=False)
