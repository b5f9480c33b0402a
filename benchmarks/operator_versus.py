"""Two operators side by side at a bulk load (benchmarks/operator_bench.py --scale N --versus DIR).

A before/after comparison run one after the other on this shared 2-core box mixes the operators' difference with
the machine's: the apiserver's CPU for the same requests differed by up to 29 % between two consecutive runs. Here
both operators run at once on one bench cluster (hack/scale/cluster.sh), each watching namespaces of its own and
holding a Lease of its own: `--operator-src` ("a") and `--versus` ("b") get N/2 objects each, from one manifest
list (the same mix of GPU and two-replica objects on both sides), created interleaved (16 at a time, the side that
goes first alternating), so that both meet the same machine, the same apiserver and the same simulated kubelets at
every moment. Run it twice with the two swapped to cancel what favours a side.

Per side: all settled (every object Ready), create -> status observed and -> Ready p50/p95, the operator's CPU
and passes, status patches and applies, its RSS idle and settled; then a steady window (`--steady` seconds in which
nothing changes): each operator's CPU, passes and status patches. The ratios b/a are printed with one JSON line.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import operator_scale as s
import scale_harness as h

SIDES = ("a", "b")


def split(n: int, tenants: int) -> dict[str, list[dict]]:
    """N objects from one manifest list, alternately to side a and b, each side in namespaces of its own."""
    out: dict[str, list[dict]] = {side: [] for side in SIDES}
    for i, o in enumerate(h.llmserving_manifests(n, tenants=tenants)):
        side = SIDES[(i // tenants) % 2]  # whole rounds of the tenants: both sides get every namespace's mix
        o["metadata"]["namespace"] = f"{side}-{o['metadata']['namespace']}"
        out[side].append(o)
    return out


def interleaved(sides: dict[str, list[dict]]) -> list[dict]:
    a, b = sides["a"], sides["b"]
    out: list[dict] = []
    for i in range(max(len(a), len(b))):
        pair = [x[i] for x in (a, b) if i < len(x)]
        out.extend(pair if i % 2 == 0 else pair[::-1])
    return out


def machine_cpu() -> tuple[int, int]:
    """(steal, total) jiffies of the whole machine (/proc/stat): steal is time the hypervisor gave elsewhere."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return f[7], sum(f[:8])


async def run(args: Any) -> dict[str, Any]:
    t_start = time.monotonic()
    sides = split(args.scale, args.tenants)
    srcs = {"a": args.operator_src, "b": args.versus}
    result: dict[str, Any] = {
        "scale": args.scale,
        "srcs": {k: str(v) for k, v in srcs.items()},
        "load_avg_before": os.getloadavg()[0],
    }
    api = s.Api(s.SCALE_DIR / "kubeconfig")
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    responder = s.start_responder(log_dir)
    ops: dict[str, subprocess.Popen] = {}
    tracker = s.Tracker()
    watcher: asyncio.Task | None = None
    try:
        namespaces = {side: sorted({o["metadata"]["namespace"] for o in items}) for side, items in sides.items()}
        await s.prepare(api, args, [*namespaces["a"], *namespaces["b"]])
        ports = {"a": 18081, "b": 18082}
        for side in SIDES:
            ops[side] = s.start_operator(
                f"op-{side}", ports[side], srcs[side], log_dir, ",".join(namespaces[side]), f"ovserve-{side}"
            )
        await asyncio.gather(*(s.wait_kopf(ports[side], 120) for side in SIDES))
        await asyncio.sleep(3)  # the watches established
        procs = {side: s.Proc(ops[side].pid) for side in SIDES}
        rss_idle = {side: procs[side].rss_kib() // 1024 for side in SIDES}
        watcher = asyncio.create_task(s.watch(api, tracker))
        await asyncio.sleep(1)

        def reading() -> tuple[dict[str, dict[str, float]], dict[str, float], float]:
            """Each operator's counters and CPU seconds, and when."""
            counted = {side: s.operator_counters(ports[side]) for side in SIDES}
            return counted, {side: procs[side].cpu_s() for side in SIDES}, time.monotonic()

        (c0, cpu0, t0), steal0 = reading(), machine_cpu()
        settled: dict[str, float] = {}
        keys = {side: [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in sides[side]] for side in SIDES}
        cpu_at: dict[str, float] = {}

        async def until_settled(side: str) -> None:
            if await s.wait_for(lambda: all(k in tracker.ready for k in keys[side]), args.timeout):
                settled[side] = time.monotonic() - t0
                cpu_at[side] = procs[side].cpu_s()

        waiting = [asyncio.create_task(until_settled(side)) for side in SIDES]
        await s.create_all(api, interleaved(sides), tracker, 16)
        result["create_s"] = s._ms(time.monotonic() - t0)
        await asyncio.gather(*waiting)
        steal1 = machine_cpu()
        result["machine_steal_pct"] = round(100 * (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1]), 1)
        for side in SIDES:
            c1 = s.operator_counters(ports[side])
            obs, rdy = tracker.lags(keys[side], tracker.observed), tracker.lags(keys[side], tracker.ready)
            result[side] = {
                "objects": len(keys[side]),
                "ready": len(rdy),
                "all_settled_s": s._ms(settled[side]) if side in settled else None,
                "create_to_observed_p50_s": s._ms(h.pct(obs, 0.5)),
                "create_to_observed_p95_s": s._ms(h.pct(obs, 0.95)),
                "create_to_ready_p50_s": s._ms(h.pct(rdy, 0.5)),
                "create_to_ready_p95_s": s._ms(h.pct(rdy, 0.95)),
                "operator_cpu_s": s._ms(cpu_at.get(side, procs[side].cpu_s()) - cpu0[side]),
                **{f"operator_{c}": int(c1[c] - c0[side][c]) for c in s.LOAD_COUNTERS},
                "rss_idle_mib": rss_idle[side],
                "rss_settled_mib": procs[side].rss_kib() // 1024,
            }
        # the steady state: nothing changes; each operator's CPU and passes over the same window
        await asyncio.sleep(5)

        c2, cpu2, t2 = reading()
        await asyncio.sleep(args.steady)
        c3, cpu3, t3 = reading()
        result["steady_s"] = s._ms(t3 - t2)
        for side in SIDES:
            result[side]["steady_cpu_pct"] = round(100 * (cpu3[side] - cpu2[side]) / (t3 - t2), 1)
            result[side]["steady_passes"] = int(c3[side]["status_refreshes"] - c2[side]["status_refreshes"])
            result[side]["steady_patches"] = int(c3[side]["status_patches"] - c2[side]["status_patches"])
    finally:
        await s.stop(api, watcher, ops, responder)
    a, b = result.get("a") or {}, result.get("b") or {}
    result["ratio_b_over_a"] = {
        k: round(b[k] / a[k], 3)
        for k in (
            "all_settled_s",
            "create_to_observed_p50_s",
            "create_to_observed_p95_s",
            "operator_cpu_s",
            "rss_settled_mib",
            "steady_cpu_pct",
        )
        if a.get(k) and b.get(k)
    }
    result["load_avg_after"] = os.getloadavg()[0]
    result["total_s"] = s._ms(time.monotonic() - t_start)
    return result


def report(r: dict[str, Any]) -> None:
    import json

    print(f"{r['scale']} LLMServings, half to each operator, created interleaved in {r.get('create_s')} s")
    print(f"{'':34} {'a':>10} {'b':>10} {'b/a':>7}")
    rows = [
        ("all settled (Ready), s", "all_settled_s"),
        ("create -> observed p50, s", "create_to_observed_p50_s"),
        ("create -> observed p95, s", "create_to_observed_p95_s"),
        ("create -> Ready p95, s", "create_to_ready_p95_s"),
        ("operator CPU until settled, s", "operator_cpu_s"),
        ("passes", "operator_status_refreshes"),
        ("status patches", "operator_status_patches"),
        ("applies", "operator_applies"),
        ("failed passes / applies", None),
        ("operator RSS idle, MiB", "rss_idle_mib"),
        ("operator RSS settled, MiB", "rss_settled_mib"),
        (f"steady: operator CPU, % ({r.get('steady_s')} s)", "steady_cpu_pct"),
        ("steady: passes", "steady_passes"),
        ("steady: status patches", "steady_patches"),
    ]
    a, b = r.get("a") or {}, r.get("b") or {}
    for label, key in rows:
        if key is None:
            va = f"{a.get('operator_status_errors')}/{a.get('operator_apply_errors')}"
            vb = f"{b.get('operator_status_errors')}/{b.get('operator_apply_errors')}"
            print(f"{label:34} {va:>10} {vb:>10}")
            continue
        x, y = a.get(key), b.get(key)
        ratio = f"{y / x:.3f}" if x and y else ""
        print(f"{label:34} {x!s:>10} {y!s:>10} {ratio:>7}")
    print(f"a: {r['srcs']['a']}\nb: {r['srcs']['b']}")
    print(
        f"machine steal during the load {r.get('machine_steal_pct')} %; load average "
        f"{r['load_avg_before']:.1f} before, {r['load_avg_after']:.1f} after"
    )
    print(json.dumps(r))
