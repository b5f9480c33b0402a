"""Operator benchmark: N LLMServing objects -> time until every one has its status recorded; operator RSS.

    sudo .venv/bin/python benchmarks/operator_bench.py [--count 200] [--netns ovserve]

Runs the operator as a local process (like the e2e tests) against the cluster in $KUBECONFIG
(default: the hack/ cluster's admin kubeconfig), watching a fresh namespace only. The runtime pods
never start (a node selector that matches no node), so the figures are the operator's own work
(no model load time to subtract): kubectl apply of N objects at t0, then

  observed  - status.observedGeneration == metadata.generation (the operator has seen and recorded it)
  settled   - Ready condition reason Unschedulable (children created, pods created and scheduled,
              pod status read back and aggregated)

and the operator's RSS (VmRSS / VmHWM from /proc) before and after. Prints a table and one JSON line.

`--silent N` makes the first N objects run a pod of the hostile stand-in runtime (hack/standin, built by
`hack/images.sh standin`) that accepts /v1/status and never answers: every status read of those objects
waits out its deadline. They settle at Ready reason ReadbackFailed. /healthz is polled every 0.5 s meanwhile:
the bench prints the largest heartbeat age seen and whether it ever answered 503 (it must not: the status
loop's heartbeat must reflect the loop, not the slowest pod). One node runs at most ~100 such pods.

`--scale N` is the scale benchmark instead (benchmarks/operator_scale.py: N objects on 120 simulated kwok nodes
of a bench-only control plane, hack/scale/cluster.sh, which it starts and stops; `make scale-bench N=...`).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from scale_harness import kopf_running

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "ovserve.dev_llmservings.yaml"


def enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


def find_kubectl() -> str:
    if shutil.which("kubectl"):
        return "kubectl"
    out = subprocess.run(
        ["bash", "-c", f"set -a && . {ROOT / 'hack' / 'versions.env'} && echo $BIN_DIR"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return str(Path(out) / "kubectl")


class Kubectl:
    def __init__(self, binary: str) -> None:
        self.binary = binary

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        p = subprocess.run([self.binary, *args], input=input, capture_output=True, text=True, timeout=600)
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
        return p.stdout


def rss_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def metrics(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return {}
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            vals[name] = float(v)
    return vals


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--namespace", default=f"ovserve-bench-{os.getpid()}")
    ap.add_argument(
        "--netns",
        default=os.environ.get("OVSERVE_NETNS", "ovserve"),
        help="enter this network namespace first ('' = stay)",
    )
    ap.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG")
        or str(Path(os.environ.get("OVSERVE_CLUSTER_DIR", "/tmp/ovserve-cluster")) / "pki" / "admin.kubeconfig"),
    )
    ap.add_argument("--silent", type=int, default=0, help="objects whose runtime pod never answers /v1/status")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="keep the namespace (with --scale: the bench cluster)")
    scale = ap.add_argument_group("scale benchmark (--scale N)")
    scale.add_argument("--scale", type=int, default=0, help="N LLMServings on simulated nodes (operator_scale.py)")
    scale.add_argument("--nodes", type=int, default=120, help="simulated nodes")
    scale.add_argument("--gpu-nodes", type=int, default=24, help="simulated nodes with gpu.intel.com/i915")
    scale.add_argument("--tenants", type=int, default=10, help="namespaces the objects are spread over")
    scale.add_argument("--probe", type=int, default=20, help="objects created one by one at full scale")
    scale.add_argument(
        "--steady", type=float, default=75, help="seconds of steady state measured (more than the 60 s heartbeat)"
    )
    scale.add_argument("--failover-timeout", type=float, default=600)
    scale.add_argument("--failover-tail", type=float, default=15, help="seconds measured after every pod was read")
    ap.add_argument("--operator-src", type=Path, default=ROOT, help="a checkout whose operator runs (before/after)")
    scale.add_argument("--log-dir", default=f"/tmp/ovserve-scale-logs-{os.getpid()}")
    scale.add_argument(
        "--versus",
        type=Path,
        help="another checkout's operator run beside --operator-src's at the bulk load, N/2 objects each "
        "(operator_versus.py)",
    )
    args = ap.parse_args()
    if args.scale:
        return scale_main(args)

    if args.silent:  # built on the host network, before entering the cluster's namespace
        subprocess.run(["bash", str(ROOT / "hack" / "images.sh"), "standin"], check=True, stdout=subprocess.DEVNULL)
    if args.netns and Path(f"/var/run/netns/{args.netns}").exists():
        enter_netns(args.netns)
    os.environ["KUBECONFIG"] = args.kubeconfig
    k = Kubectl(find_kubectl())
    ns = args.namespace

    k("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    k("wait", "--for", "condition=Established", "crd/llmservings.ovserve.dev", "--timeout=60s")
    k("create", "namespace", ns)

    port = 18000 + os.getpid() % 1000
    log = tempfile.NamedTemporaryFile("w", prefix="operator-bench-", suffix=".log", delete=False)
    env = {
        **os.environ,
        "OVSERVE_WATCH_NAMESPACES": ns,
        "OVSERVE_LEADER_ELECTION": "true",
        "OVSERVE_LEASE_NAMESPACE": ns,
        "OVSERVE_HEALTH_PORT": str(port),
        "POD_NAME": "bench",
        "OVSERVE_LOG_LEVEL": "WARNING",
        "OVSERVE_ALLOW_HOSTPATH": "true",
        "OVSERVE_ALLOWED_IMAGES": "localhost/ovserve-standin",
    }
    src = args.operator_src.resolve()
    if src != ROOT:  # another checkout's operator (before/after)
        env["PYTHONPATH"] = f"{src / 'runtime'}:{src / 'operator'}"
    op = subprocess.Popen(
        [sys.executable, "-m", "ovserve_operator"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=src
    )
    result: dict = {"count": args.count, "operator_src": str(src)}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not kopf_running(port):
            time.sleep(0.3)
        time.sleep(1)
        result["rss_idle_kib"] = rss_kib(op.pid)["VmRSS"]

        health = {"max_age_s": 0.0, "non_200": 0, "samples": 0}
        polling = threading.Event()

        def poll_health() -> None:
            while not polling.wait(0.5):
                health["samples"] += 1
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                        age = float(json.loads(r.read()).get("heartbeatAgeSeconds", 0))
                        health["max_age_s"] = max(health["max_age_s"], age)
                except OSError:
                    health["non_200"] += 1

        threading.Thread(target=poll_health, daemon=True).start()
        pending = {
            "model": {"huggingFace": {"repo": "ovserve-bench/never-downloaded"}},
            "nodeSelector": {"ovserve.dev/bench-nowhere": "true"},
        }
        items = [
            {
                "apiVersion": "ovserve.dev/v1alpha1",
                "kind": "LLMServing",
                "metadata": {"name": f"bench-{i:04d}"},
                "spec": pending
                if i >= args.silent
                else {
                    "model": {
                        "hostPath": {"path": "/var/cache/ovserve/models/tiny-llm"},
                        "servedName": f"bench-{i:04d}-silent",
                    },
                    "image": "localhost/ovserve-standin:1",
                    "resources": {"requests": {"cpu": "1m", "memory": "16Mi"}},
                },
            }
            for i in range(args.count)
        ]
        manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        t0 = time.monotonic()
        # apply in the background and poll meanwhile, so early objects are timed from their creation
        applier = subprocess.Popen(
            [k.binary, "apply", "-n", ns, "-f", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert applier.stdin is not None
        applier.stdin.write(manifest)
        applier.stdin.close()

        observed: dict[str, float] = {}
        settled: dict[str, float] = {}
        lag: dict[str, float] = {}  # creationTimestamp -> status observed (1 s resolution)

        while time.monotonic() - t0 < args.timeout and len(settled) < args.count:
            if "apply_s" not in result and applier.poll() is not None:
                result["apply_s"] = round(time.monotonic() - t0, 2)
                if applier.returncode != 0:
                    raise RuntimeError(f"kubectl apply failed: {applier.stderr.read() if applier.stderr else ''}")
            objs = json.loads(k("get", "llmservings", "-n", ns, "-o", "json"))["items"]
            now = time.monotonic() - t0
            for o in objs:
                name, st = o["metadata"]["name"], o.get("status") or {}
                if st.get("observedGeneration") == o["metadata"]["generation"] and name not in observed:
                    observed[name] = now
                    created = dt.datetime.strptime(o["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
                    lag[name] = time.time() - created.replace(tzinfo=dt.UTC).timestamp()
                ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
                if ready.get("reason") in ("Unschedulable", "ReadbackFailed"):
                    settled.setdefault(name, now)
            time.sleep(0.5)
        result["observed"] = len(observed)
        result["settled"] = len(settled)
        result["all_observed_s"] = round(max(observed.values()), 2) if len(observed) == args.count else None
        result["observed_p50_s"] = round(pct(list(observed.values()), 0.5), 2)
        result["observed_p95_s"] = round(pct(list(observed.values()), 0.95), 2)
        result["create_to_observed_p50_s"] = round(pct(list(lag.values()), 0.5), 2)
        result["create_to_observed_p95_s"] = round(pct(list(lag.values()), 0.95), 2)
        result["create_to_observed_max_s"] = round(max(lag.values()), 2) if lag else None
        result["all_settled_s"] = round(max(settled.values()), 2) if len(settled) == args.count else None
        result["settled_p50_s"] = round(pct(list(settled.values()), 0.5), 2)
        time.sleep(max(0.0, 12 - (time.monotonic() - t0 - (result["all_settled_s"] or 0))))  # a few steady cycles
        mem = rss_kib(op.pid)
        result["rss_after_kib"] = mem["VmRSS"]
        result["rss_peak_kib"] = mem["VmHWM"]
        m = metrics(port)
        result["status_patches"] = int(m.get("ovserve_operator_status_patches_total", 0))
        result["applies"] = int(m.get("ovserve_operator_applies_total", 0))
        # steady state: patches in 10 s without any change should be ~0
        before = m.get("ovserve_operator_status_patches_total", 0)
        time.sleep(10)
        result["steady_patches_10s"] = int(metrics(port).get("ovserve_operator_status_patches_total", 0) - before)
        cpu = Path(f"/proc/{op.pid}/stat").read_text().split()
        ticks = os.sysconf("SC_CLK_TCK")
        result["operator_cpu_s"] = round((int(cpu[13]) + int(cpu[14])) / ticks, 1)
        polling.set()
        result["silent"] = args.silent
        result["healthz_max_heartbeat_age_s"] = round(health["max_age_s"], 1)
        result["healthz_non_200"] = health["non_200"]
        result["healthz_samples"] = health["samples"]
    finally:
        op.send_signal(signal.SIGTERM)
        try:
            op.wait(30)
        except subprocess.TimeoutExpired:
            op.kill()
        if not args.keep:
            k("delete", "namespace", ns, "--wait=false", check=False)

    print(f"LLMServing objects           {result['count']}")
    print(f"kubectl apply                {result['apply_s']} s")
    print(
        f"all status observed          {result['all_observed_s']} s after the apply started "
        f"(p50 {result['observed_p50_s']} s, p95 {result['observed_p95_s']} s)"
    )
    print(
        f"create -> status observed    p50 {result['create_to_observed_p50_s']} s, "
        f"p95 {result['create_to_observed_p95_s']} s, max {result['create_to_observed_max_s']} s "
        "(per object, 1 s resolution, includes the 0.5 s polling)"
    )
    print(f"all settled                  {result['all_settled_s']} s (p50 {result['settled_p50_s']} s)")
    print(
        f"silent runtime pods          {result['silent']}: /healthz max heartbeat age "
        f"{result['healthz_max_heartbeat_age_s']} s, non-200 answers {result['healthz_non_200']} "
        f"of {result['healthz_samples']} polls"
    )
    print(
        f"operator RSS idle / after    {result['rss_idle_kib'] // 1024} MiB / "
        f"{result['rss_after_kib'] // 1024} MiB "
        f"(peak {result['rss_peak_kib'] // 1024} MiB)"
    )
    print(
        f"status patches / applies     {result['status_patches']} / {result['applies']}; "
        f"in 10 s steady state: {result['steady_patches_10s']}"
    )
    print(f"operator CPU                 {result['operator_cpu_s']} s")
    print(f"operator log                 {log.name}")
    print(json.dumps(result))
    return 0 if result["all_observed_s"] is not None else 1


def scale_main(args: argparse.Namespace) -> int:
    import asyncio

    import operator_scale
    import operator_versus

    bench = operator_versus if args.versus else operator_scale
    cluster = ROOT / "hack" / "scale" / "cluster.sh"
    subprocess.run([str(cluster), "down"], check=True, capture_output=True)  # a fresh etcd for every run
    subprocess.run([str(cluster), "up"], check=True)
    try:
        enter_netns(os.environ.get("OVSERVE_SCALE_NETNS", "ovserve-scale"))
        result = asyncio.run(bench.run(args))
    finally:
        if not args.keep:
            subprocess.run([str(cluster), "down"], check=False)
    bench.report(result)
    if args.versus:
        return 0 if all((result.get(side) or {}).get("all_settled_s") for side in operator_versus.SIDES) else 1
    return 0 if result["load"]["all_settled_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
