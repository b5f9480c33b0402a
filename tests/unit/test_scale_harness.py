"""The scale benchmark's harness (benchmarks/scale_harness.py): simulated nodes and objects, the apiserver's
request counts, and the status responder, read by the operator's own readback code."""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import json
import sys
import urllib.request
from pathlib import Path

import pytest
from ovserve_operator import policy, readback
from ovserve_operator import spec as api
from ovserve_operator.render import render
from ovserve_operator.settings import Settings
from ovserve_runtime.report import RuntimeReport, State

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


h = _load("scale_harness", ROOT / "benchmarks" / "scale_harness.py")


def test_nodes_are_kwok_tainted_each_with_its_own_pod_range_and_the_first_ones_with_gpus():
    nodes = h.node_manifests(120, 24)
    assert len(nodes) == 120 and len({n["metadata"]["name"] for n in nodes}) == 120
    ranges = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in nodes]
    assert len(set(ranges)) == 120
    assert all(r.subnet_of(ipaddress.ip_network("10.250.0.0/16")) for r in ranges)
    for n in nodes:
        assert n["metadata"]["labels"]["type"] == "kwok"  # what kwok manages (hack/scale/cluster.sh)
        assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert h.KWOK_TAINT in n["spec"]["taints"]
    gpu = [n for n in nodes if h.GPU_RESOURCE in n["status"]["allocatable"]]
    assert [n["metadata"]["name"] for n in gpu] == [f"kwok-{i:03d}" for i in range(24)]
    # the operator's default GPU node selector matches them
    assert all(n["metadata"]["labels"].items() >= Settings().gpu_node_selector.items() for n in gpu)


@pytest.mark.parametrize(
    ("count", "gpu", "why"),
    [(251, 0, "more nodes than /24s"), (10, 11, "more GPU nodes than nodes"), (10, -1, "negative")],
)
def test_node_counts_out_of_range_are_refused(count, gpu, why):
    with pytest.raises(ValueError):
        h.node_manifests(count, gpu)


def test_objects_spread_over_tenants_with_gpu_and_two_replica_ones_and_valid_specs():
    items = h.llmserving_manifests(100, tenants=10)
    assert {o["metadata"]["namespace"] for o in items} == {f"tenant-{i:02d}" for i in range(10)}
    assert sum(o["spec"].get("device") == "GPU" for o in items) == 10
    assert sum(o["spec"]["replicas"] == 2 for o in items) == 20
    assert h.pods_of(items) == 120
    settings = Settings(allow_host_path=True)
    for o in items[:10]:
        spec = api.parse_spec(o["spec"])  # what the operator accepts
        assert not policy.violations(spec, settings)
        pod = next(c for c in render(o["metadata"]["name"], "t", "uid", spec, settings) if c["kind"] == "Deployment")
        tolerations = pod["spec"]["template"]["spec"]["tolerations"]
        assert any(t["key"] == h.KWOK_TAINT["key"] for t in tolerations)  # its pods may land on kwok nodes


def _series(group: str, resource: str, subresource: str, verb: str, code: str, value: int) -> str:
    return (
        f'apiserver_request_total{{code="{code}",component="apiserver",dry_run="",group="{group}",'
        f'resource="{resource}",scope="namespace",subresource="{subresource}",verb="{verb}",version="v1"}} {value}'
    )


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        _series("ovserve.dev", "llmservings", "status", "PATCH", "200", 40),
        _series("ovserve.dev", "llmservings", "status", "PATCH", "409", 2),
        _series("", "pods", "", "LIST", "200", 7),
        _series("", "events", "", "POST", "201", 5),
        'apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 99',
    ]
)


def test_request_counts_sum_codes_by_verb_and_resource_with_subresource():
    counts = h.request_counts(METRICS)
    assert counts == {("PATCH", "llmservings/status"): 42, ("LIST", "pods"): 7, ("POST", "events"): 5}


@pytest.mark.parametrize(
    ("verbs", "resource", "grown"),
    [(None, None, 30), (h.WRITE_VERBS, None, 25), (None, "llmservings/status", 20), (h.WRITE_VERBS, "pods", 0)],
)
def test_totals_between_two_scrapes(verbs, resource, grown):
    before = h.request_counts(METRICS)
    after = {**before, ("PATCH", "llmservings/status"): 62, ("LIST", "pods"): 12, ("POST", "events"): 10}
    assert h.total(before, after, verbs, resource) == grown


def test_rates_are_per_second_largest_first_without_the_idle_ones():
    before = {("PATCH", "llmservings/status"): 10.0, ("LIST", "pods"): 3.0}
    after = {("PATCH", "llmservings/status"): 30.0, ("LIST", "pods"): 3.0, ("POST", "events"): 50.0}
    assert h.rates(before, after, 10) == [("POST", "events", 5.0), ("PATCH", "llmservings/status", 2.0)]


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n", "/v1/status"),
        (b"GET /v1/status HTTP/1.1\r\nHost: x\r\n", None),  # not complete yet
        (b"POST /v1/status HTTP/1.1\r\n\r\n", ""),
    ],
)
def test_request_target(head, target):
    assert h.request_target(head) == target


def test_read_log_counts_addresses_read_since():
    log = h.ReadLog()
    for ip, at in [("10.250.0.1", 1.0), ("10.250.0.2", 2.0), ("10.250.0.1", 5.0)]:
        log.record(ip, at)
    assert log.stats(since=3.0) == {"reads": 3, "ips": 2, "ips_since": 1}
    assert log.stats(since=0.0)["ips_since"] == 2


def test_the_ready_report_is_a_runtime_report():
    assert RuntimeReport.model_validate(h.READY_REPORT).state == State.READY


def test_the_operator_reads_the_responder_as_a_ready_runtime_and_it_logs_the_address():
    async def scenario():
        pods, stats, log = await h.start(0, 0, host="127.0.0.1")
        port, stats_port = pods.sockets[0].getsockname()[1], stats.sockets[0].getsockname()[1]
        async with pods, stats:
            pod = {
                "metadata": {"name": "p"},
                "status": {
                    "podIP": "127.0.0.1",
                    "phase": "Running",
                    "containerStatuses": [{"name": "runtime", "ready": True, "state": {"running": {}}}],
                },
            }
            readings = await readback.read_reports([pod], port=port)
            stats_text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{stats_port}/stats?since=0", timeout=5).read()
            )
        return readings["p"], json.loads(stats_text), log

    reading, stats, log = asyncio.run(scenario())
    assert reading.source == "http" and reading.report is not None and reading.report.state == State.READY
    assert stats == {"reads": 1, "ips": 1, "ips_since": 1} and set(log.last) == {"127.0.0.1"}


def test_the_side_by_side_run_gives_both_operators_the_same_mix_in_namespaces_of_their_own_interleaved():
    _load("operator_scale", ROOT / "benchmarks" / "operator_scale.py")
    v = _load("operator_versus", ROOT / "benchmarks" / "operator_versus.py")
    sides = v.split(1000, 10)
    a, b = sides["a"], sides["b"]
    assert len(a) == len(b) == 500

    def mix(items):
        return (
            sum(o["spec"].get("device") == "GPU" for o in items),
            sum(o["spec"]["replicas"] for o in items),
            sorted({o["metadata"]["namespace"].split("-", 1)[1] for o in items}),
        )

    assert mix(a) == mix(b) and mix(a)[0] > 0 and mix(a)[1] > 500  # GPU and two-replica objects on both sides
    assert all(o["metadata"]["namespace"].startswith("a-") for o in a)
    assert all(o["metadata"]["namespace"].startswith("b-") for o in b)
    order = v.interleaved(sides)
    assert [o for o in order if o in a] == a and [o for o in order if o in b] == b and len(order) == 1000
    firsts = [order[i]["metadata"]["namespace"][0] for i in range(0, 1000, 2)]
    assert firsts.count("a") == firsts.count("b") == 250  # neither side is always created first


def test_counts_every_series_that_grew_largest_first():
    before = {("GET", "pods"): 10.0, ("PATCH", "llmservings/status"): 5.0, ("LIST", "nodes"): 2.0}
    after = {
        ("GET", "pods"): 12.0,
        ("PATCH", "llmservings/status"): 25.0,
        ("LIST", "nodes"): 2.0,
        ("POST", "events"): 2,
    }
    assert h.counts(before, after) == [
        ("PATCH", "llmservings/status", 20.0),
        ("GET", "pods", 2.0),
        ("POST", "events", 2),
    ]
