"""The operator at scale (benchmarks/operator_bench.py --scale N): N LLMServings on simulated nodes.

Runs against the bench-only control plane of hack/scale/cluster.sh (etcd, apiserver, controller-manager,
scheduler and kwok in a network namespace of their own; never the shared test cluster), which it starts fresh
and stops afterwards (--keep leaves it up). Simulated pods go Running/Ready by kwok; one status responder
(scale_harness.StatusResponder) answers GET /v1/status at every pod address, so readback is real TCP.

Phases, each bounded in time:
  load      N objects created through the API (16 at a time) while the operator runs: per object
            create -> status observed (observedGeneration == generation, seen on a watch) and -> Ready;
            the time until all are Ready (settled); operator RSS and CPU; apiserver requests by verb/resource.
  probe     at full scale, a few more objects created one every 0.5 s: create -> observed p50/p95 when the
            operator is not swamped by a bulk load (the figure a tenant sees on a busy cluster).
  steady    nothing changes for --steady seconds: status writes/s (the apiserver's own count of
            PATCH llmservings/status), all requests/s by verb and resource, operator CPU, readback GETs/s.
  failover  a standby operator (started before the steady window) takes over when the leader is SIGKILLed:
            the time until it holds the Lease, until it has read every pod (every object refreshed), and
            the writes that the takeover causes.
Figures are printed as a table and one JSON line. The machine is shared: the load average is printed too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import scale_harness as h
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCALE_DIR = Path(os.environ.get("OVSERVE_SCALE_DIR", "/tmp/ovserve-scale"))
CLUSTER = ROOT / "hack" / "scale" / "cluster.sh"
CRD = ROOT / "crds" / "ovserve.dev_llmservings.yaml"
LEASE_NS = "ovserve-system"
PLURAL = f"/apis/{h.GROUP_VERSION}"
NODE_LEASE_VERBS = frozenset({"PUT"})  # renewals: kwok's node Leases, and the operator's own one every 2 s


class Api:
    """The few apiserver calls the benchmark makes, with the bench cluster's admin token."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        self.server = cfg["clusters"][0]["cluster"]["server"]
        ctx = ssl.create_default_context(cafile=cfg["clusters"][0]["cluster"]["certificate-authority"])
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {cfg['users'][0]['user']['token']}"},
            connector=aiohttp.TCPConnector(ssl=ctx, limit=32),
            timeout=aiohttp.ClientTimeout(total=120),
        )

    async def get(self, path: str) -> Any:
        async with self.session.get(self.server + path) as r:
            r.raise_for_status()
            return await r.json()

    async def text(self, path: str) -> str:
        async with self.session.get(self.server + path) as r:
            r.raise_for_status()
            return await r.text()

    async def create(self, path: str, body: dict) -> int:
        async with self.session.post(self.server + path, json=body) as r:
            if r.status not in (201, 409):
                raise RuntimeError(f"POST {path}: HTTP {r.status}: {(await r.text())[:300]}")
            return r.status

    async def requests(self) -> dict[tuple[str, str], float]:
        return dict(h.request_counts(await self.text("/metrics")))


class Proc:
    """CPU seconds and RSS of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_kib = 0

    def cpu_s(self) -> float:
        try:
            f = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                    self.peak_rss_kib = max(self.peak_rss_kib, rss)
                    return rss
        except OSError:
            pass
        return 0


def _pid(name: str) -> int:
    return int((SCALE_DIR / f"{name}.pid").read_text())


class Tracker:
    """Per object (namespace/name): when it was created, first observed, first Ready (monotonic)."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.observed: dict[str, float] = {}
        self.ready: dict[str, float] = {}

    def event(self, obj: dict, now: float) -> None:
        meta, st = obj["metadata"], obj.get("status") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        if st.get("observedGeneration") == meta.get("generation"):
            self.observed.setdefault(key, now)
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []):
            self.ready.setdefault(key, now)

    def lags(self, keys: list[str], done: dict[str, float]) -> list[float]:
        return [done[k] - self.created[k] for k in keys if k in done and k in self.created]


async def watch(api: Api, tracker: Tracker) -> None:
    rv = (await api.get(f"{PLURAL}/llmservings?limit=1"))["metadata"]["resourceVersion"]
    while True:
        url = f"{api.server}{PLURAL}/llmservings?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        async with api.session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as r:
            async for line in r.content:
                ev = json.loads(line)
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] in ("ADDED", "MODIFIED"):
                    tracker.event(obj, time.monotonic())


def responder_stats(port: int, since: float = 0.0) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?since={since}", timeout=5) as r:
        return json.loads(r.read())


def operator_metric(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


# the operator's counters of what it did during a load (ovserve_operator_<name>_total)
LOAD_COUNTERS = ("status_refreshes", "status_patches", "applies", "status_errors", "apply_errors")


def operator_counters(port: int, names: tuple[str, ...] = LOAD_COUNTERS) -> dict[str, float]:
    return {c: operator_metric(port, f"ovserve_operator_{c}_total") for c in names}


def start_operator(
    identity: str, port: int, src: Path, log_dir: Path, namespaces: str = "", lease: str = "ovserve-operator"
) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": f"{src / 'runtime'}:{src / 'operator'}",
        "KUBECONFIG": str(SCALE_DIR / "kubeconfig"),
        "OVSERVE_WATCH_NAMESPACES": namespaces,  # "": cluster-wide, as a platform runs it
        "OVSERVE_LEADER_ELECTION": "true",
        "OVSERVE_LEASE_NAMESPACE": LEASE_NS,
        "OVSERVE_LEASE_NAME": lease,
        "OVSERVE_HEALTH_PORT": str(port),
        "POD_NAME": identity,
        "OVSERVE_LOG_LEVEL": "WARNING",
        "OVSERVE_ALLOW_HOSTPATH": "true",
    }
    log = open(log_dir / f"operator-{identity}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "ovserve_operator"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=src
    )


def start_responder(log_dir: Path) -> subprocess.Popen:
    """The status responder (scale_harness.py respond) answering GET /v1/status at every simulated pod address."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("scale_harness.py")), "respond", "--stats-port", "8001"],
        stdout=subprocess.DEVNULL,
        stderr=open(log_dir / "responder.log", "w"),
    )


async def prepare(api: Api, args: Any, namespaces: list[str]) -> None:
    """The simulated nodes, the namespaces (the operators' Lease namespace too) and the CRD, Established and
    answering (a CRD just Established may still answer 429 "storage is (re)initializing")."""
    await asyncio.gather(*(api.create("/api/v1/nodes", n) for n in h.node_manifests(args.nodes, args.gpu_nodes)))
    for ns in [LEASE_NS, *namespaces]:
        await api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kubectl = [str(CLUSTER), "exec", "kubectl"]
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(CRD)], check=True, capture_output=True)
    subprocess.run(
        [*kubectl, "wait", "--for", "condition=Established", "crd/llmservings.ovserve.dev"],
        check=True,
        capture_output=True,
    )
    for _ in range(120):
        try:
            await api.get(f"{PLURAL}/llmservings?limit=1")
            return
        except aiohttp.ClientResponseError:
            await asyncio.sleep(0.5)


async def stop(
    api: Api, watcher: asyncio.Task | None, ops: dict[str, subprocess.Popen], responder: subprocess.Popen
) -> None:
    """Everything a run started: the watch, the operators (SIGTERM, then SIGKILL after 30 s), the responder."""
    if watcher is not None:
        watcher.cancel()
    for p in ops.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in ops.values():
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    responder.terminate()
    responder.wait()
    await api.session.close()


async def wait_kopf(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(h.kopf_running, port):
            return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"operator on :{port} did not start kopf in {timeout:g} s")


async def create_all(api: Api, items: list[dict], tracker: Tracker, concurrency: int, pause: float = 0.0) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(o: dict) -> None:
        async with gate:
            ns, name = o["metadata"]["namespace"], o["metadata"]["name"]
            tracker.created[f"{ns}/{name}"] = time.monotonic()
            await api.create(f"{PLURAL}/namespaces/{ns}/llmservings", o)

    if pause:
        for o in items:
            await one(o)
            await asyncio.sleep(pause)
    else:
        await asyncio.gather(*(one(o) for o in items))


async def wait_for(cond: Any, timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(every)
    return cond()


async def lease_holder(api: Api) -> str:
    try:
        lease = await api.get(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/ovserve-operator")
    except aiohttp.ClientResponseError:
        return ""
    return (lease.get("spec") or {}).get("holderIdentity") or ""


def _phase_rates(before: dict, after: dict, seconds: float) -> dict[str, Any]:
    return {
        "requests_per_s": round(h.total(before, after) / seconds, 1),
        "writes_per_s": round(h.total(before, after, h.WRITE_VERBS) / seconds, 1),
        # the simulated kubelets' node Lease renewals (kwok: 120 nodes) apart from everything else written
        "node_lease_writes_per_s": round(h.total(before, after, NODE_LEASE_VERBS, "leases") / seconds, 1),
        "status_writes_per_s": round(h.total(before, after, None, "llmservings/status") / seconds, 2),
        "top": [f"{v} {r} {x:.1f}/s" for v, r, x in h.rates(before, after, seconds)],
    }


def _ms(x: float) -> float:
    return round(x, 2)


async def run(args: Any) -> dict[str, Any]:
    n, t_start = args.scale, time.monotonic()
    items = h.llmserving_manifests(n, tenants=args.tenants)
    probes = h.llmserving_manifests(args.probe, tenants=args.tenants, prefix="probe")
    result: dict[str, Any] = {
        "scale": n,
        "pods": h.pods_of(items),
        "nodes": args.nodes,
        "gpu_nodes": args.gpu_nodes,
        "operator_src": str(args.operator_src),
        "load_avg_before": os.getloadavg()[0],
    }
    api = Api(SCALE_DIR / "kubeconfig")
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    responder = start_responder(log_dir)
    ops: dict[str, subprocess.Popen] = {}
    tracker = Tracker()
    watcher: asyncio.Task | None = None
    try:
        await prepare(api, args, sorted({o["metadata"]["namespace"] for o in items}))
        ops["a"] = start_operator("op-a", 18081, args.operator_src, log_dir)
        await wait_kopf(18081, 120)
        await asyncio.sleep(3)  # kopf's watches established
        op, apiserver, etcd = Proc(ops["a"].pid), Proc(_pid("apiserver")), Proc(_pid("etcd"))
        result["operator_rss_idle_mib"] = op.rss_kib() // 1024
        watcher = asyncio.create_task(watch(api, tracker))
        await asyncio.sleep(1)

        # ---- load
        sampler_stop = asyncio.Event()

        async def sample() -> None:
            while not sampler_stop.is_set():
                op.rss_kib()
                apiserver.rss_kib()
                etcd.rss_kib()
                await asyncio.sleep(1)

        sampler = asyncio.create_task(sample())
        c0 = operator_counters(18081)
        r0 = responder_stats(8001)
        m0, cpu0, t0 = await api.requests(), (op.cpu_s(), apiserver.cpu_s(), etcd.cpu_s()), time.monotonic()
        await create_all(api, items, tracker, 16)
        result["create_s"] = _ms(time.monotonic() - t0)
        keys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in items]
        settled = await wait_for(lambda: all(k in tracker.ready for k in keys), args.timeout - (time.monotonic() - t0))
        t1 = time.monotonic()
        m1, cpu1 = await api.requests(), (op.cpu_s(), apiserver.cpu_s(), etcd.cpu_s())
        c1 = operator_counters(18081)
        r1 = responder_stats(8001)
        obs, rdy = tracker.lags(keys, tracker.observed), tracker.lags(keys, tracker.ready)
        result["load"] = {
            "observed": len(obs),
            "ready": len(rdy),
            "all_settled_s": _ms(t1 - t0) if settled else None,
            "create_to_observed_p50_s": _ms(h.pct(obs, 0.5)),
            "create_to_observed_p95_s": _ms(h.pct(obs, 0.95)),
            "create_to_ready_p50_s": _ms(h.pct(rdy, 0.5)),
            "create_to_ready_p95_s": _ms(h.pct(rdy, 0.95)),
            "operator_cpu_s": _ms(cpu1[0] - cpu0[0]),
            "apiserver_cpu_s": _ms(cpu1[1] - cpu0[1]),
            "etcd_cpu_s": _ms(cpu1[2] - cpu0[2]),
            # what the operator did for it (passes per object show a pass that repeats; the readback GETs, the pods
            # it waited on)
            **{f"operator_{c}": int(c1[c] - c0[c]) for c in LOAD_COUNTERS},
            "readback_gets": r1["reads"] - r0["reads"],
            **_phase_rates(m0, m1, t1 - t0),
            # every request the load caused, by verb and resource (counts, not rates: comparable between runs that
            # took different times)
            "requests": {f"{v} {r}": int(n) for v, r, n in h.counts(m0, m1)},
        }
        result["operator_rss_after_load_mib"] = op.rss_kib() // 1024

        # ---- probe: a few creates at full scale, one every 0.5 s
        if probes:
            await create_all(api, probes, tracker, 1, pause=0.5)
            pkeys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in probes]
            await wait_for(lambda: all(k in tracker.ready for k in pkeys), 120)
            pobs, prdy = tracker.lags(pkeys, tracker.observed), tracker.lags(pkeys, tracker.ready)
            result["probe"] = {
                "count": len(probes),
                "create_to_observed_p50_s": _ms(h.pct(pobs, 0.5)),
                "create_to_observed_p95_s": _ms(h.pct(pobs, 0.95)),
                "create_to_ready_p95_s": _ms(h.pct(prdy, 0.95)),
            }

        # ---- steady: a standby joins, then nothing changes
        ops["b"] = start_operator("op-b", 18082, args.operator_src, log_dir)
        await asyncio.sleep(5)
        m2, r2 = await api.requests(), responder_stats(8001)
        cpu2, t2 = (op.cpu_s(), apiserver.cpu_s(), etcd.cpu_s()), time.monotonic()
        counters = ("status_patches", "status_refreshes", "status_echoes")  # the last two: operators since issue 29
        before2 = operator_counters(18081, counters)
        await asyncio.sleep(args.steady)
        m3, r3 = await api.requests(), responder_stats(8001)
        cpu3, t3 = (op.cpu_s(), apiserver.cpu_s(), etcd.cpu_s()), time.monotonic()
        result["steady"] = {
            "seconds": _ms(t3 - t2),
            **{f"operator_{c}": operator_metric(18081, f"ovserve_operator_{c}_total") - before2[c] for c in counters},
            "operator_cpu_pct": round(100 * (cpu3[0] - cpu2[0]) / (t3 - t2), 1),
            "apiserver_cpu_pct": round(100 * (cpu3[1] - cpu2[1]) / (t3 - t2), 1),
            "etcd_cpu_pct": round(100 * (cpu3[2] - cpu2[2]) / (t3 - t2), 1),
            "readback_gets_per_s": round((r3["reads"] - r2["reads"]) / (t3 - t2), 1),
            **_phase_rates(m2, m3, t3 - t2),
        }
        result["operator_rss_steady_mib"] = op.rss_kib() // 1024
        result["operator_rss_peak_mib"] = op.peak_rss_kib // 1024
        result["apiserver_rss_peak_mib"] = apiserver.peak_rss_kib // 1024
        result["etcd_rss_peak_mib"] = etcd.peak_rss_kib // 1024

        # ---- failover: SIGKILL the leader; the standby takes over
        pods_read = r3["ips"]
        standby = Proc(ops["b"].pid)
        m4, cpu4 = await api.requests(), standby.cpu_s()
        t_kill, wall_kill = time.monotonic(), time.time()
        ops["a"].send_signal(signal.SIGKILL)
        ops["a"].wait()
        lease_s = all_read_s = None
        deadline = t_kill + args.failover_timeout
        while time.monotonic() < deadline:
            if lease_s is None and await lease_holder(api) == "op-b":
                lease_s = time.monotonic() - t_kill
            if lease_s is not None and responder_stats(8001, wall_kill)["ips_since"] >= pods_read:
                all_read_s = time.monotonic() - t_kill
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(args.failover_tail)
        t5 = time.monotonic()
        m5 = await api.requests()
        result["failover"] = {
            "pods": pods_read,
            "lease_taken_s": _ms(lease_s) if lease_s is not None else None,
            "all_refreshed_s": _ms(all_read_s) if all_read_s is not None else None,
            "window_s": _ms(t5 - t_kill),
            "status_writes": int(h.total(m4, m5, None, "llmservings/status")),
            "writes": int(h.total(m4, m5, h.WRITE_VERBS)),
            "lease_writes": int(h.total(m4, m5, NODE_LEASE_VERBS, "leases")),
            "requests": int(h.total(m4, m5)),
            "new_leader_status_patches": operator_metric(18082, "ovserve_operator_status_patches_total"),
            "new_leader_refreshes": operator_metric(18082, "ovserve_operator_status_refreshes_total"),
            "new_leader_cpu_s": _ms(standby.cpu_s() - cpu4),
            "new_leader_rss_mib": standby.rss_kib() // 1024,
            "top": [f"{v} {r} {int(x * (t5 - t_kill))}" for v, r, x in h.rates(m4, m5, t5 - t_kill)],
        }
        sampler_stop.set()
        await sampler
    finally:
        await stop(api, watcher, ops, responder)
    result["load_avg_after"] = os.getloadavg()[0]
    result["total_s"] = _ms(time.monotonic() - t_start)
    return result


def report(r: dict[str, Any]) -> None:
    load, steady, fo = r["load"], r["steady"], r["failover"]
    print(f"LLMServings / pods / nodes   {r['scale']} / {r['pods']} / {r['nodes']} ({r['gpu_nodes']} with GPUs)")
    print(f"created through the API      in {r['create_s']} s")
    print(
        f"create -> status observed    p50 {load['create_to_observed_p50_s']} s, p95 "
        f"{load['create_to_observed_p95_s']} s (bulk load); create -> Ready p95 {load['create_to_ready_p95_s']} s"
    )
    if "probe" in r:
        p = r["probe"]
        print(
            f"  at full scale ({p['count']} more)  p50 {p['create_to_observed_p50_s']} s, "
            f"p95 {p['create_to_observed_p95_s']} s; -> Ready p95 {p['create_to_ready_p95_s']} s"
        )
    print(f"all settled (Ready)          {load['all_settled_s']} s ({load['ready']} of {r['scale']})")
    print(
        f"operator RSS                 idle {r['operator_rss_idle_mib']} MiB, after load "
        f"{r['operator_rss_after_load_mib']} MiB, steady {r['operator_rss_steady_mib']} MiB, "
        f"peak {r['operator_rss_peak_mib']} MiB"
    )
    print(
        f"CPU during the load          operator {load['operator_cpu_s']} s, apiserver {load['apiserver_cpu_s']} s, "
        f"etcd {load['etcd_cpu_s']} s"
    )
    print(
        f"operator during the load     {load.get('operator_status_refreshes')} passes, "
        f"{load.get('operator_status_patches')} status patches, {load.get('operator_applies')} applies, "
        f"{load.get('operator_status_errors')} failed passes, {load.get('operator_apply_errors')} failed applies; "
        f"{load.get('readback_gets')} readback GETs"
    )
    print(f"apiserver during the load    {load['requests_per_s']} req/s, {load['writes_per_s']} writes/s:")
    for line in load["top"]:
        print(f"    {line}")
    print(
        f"steady state ({steady['seconds']} s)      status writes {steady['status_writes_per_s']}/s "
        f"(operator counted {int(steady['operator_status_patches'])}; refreshes "
        f"{int(steady['operator_status_refreshes'])}, own-patch echoes {int(steady['operator_status_echoes'])}); "
        f"all writes {steady['writes_per_s']}/s ({steady['node_lease_writes_per_s']}/s of them Lease renewals); "
        f"{steady['requests_per_s']} req/s; readback {steady['readback_gets_per_s']} GET/s"
    )
    print(
        f"  CPU                        operator {steady['operator_cpu_pct']} %, apiserver "
        f"{steady['apiserver_cpu_pct']} %, etcd {steady['etcd_cpu_pct']} % of one core"
    )
    for line in steady["top"]:
        print(f"    {line}")
    print(
        f"failover (SIGKILL leader)    Lease taken after {fo['lease_taken_s']} s; every pod read again after "
        f"{fo['all_refreshed_s']} s ({fo['pods']} pods)"
    )
    print(
        f"  in {fo['window_s']} s            {fo['status_writes']} status writes, {fo['writes']} writes "
        f"({fo['lease_writes']} Lease renewals), "
        f"{fo['requests']} requests; new leader {int(fo['new_leader_refreshes'])} refreshes, "
        f"{fo['new_leader_cpu_s']} CPU s, {fo['new_leader_rss_mib']} MiB"
    )
    for line in fo["top"]:
        print(f"    {line}")
    print(f"load average                 {r['load_avg_before']:.1f} before, {r['load_avg_after']:.1f} after")
    print(json.dumps(r))
