"""Routing benchmark (issue 39, docs/routing.md): the same workloads through the serving's Service (kube-proxy: a
random pod) and through the local gateway (Envoy + GIE's endpoint picker: load- and prefix-aware).

    sudo .venv/bin/python benchmarks/routing_bench.py [--model bench-qwen] [--replicas 3] [--concurrency 3]

Needs the local cluster up, the project image and `make routing`. It creates a namespace of its own, runs the
operator as a local process watching it (like the e2e tests), an LLMServing of `--replicas` pods of `--model`
(prefix caching on) with spec.routing (the operator creates its InferencePool), then measures, one phase after
the other:

  prefix-heavy  --prefixes long shared prefixes (a system prompt each, --prefix-words words), --per-prefix
                requests each with a fresh question, shuffled; every phase has prefixes of its own (no cache
                warmed by an earlier phase)
  uniform       as many requests of the same length, every prompt distinct (no prefix to share)

each through the Service and through the gateway (--rounds times, alternating), --concurrency clients streaming
chat completions of --max-tokens:
TTFT p50/p95 (request sent -> first content chunk), requests per second, and the requests each pod served. The
load goes to the cluster's own Service and to the gateway on loopback, bounded by the request counts. Prints a
table and one JSON line; removes what it created.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ovserve_operator import render  # noqa: E402

from tests.conftest import BIN_DIR, MODELS_DIR, NETNS, STATE_DIR, Cluster, enter_netns, make_namespace  # noqa: E402
from tests.operator.conftest import OperatorProcess  # noqa: E402
from tests.operator.test_operator_e2e import llms, models_claim, pvc_model, status  # noqa: E402
from tests.routing.gateway import Gateway, missing_artefacts, routing_bin_dir  # noqa: E402

NAME = "bench"
WORKLOADS = ("prefix-heavy", "uniform")
READY_TIMEOUT_S = 900


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ttft(host: str, port: int, prompt: str, max_tokens: int) -> float:
    """Seconds from sending one streamed chat to its first content chunk (the stream is read to its end)."""
    body = json.dumps(
        {
            "model": NAME,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    )
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v3/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {r.read()[-300:]!r}")
    first = None
    for line in r:
        if first is None and line.startswith(b"data: {") and b'"content"' in line:
            first = time.monotonic() - t0
    conn.close()
    if first is None:
        raise RuntimeError("no content chunk")
    return first


def run(host: str, port: int, prompts: list[str], clients: int, max_tokens: int) -> tuple[list[float], float]:
    """The prompts by `clients` concurrent clients: (every TTFT, wall seconds)."""
    todo = list(prompts)
    lock = threading.Lock()
    out: list[float] = []
    errors: list[str] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                prompt = todo.pop()
            try:
                value = ttft(host, port, prompt, max_tokens)
            except Exception as exc:  # counted and reported: a benchmark that loses requests says so
                with lock:
                    errors.append(str(exc))
                continue
            with lock:
                out.append(value)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return out, time.monotonic() - t0


def served(pods: list[dict]) -> dict[str, float]:
    out = {}
    for p in pods:
        with urllib.request.urlopen(f"http://{p['status']['podIP']}:8000/metrics", timeout=5) as r:
            text = r.read().decode()
        head = 'ovserve_requests_total{endpoint="chat"'
        out[p["metadata"]["name"]] = sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(head))
    return out


def workloads(rng: random.Random, args: argparse.Namespace) -> dict[str, list[str]]:
    def words(n: int) -> str:
        return " ".join(f"w{rng.randrange(100_000)}" for _ in range(n))

    prefixes = [words(args.prefix_words) for _ in range(args.prefixes)]
    heavy = [f"{p}\nquestion {i}: {uuid.uuid4().hex[:8]}" for p in prefixes for i in range(args.per_prefix)]
    rng.shuffle(heavy)
    uniform = [f"{words(args.prefix_words)}\nquestion {i}" for i in range(len(heavy))]
    return {"prefix-heavy": heavy, "uniform": uniform}


def measure(workload: str, targets: dict, pods: list[dict], rng: random.Random, args: argparse.Namespace) -> list:
    """One workload through each target, --rounds times alternately (the machine's load drifts between phases:
    alternating spreads the drift over both paths), fresh prompts for every phase; one row per target."""
    acc = {
        via: {"ttft": [], "wall": 0.0, "per_pod": dict.fromkeys((p["metadata"]["name"] for p in pods), 0.0)}
        for via in targets
    }
    for _ in range(args.rounds):
        for via, (host, port) in targets.items():
            prompts = workloads(rng, args)[workload]
            before = served(pods)
            values, wall = run(host, port, prompts, args.concurrency, args.max_tokens)
            after = served(pods)
            a = acc[via]
            a["ttft"] += values
            a["wall"] += wall
            for k in after:
                a["per_pod"][k] += after[k] - before[k]
            p50 = statistics.median(values)
            print(f"{workload} via {via}: {len(values)} requests, TTFT p50 {p50:.3f} s", flush=True)
    return [
        {
            "workload": workload,
            "via": via,
            "requests": len(a["ttft"]),
            "ttft_p50_s": round(statistics.median(a["ttft"]), 4),
            "ttft_p95_s": round(percentile(a["ttft"], 0.95), 4),
            "rps": round(len(a["ttft"]) / a["wall"], 3),
            "per_pod": sorted(int(v) for v in a["per_pod"].values()),
        }
        for via, a in acc.items()
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bench-qwen", help="a model directory under the models cache")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--prefixes", type=int, default=4)
    ap.add_argument("--per-prefix", type=int, default=6)
    ap.add_argument("--prefix-words", type=int, default=200, help="words per shared prefix")
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=1, help="phases per path, alternating Service and gateway")
    ap.add_argument("--seed", type=int, default=39)
    args = ap.parse_args()
    missing = missing_artefacts(routing_bin_dir())
    if missing:
        ap.error(f"run `make routing` first: missing {', '.join(missing)}")
    enter_netns(NETNS)
    cluster = Cluster(STATE_DIR, NETNS)
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)  # the operator's, and the picker's
    os.environ["PATH"] = f"{BIN_DIR}:{os.environ['PATH']}"
    ns = make_namespace(cluster, "bench-routing")
    Path(f"/tmp/{ns}").mkdir(exist_ok=True)  # the operator's and the gateway's logs
    env = {"OVSERVE_ROUTING": "true"}  # spec.routing allowed: the operator makes the pool
    op = OperatorProcess(ns, "op-bench", f"ovserve-bench-{uuid.uuid4().hex[:6]}", Path(f"/tmp/{ns}"), env)
    gw = None
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(routing_bin_dir() / "crds"))
        with models_claim(cluster, ns, MODELS_DIR):
            spec = {
                "model": pvc_model(args.model),
                "replicas": args.replicas,
                "scheduler": {"maxNumSeqs": 8, "enablePrefixCaching": True},
                "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},  # the replicas share the node's cores
                "routing": {},
            }
            cluster.apply(llms(NAME, spec), ns)
            cluster.wait_for(
                lambda: status(cluster, ns, NAME).get("readyReplicas") == args.replicas, READY_TIMEOUT_S, "ready"
            )
            cluster.wait_for(
                lambda: (status(cluster, ns, NAME).get("routing") or {}).get("endpoints") == args.replicas,
                60,
                "the operator's InferencePool (status.routing)",
            )
            gw = Gateway(pool=NAME, namespace=ns, kubeconfig=cluster.kubeconfig, workdir=Path(f"/tmp/{ns}/gw")).start()
            service_ip = cluster.get("service", NAME, ns)["spec"]["clusterIP"]
            selector = ",".join(f"{k}={v}" for k, v in render.selector_labels(NAME).items())
            pods = json.loads(cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]
            targets = {"service": (service_ip, 8000), "gateway": ("127.0.0.1", gw.listen_port)}
            cluster.wait_for(lambda: _answers(*targets["gateway"]), 90, "the gateway to answer")
            rng = random.Random(args.seed)
            rows = []
            for workload in args.workloads:
                rows += measure(workload, targets, pods, rng, args)
        print(f"\n{'workload':<13} {'via':<8} {'n':>4} {'TTFT p50':>9} {'p95':>7} {'req/s':>7}  per pod")
        for r in rows:
            print(
                f"{r['workload']:<13} {r['via']:<8} {r['requests']:>4} {r['ttft_p50_s']:>9.3f} {r['ttft_p95_s']:>7.3f} "
                f"{r['rps']:>7.2f}  {r['per_pod']}"
            )
        print(json.dumps({"model": args.model, "replicas": args.replicas, "args": vars(args), "rows": rows}))
        return 0
    finally:
        if gw is not None:
            gw.stop()
        op.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _answers(host: str, port: int) -> bool:
    try:
        return ttft(host, port, "hello", 1) >= 0
    except Exception:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
