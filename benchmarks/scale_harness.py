"""The scale benchmark's harness pieces (benchmarks/operator_bench.py --scale), kept apart so they can be tested.

- `node_manifests`: the simulated nodes kwok manages (hack/scale/cluster.sh): labelled `type=kwok`, tainted so
  that only pods that tolerate kwok land there, each with its own /24 pod range (kwok takes pod IPs from it),
  some advertising `gpu.intel.com/i915`.
- `llmserving_manifests`: N LLMServings spread over tenant namespaces, some with 2 replicas, some on GPU.
- `request_counts` / `rates`: apiserver_request_total from the apiserver's own /metrics, summed by verb and
  resource (subresource included), and the per-second deltas between two scrapes.
- `StatusResponder` (`python benchmarks/scale_harness.py respond`): the stand-in for every simulated pod's
  runtime. The pod range is routed as local inside the bench namespace, so this one listener answers
  GET /v1/status at every pod's address with a well-formed ready report, and remembers which pod address was
  read when: after a leader failover, "every pod read since the kill" tells that the new leader has refreshed
  every object. GET /stats?since=<unix time> on the stats port: {"reads", "ips", "ips_since"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

GROUP_VERSION = "ovserve.dev/v1alpha1"
KWOK_LABEL = {"type": "kwok"}
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
GPU_RESOURCE = "gpu.intel.com/i915"
GPU_NODE_LABEL = "intel.feature.node.kubernetes.io/gpu"
POD_RANGE_PREFIX = "10.250"

# What the runtime answers at GET /v1/status once ready (ovserve_runtime.report.RuntimeReport; a unit test
# checks that it parses as one).


def kopf_running(port: int) -> bool:
    """Whether the operator whose health endpoint is on 127.0.0.1:`port` runs kopf (it leads and has started)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(json.loads(r.read()).get("kopf"))
    except OSError:
        return False


READY_REPORT = {
    "state": "ready",
    "model": "scale-standin",
    "device": "CPU",
    "pipeline": {
        "requested": "AUTO",
        "resolved": "LM_CB",
        "continuousBatching": True,
        "fallback": False,
        "reason": "ContinuousBatching",
        "message": "",
    },
    "versions": {"openvino": "standin", "openvinoGenai": "standin"},
}


def node_manifests(count: int, gpu_nodes: int, gpus_per_node: int = 64, pods_per_node: int = 250) -> list[dict]:
    """`count` kwok nodes, the first `gpu_nodes` of them with `gpus_per_node` fake GPUs (at most 250 nodes:
    one /24 of 10.250.0.0/16 each)."""
    if not 0 <= gpu_nodes <= count <= 250:
        raise ValueError(f"need 0 <= gpu_nodes <= count <= 250, got {gpu_nodes}, {count}")
    nodes = []
    for i in range(count):
        allocatable = {"cpu": "64", "memory": "512Gi", "pods": str(pods_per_node)}
        labels = {**KWOK_LABEL, "kubernetes.io/hostname": f"kwok-{i:03d}", "kubernetes.io/os": "linux"}
        if i < gpu_nodes:
            allocatable[GPU_RESOURCE] = str(gpus_per_node)
            labels[GPU_NODE_LABEL] = "true"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"kwok-{i:03d}",
                    "labels": labels,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"podCIDR": f"{POD_RANGE_PREFIX}.{i}.0/24", "taints": [KWOK_TAINT]},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            }
        )
    return nodes


def tenant(i: int, tenants: int) -> str:
    return f"tenant-{i % tenants:02d}"


def llmserving_manifests(
    count: int, *, tenants: int = 10, gpu_every: int = 10, two_replicas_every: int = 5, prefix: str = "s"
) -> list[dict]:
    """`count` LLMServings round-robin over `tenants` namespaces: every `gpu_every`-th on GPU, every
    `two_replicas_every`-th with 2 replicas (0 = never). Their pods tolerate the kwok taint."""
    items = []
    for i in range(count):
        spec: dict[str, Any] = {
            "model": {"hostPath": {"path": "/var/cache/ovserve/models/tiny-llm"}, "servedName": f"{prefix}-{i:05d}"},
            "replicas": 2 if two_replicas_every and i % two_replicas_every == two_replicas_every - 1 else 1,
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "tolerations": [{"key": KWOK_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
        }
        if gpu_every and i % gpu_every == gpu_every - 1:
            spec["device"] = "GPU"
        items.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "LLMServing",
                "metadata": {"name": f"{prefix}-{i:05d}", "namespace": tenant(i, tenants)},
                "spec": spec,
            }
        )
    return items


def pods_of(items: list[dict]) -> int:
    return sum(int(o["spec"].get("replicas", 1)) for o in items)


def _labels(text: str) -> dict[str, str]:
    """`verb="GET",resource="pods"` -> {"verb": "GET", "resource": "pods"} (label values hold no quotes here)."""
    out = {}
    for part in text.split('",'):
        key, _, value = part.partition("=")
        out[key.strip(" ,")] = value.strip('"')
    return out


def request_counts(metrics_text: str) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource[/subresource]) from Prometheus text."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        series, _, value = line.rpartition(" ")
        labels = _labels(series[series.index("{") + 1 : series.rindex("}")])
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(labels.get("verb", ""), resource)] += float(value)
    return counts


def _grown(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]
) -> list[tuple[str, str, float]]:
    return [(verb, res, after[(verb, res)] - before.get((verb, res), 0.0)) for verb, res in after]


def rates(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float], seconds: float, top: int = 12
) -> list[tuple[str, str, float]]:
    """(verb, resource, per second) of what grew by 0.05/s or more between two scrapes, largest first, at most
    `top` rows."""
    rows = [(verb, res, n / seconds) for verb, res, n in _grown(before, after)]
    rows = [r for r in rows if r[2] >= 0.05]  # not the watches that merely reconnected
    return sorted(rows, key=lambda r: -r[2])[:top]


def counts(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]
) -> list[tuple[str, str, float]]:
    """(verb, resource, requests) of every series that grew between two scrapes, largest first."""
    return sorted((r for r in _grown(before, after) if r[2] >= 1), key=lambda r: (-r[2], r[0], r[1]))


def total(
    before: Mapping[tuple[str, str], float],
    after: Mapping[tuple[str, str], float],
    verbs: frozenset[str] | None = None,
    resource: str | None = None,
) -> float:
    """The growth of the matching series between two scrapes."""
    return sum(
        v - before.get(k, 0.0)
        for k, v in after.items()
        if (verbs is None or k[0] in verbs) and (resource is None or k[1] == resource)
    )


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


# ------------------------------------------------------------------------------------- status responder


class ReadLog:
    """Which address was read when (unix seconds), and how many reads in all."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.reads = 0

    def record(self, ip: str, at: float) -> None:
        self.last[ip] = at
        self.reads += 1

    def stats(self, since: float) -> dict[str, int]:
        return {"reads": self.reads, "ips": len(self.last), "ips_since": sum(t >= since for t in self.last.values())}


def _response(code: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


READY_RESPONSE = _response("200 OK", json.dumps(READY_REPORT).encode())
NOT_FOUND = _response("404 Not Found", b"")


def request_target(head: bytes) -> str | None:
    """The target of `GET <target> HTTP/1.x`, once the request head is complete; None before."""
    if b"\r\n\r\n" not in head:
        return None
    method, _, rest = head.partition(b" ")
    return rest.split(b" ", 1)[0].decode("latin-1") if method == b"GET" else ""


class _Handler(asyncio.Protocol):
    def __init__(self, log: ReadLog, stats: bool) -> None:
        self.log, self.stats, self.buf = log, stats, b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        target = request_target(self.buf)
        if target is None:
            if len(self.buf) > 16384:
                self.transport.close()
            return
        if self.stats and target.startswith("/stats"):
            since = float(parse_qs(urlsplit(target).query).get("since", ["0"])[0])
            out = _response("200 OK", json.dumps(self.log.stats(since)).encode())
        elif not self.stats and target == "/v1/status":
            self.log.record(self.transport.get_extra_info("sockname")[0], time.time())
            out = READY_RESPONSE
        else:
            out = NOT_FOUND
        self.transport.write(out)  # type: ignore[attr-defined]
        self.transport.close()


async def start(port: int, stats_port: int, host: str = "0.0.0.0") -> tuple[asyncio.Server, asyncio.Server, ReadLog]:
    """The responder's two listeners (port 0: any free port) and its read log."""
    log = ReadLog()
    loop = asyncio.get_running_loop()
    pods = await loop.create_server(lambda: _Handler(log, False), host, port, backlog=4096, reuse_address=True)
    stats = await loop.create_server(lambda: _Handler(log, True), "127.0.0.1", stats_port, reuse_address=True)
    return pods, stats, log


async def serve(port: int, stats_port: int) -> None:
    pods, stats, _ = await start(port, stats_port)
    async with pods, stats:
        await asyncio.gather(pods.serve_forever(), stats.serve_forever())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("respond", help="the status responder for every simulated pod")
    r.add_argument("--port", type=int, default=8000)
    r.add_argument("--stats-port", type=int, default=8001)
    args = ap.parse_args()
    if args.cmd == "respond":
        asyncio.run(serve(args.port, args.stats_port))


if __name__ == "__main__":
    main()
