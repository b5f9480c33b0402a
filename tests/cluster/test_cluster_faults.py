"""The control-plane fault helper (`hack/cluster.sh apiserver outage`) and `down` with node2, on a throwaway
two-node cluster of their own: the shared cluster never loses its apiserver to a test."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.node2 import ON_NODE2, ThrowawayCluster
from tests.cluster.test_cluster import _netns_without_process, _processes_mentioning
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster


def test_apiserver_outage_spares_running_pods_and_down_stops_node2_too(cluster):
    c = ThrowawayCluster(nodes=2)
    with c:
        assert c.sh("node2", "status").returncode == 0  # OVSERVE_NODES=2: `up` started node2 too
        c.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "p", "image": "localhost/pause:1", "imagePullPolicy": "Never"}],
                    **ON_NODE2,
                },
            }
        )

        def pod():
            return c.kubectl("get", "pod", "p", "-o", "jsonpath={.status.phase} {.metadata.uid}", check=False).stdout

        before = wait_for(lambda: pod().startswith("Running "), 120, "pod p Running on node2") and pod()
        t0 = time.monotonic()
        out = c.sh("apiserver", "outage", "5", timeout=200).stderr
        took = time.monotonic() - t0
        assert 5 <= took < 60, out
        assert "kube-apiserver stopped for 5s" in out and "kube-apiserver ready again" in out
        # the apiserver answers again, and the pod that ran through the outage is the same, still Running
        assert pod() == before
        c.sh("down")
        assert not Path(f"/var/run/netns/{c.netns}-node2").exists()
        assert not Path(f"/var/run/netns/{c.netns}").exists()
        assert _processes_mentioning(c.state_dir) == []
        assert [m for m in Path("/proc/mounts").read_text().splitlines() if c.state_dir in m] == []
        assert _netns_without_process() == set()
    assert _processes_mentioning(c.state_dir) == []
