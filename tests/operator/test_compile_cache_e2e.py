"""End-to-end on the real cluster (issue 42): a serving with `spec.cache.mode: node` starts, status.startup shows
its phases and a cache miss; a second pod (scaled to two replicas) on the same node loads the compiled blobs
(a hit) and status counts it. The legacy pipeline (LM): OpenVINO 2026.4.1 cannot import the blob of a
PagedAttention model (docs/startup.md), so a continuous-batching serving would miss every time."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from tests.conftest import make_namespace, node_cache_root

from .conftest import OperatorProcess
from .test_operator_e2e import llms, status

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def namespace(cluster, crd, request):
    ns = make_namespace(cluster, "t-cache", psa="privileged")  # hostPath volumes (the model, the node cache)
    yield ns
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        request.node.add_report_section("teardown", "cluster diagnostics", cluster.diagnostics(ns))
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def cache_root():
    with node_cache_root("ovserve-cache-e2e") as root:
        yield root


def _to_ready(cluster, namespace: str, pod: str) -> int | None:
    """Whole seconds from the pod's creation to its Ready condition (the apiserver's timestamps)."""
    obj = cluster.get("pod", pod, namespace) or {}
    ready = next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})
    if not ready.get("lastTransitionTime"):
        return None

    def at(stamp: str) -> dt.datetime:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return int((at(ready["lastTransitionTime"]) - at(obj["metadata"]["creationTimestamp"])).total_seconds())


def test_node_cache_second_pod_hits(cluster, namespace, project_image, tiny_models, cache_root, tmp_path):
    env = {"OVSERVE_CACHE_HOST_ROOT": str(cache_root), "OVSERVE_STATUS_INTERVAL_SECONDS": "1"}
    op = OperatorProcess(namespace, "op-cache", f"ovserve-operator-{uuid.uuid4().hex[:6]}", tmp_path, env)
    seen: dict = {}

    def wait_status(pred, timeout: float, what: str) -> dict:
        def probe():
            seen["status"] = status(cluster, namespace, "cached")
            return pred(seen["status"]) and seen["status"]

        try:
            return cluster.wait_for(probe, timeout, what)
        except pytest.fail.Exception:
            last = json.dumps(seen.get("status"), indent=1)[-4000:]
            pytest.fail(f"{what}: last status {last}\noperator log:\n{op.logs()[-4000:]}", pytrace=False)

    try:
        spec = {
            "model": {"hostPath": {"path": str(tiny_models / "tiny-llm")}},
            "pipelineType": "LM",
            "cache": {"mode": "node", "maxSizeGB": 1},
        }
        cluster.apply(llms("cached", spec), namespace)
        st = wait_status(
            lambda s: s.get("phase") == "Ready" and (s.get("startup") or {}).get("cacheHits") == "0/1",
            60,
            "first pod Ready with status.startup",
        )
        first = st["startup"]
        assert first["cache"] == "miss", first
        assert first["compileSeconds"] > 0 and first["firstTokenSeconds"] is not None, first
        assert first["totalSeconds"] > first["compileSeconds"], first
        assert list(cache_root.glob(f"{namespace}/*/*.blob")), list(cache_root.rglob("*"))

        patch = {"spec": {"replicas": 2}}
        cluster.kubectl("patch", "llmserving", "cached", "-n", namespace, "--type=merge", "-p", json.dumps(patch))
        st = wait_status(
            lambda s: s.get("readyReplicas") == 2 and (s.get("startup") or {}).get("cacheHits") == "1/2",
            60,
            "second pod Ready with a cache hit",
        )
        second = st["startup"]
        assert second["cache"] == "hit" and second["pod"] != first["pod"], (first, second)
        assert second["compileSeconds"] < first["compileSeconds"], (first, second)
        for what, su in (("cold", first), ("warm", second)):  # the measured figures (docs/benchmarks.md), -s
            print(f"{what}: pod creation to Ready {_to_ready(cluster, namespace, su['pod'])} s; startup {su}")
    finally:
        op.stop()
