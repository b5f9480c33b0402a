"""Fixtures of the chart tests (the shared ones come from tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.chart.helpers import CHART


@pytest.fixture(scope="session")
def crd(cluster) -> str:
    """The chart's CRD on the cluster (what `helm install` would create), Established."""
    path = CHART / "crds" / "ovserve.dev_llmservings.yaml"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager", "helm", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", "crd/llmservings.ovserve.dev", "--timeout=60s")
    return "llmservings.ovserve.dev"
