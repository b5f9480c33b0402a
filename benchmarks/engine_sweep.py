"""Benchmark: the engine settings that matter on CPU, swept on one model at 1, 16 and 64 streams.

Not a timed test: it prints a table of figures measured in one run. Each setting is a fresh subprocess with
a raw ContinuousBatchingPipeline (benchmarks/runtime_bench.py's RawCB loop: N requests added at t0, greedy,
ignore_eos, --max-tokens each), so that one setting's allocations do not stay for the next; the settings run
in rounds (--rounds), each round in the same order, and the table shows each setting's median over rounds,
so that load from other work on the machine hits every setting alike. Printed per setting: tok/s and TTFT p50
per stream count, the ratio to the first setting (the runtime's AUTO), CPU milliseconds per generated token
(the child's user + system time: steadier than throughput when other work shares the cores, and what
throughput follows on a machine whose cores are all busy), RSS after load and at the end, what
the plugin resolved (inference precision, KV-cache precision as openvino-genai allocated it), and how far its
greedy tokens stray from the f32 reference on a fixed prompt set (--quality-prompts prompts, the tokens
generated with the reference and with the setting compared position by position: the share of prompts whose
tokens are identical, and the mean length of the common prefix). With random weights greedy decoding is
fragile (logits are close), so a divergence is an upper bound of what real weights would see.

The settings (`--settings`, comma-separated names of SETTINGS below; default all): the KV-cache precision
(u8, u4 with a fixed cache, f16, bf16), the inference precision (f32, bf16), dynamic quantization of
activations (off, group 32, 64, 128), the scheduler's batch (max_num_batched_tokens) and its cache size.
The CPU's instruction set (ovserve_runtime.isa) is printed first: the table is per ISA.

usage: .venv/bin/python benchmarks/engine_sweep.py --model bench-qwen [--settings auto,kv-u8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "runtime"))

# name -> (plugin properties, scheduler overrides); "auto" is what the runtime does when the spec says nothing
SETTINGS: dict[str, tuple[dict, dict]] = {
    "auto": ({}, {}),
    "f32-ref": ({"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}, {}),
    "f32": ({"INFERENCE_PRECISION_HINT": "f32"}, {}),
    "bf16": ({"INFERENCE_PRECISION_HINT": "bf16"}, {}),
    "kv-u8": ({"KV_CACHE_PRECISION": "u8"}, {}),
    "kv-u4": ({"KV_CACHE_PRECISION": "u4"}, {"cache_size": 1}),
    "kv-f16": ({"KV_CACHE_PRECISION": "f16"}, {}),
    "kv-bf16": ({"KV_CACHE_PRECISION": "bf16"}, {}),
    "dq-off": ({"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}, {}),
    "dq-32": ({"DYNAMIC_QUANTIZATION_GROUP_SIZE": 32}, {}),
    "dq-64": ({"DYNAMIC_QUANTIZATION_GROUP_SIZE": 64}, {}),
    "dq-128": ({"DYNAMIC_QUANTIZATION_GROUP_SIZE": 128}, {}),
    "dq-256": ({"DYNAMIC_QUANTIZATION_GROUP_SIZE": 256}, {}),
    "f32-dq-128": ({"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 128}, {}),
    "f32-dq-128-kv-u8": (
        {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 128, "KV_CACHE_PRECISION": "u8"},
        {},
    ),
    "f32-kv-u8": ({"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8"}, {}),
    "kv-k8-v4": ({"KEY_CACHE_PRECISION": "u8", "VALUE_CACHE_PRECISION": "u4"}, {"cache_size": 1}),
    "pin-off": ({"ENABLE_CPU_PINNING": False}, {}),
    "tbb-static": ({"TBB_PARTITIONER": "STATIC"}, {}),
    "tbb-auto": ({"TBB_PARTITIONER": "AUTO"}, {}),
    "batch-512": ({}, {"max_num_batched_tokens": 512}),
    "batch-2048": ({}, {"max_num_batched_tokens": 2048}),
    "cache-1g": ({}, {"cache_size": 1}),
}
QUALITY_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics state that",
    "SELECT name, count(*) FROM users",
    "To bake bread you need flour, water,",
    "In 1969 the first humans landed on",
    "The quick brown fox jumps over the lazy dog because",
]


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    f = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(f["VmRSS"].split()[0]) / 1024, int(f["VmHWM"].split()[0]) / 1024


def child(model: str, props: dict, sched: dict, streams: list[int], max_new: int, threads: int, qn: int) -> dict:
    """One setting in this (fresh) process: load, the quality prompts, then each stream count once."""
    import openvino_genai as g
    from runtime_bench import SCHED, RawCB, gen_config, pct

    SCHED.clear()
    SCHED.update({"cache_size": 0, "max_num_seqs": 64, "dynamic_split_fuse": True, **sched})
    t0 = time.perf_counter()
    raw = RawCB.__new__(RawCB)
    raw.g = g
    s = g.SchedulerConfig()
    for k, v in SCHED.items():
        setattr(s, k, v)
    raw.pipe = g.ContinuousBatchingPipeline(model, s, "CPU", {"INFERENCE_NUM_THREADS": threads, **props})
    raw.tok = raw.pipe.get_tokenizer()
    raw.rid = 0
    load_s = time.perf_counter() - t0
    rss_load = rss_mib()[0]
    quality = []
    for p in QUALITY_PROMPTS[:qn]:
        c = gen_config(g, 16)
        c.ignore_eos = False
        out = raw.pipe.generate([raw.tok.encode(p).input_ids], [c])[0]  # token ids in, token ids out
        quality.append([int(t) for t in out.m_generation_ids[0]])
    runs = {}
    for n in streams:
        r = raw.run(n, max_new)
        cpu_ms = 1000 * r.cpu["raw"] / max(r.tokens, 1)
        runs[n] = {"tok_s": r.tok_s, "ttft_p50": pct(r.ttfts, 50), "tpot_p50": pct(r.tpots, 50), "cpu_ms_tok": cpu_ms}
    m = raw.pipe.get_metrics()
    cache_bytes = getattr(m, "cache_size_in_bytes", None)
    return {
        "load_s": load_s,
        "rss_load_mib": rss_load,
        "rss_end_mib": rss_mib()[0],
        "hwm_mib": rss_mib()[1],
        "quality": quality,
        "runs": runs,
        "cache_bytes": cache_bytes,
    }


def run_child(name: str, a) -> dict | None:
    props, sched = SETTINGS[name]
    cmd = [sys.executable, __file__, "--child", json.dumps({"props": props, "sched": sched}), "--model", a.model]
    cmd += ["--streams", a.streams, "--max-tokens", str(a.max_tokens), "--threads", str(a.threads)]
    cmd += ["--quality-prompts", str(a.quality_prompts)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    print(f"  {name}: failed (exit {p.returncode}): {' | '.join(tail)}", flush=True)
    return None


def divergence(ref: list[list[int]], got: list[list[int]]) -> tuple[float, float]:
    """(share of prompts whose tokens equal the reference's, mean common-prefix length in tokens)."""
    if not ref or not got:
        return float("nan"), float("nan")
    same = sum(1 for r, x in zip(ref, got, strict=False) if r == x) / len(ref)
    prefixes = []
    for r, x in zip(ref, got, strict=False):
        k = 0
        while k < min(len(r), len(x)) and r[k] == x[k]:
            k += 1
        prefixes.append(k)
    return same, statistics.mean(prefixes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bench-qwen", help="a directory or a name under $OVSERVE_MODELS")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--streams", default="1,16,64")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quality-prompts", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not Path(a.model).is_dir():
        a.model = str(Path(os.environ.get("OVSERVE_MODELS", "/var/cache/ovserve/models")) / a.model)
    streams = [int(x) for x in a.streams.split(",") if x]
    if a.child:
        spec = json.loads(a.child)
        res = child(a.model, spec["props"], spec["sched"], streams, a.max_tokens, a.threads, a.quality_prompts)
        print("RESULT " + json.dumps(res), flush=True)
        return

    from ovserve_runtime.isa import detect

    isa = detect()
    names = [n for n in a.settings.split(",") if n]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        sys.exit(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    if "f32-ref" not in names:
        names.append("f32-ref")  # the quality reference
    print(f"model {a.model}; CPU {isa.model_name}; ISA class {isa.level} ({', '.join(isa.features)})", flush=True)
    print(f"streams {streams}, {a.max_tokens} tokens each, threads {a.threads}, rounds {a.rounds}", flush=True)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(a.rounds):
        for n in names:
            t = time.perf_counter()
            res = run_child(n, a)
            if res:
                results[n].append(res)
                tps = " / ".join(f"{res['runs'][str(s)]['tok_s']:.1f}" for s in streams)
                print(f"  round {r + 1} {n}: {tps} tok/s ({time.perf_counter() - t:.0f} s)", flush=True)
    ref = results["f32-ref"][0]["quality"] if results["f32-ref"] else []
    base = names[0]

    def med(n: str, s: int, k: str) -> float:
        xs = [x["runs"][str(s)][k] for x in results[n]]
        return statistics.median(xs) if xs else float("nan")

    head = " | ".join(f"{s} str tok/s (x{base})" for s in streams)
    cpu_head = "/".join(map(str, streams))
    print(
        f"\n| setting | {head} | CPU ms/token @{cpu_head} (x{base}) | TTFT p50 s @{cpu_head} | RSS load/end MiB "
        "| same greedy / prefix |"
    )
    print("|---" * (len(streams) + 5) + "|")
    for n in names:
        if not results[n]:
            print(f"| {n} | failed |")
            continue
        cells = []
        for s in streams:
            v, b = med(n, s, "tok_s"), med(base, s, "tok_s")
            cells.append(f"{v:.1f} (x{v / b:.2f})")
        ttft = "/".join(f"{med(n, s, 'ttft_p50'):.2f}" for s in streams)
        cpu = "/".join(f"{med(n, s, 'cpu_ms_tok'):.1f}" for s in streams)
        cpu += " (x" + "/".join(f"{med(n, s, 'cpu_ms_tok') / med(base, s, 'cpu_ms_tok'):.2f}" for s in streams) + ")"
        x = results[n][0]
        same, prefix = divergence(ref, x["quality"])
        print(
            f"| {n} | {' | '.join(cells)} | {cpu} | {ttft} | {x['rss_load_mib']:.0f}/{x['rss_end_mib']:.0f} | "
            f"{same:.2f} / {prefix:.1f} |"
        )
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"isa": isa.model_dump(), "args": vars(a), "results": results}))


if __name__ == "__main__":
    main()
