"""Fixtures of the autoscaling tier: Prometheus and KEDA running next to the real cluster (hack/cluster.sh
autoscaling on), the operator as a local process (tests/operator), the tiny models (generation and encoders)
on a PVC."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from tests.conftest import HACK, _cluster_script, run_on_host_network
from tests.operator.conftest import crd, start_operator  # noqa: F401  (fixtures shared with the operator tier)
from tests.operator.test_operator_e2e import runtime  # noqa: F401
from tests.operator.test_operator_tasks import encoder_runtime  # noqa: F401  (tiny-embed on the PVC)

NODE_IP = "10.245.0.1"  # hack/cluster.sh: the node address, where Prometheus listens
PROMETHEUS = f"http://{NODE_IP}:9090"


@pytest.fixture(scope="session")
def addons(cluster) -> str:
    """Prometheus + KEDA, built when missing (hack/build-addons.sh: `make test` builds them first, `make demo`
    never; ~12 min cold) and started (idempotent: started by `up` when built; started here otherwise)."""
    proc = run_on_host_network(["bash", str(HACK / "build-addons.sh")], timeout=3600)  # the Go module proxy
    if proc.returncode != 0:
        pytest.fail(f"hack/build-addons.sh failed:\n{proc.stderr[-4000:]}", pytrace=False)
    proc = _cluster_script("autoscaling", "on", timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster.sh autoscaling on failed:\n{proc.stderr[-4000:]}", pytrace=False)
    return PROMETHEUS


def prom_query(expr: str) -> list[dict]:
    """Instant query against the cluster's Prometheus (the one KEDA queries)."""
    url = f"{PROMETHEUS}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]
