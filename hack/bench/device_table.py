"""The docs table of a serving benchmark run: benchmarks/runtime_bench.py --json-out FILE -> markdown.

One row per model and stream count, one column group per runtime (old/new of hack/bench/device.sh, or the
one runtime of a plain run): the median HTTP/raw throughput of the paired runs (min-max), the median mean-TTFT
ratio, and the CPU per token of each process; then whether issue 30's targets are met (HTTP/raw >= 0.95 on a
real-shaped model, >= 0.8 on tiny-llm, mean TTFT <= 1.25x raw at 16 and 64 streams).
Standard library only: it runs on the device machine too.

usage: python3 hack/bench/device_table.py RESULTS.json [--title TEXT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TINY = ("tiny-llm",)  # overhead-bound models: the lower target


def runtimes(model: dict) -> dict[str, dict]:
    """label -> {"cb": {streams: pair summary}} for a --runtime run and a plain one alike."""
    if model.get("runtimes"):
        return model["runtimes"]
    return {"http": {"cb": model.get("cb", {})}}


def target(name: str) -> float:
    return 0.8 if name.startswith(TINY) else 0.95


def table(doc: dict, title: str) -> list[str]:
    meta = doc.get("meta", {})
    lines = [f"### {title}", ""]
    flags = " ".join(meta.get("argv", []))
    refused = ", client policy refused: SCHED_OTHER" if meta.get("client_policy_refused") else ""
    lines.append(f"{meta.get('cpus', '?')} CPUs, Python {meta.get('python', '?')}, bench flags `{flags}`{refused}")
    lines.append("")
    labels: list[str] = []
    for m in doc["models"]:
        labels += [k for k in runtimes(m) if k not in labels]
    head = ["model", "streams", "raw tok/s"]
    for k in labels:
        head += [f"{k} HTTP/raw (min-max)", f"{k} TTFT HTTP/raw"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    misses: list[str] = []
    cpu_rows: list[str] = []
    for m in doc["models"]:
        name = Path(m["model"]).name
        rts = runtimes(m)
        streams = sorted({int(n) for r in rts.values() for n in r.get("cb", {})})
        for n in streams:
            raw = next((r["cb"][str(n)]["raw"] for r in rts.values() if str(n) in r.get("cb", {})), None)
            row = [name, str(n), f"{raw['tok_s']:.0f}" if raw else "-"]
            cpu = [name, str(n), f"{raw['cpu_us_per_token'].get('raw', 0):.0f}" if raw else "-"]
            for k in labels:
                d = rts.get(k, {}).get("cb", {}).get(str(n))
                if d is None:
                    row += ["failed" if "error" in rts.get(k, {}) else "-", "-"]
                    cpu += ["-"]
                    continue
                row += [
                    f"{d['ratio_median']:.2f} ({d['ratio_min']:.2f}-{d['ratio_max']:.2f})",
                    f"{d['ttft_ratio_median']:.2f}x",
                ]
                c = d["http"]["cpu_us_per_token"]
                cpu += [f"{c.get('http', 0):.0f} / {c.get('engine', 0):.0f} / {c.get('client', 0):.0f}"]
                if d["ratio_median"] < target(name):
                    misses.append(f"{k} {name} {n}: HTTP/raw {d['ratio_median']:.3f} < {target(name)}")
                if n <= 64 and d["ttft_ratio_median"] > 1.25:
                    misses.append(f"{k} {name} {n}: TTFT {d['ttft_ratio_median']:.2f}x > 1.25x")
            lines.append("| " + " | ".join(row) + " |")
            cpu_rows.append("| " + " | ".join(cpu) + " |")
    head = ["model", "streams", "raw loop"] + [f"{k}: HTTP / engine / client" for k in labels]
    lines += ["", "CPU per generated token, us (all reps together):", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *cpu_rows]
    lines += ["", "Targets missed: " + ("; ".join(misses) if misses else "none")]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--title", default="HTTP vs the raw ContinuousBatchingPipeline (medians of paired runs)")
    a = ap.parse_args()
    print("\n".join(table(json.loads(Path(a.results).read_text()), a.title)))


if __name__ == "__main__":
    main()
