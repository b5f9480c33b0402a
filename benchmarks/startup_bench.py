"""Benchmark: how fast ovserve-runtime starts, cold and warm, with OpenVINO's compiled-model cache (issue 42).

Not a timed test: it prints figures measured in one run. For each model and pipeline, `--reps` rounds of three
starts of ovserve-runtime as a subprocess (the process start stands for the pod's container start; the
kubelet's own seconds are not in it):
  off    no --cache-dir
  cold   --cache-dir on an empty directory (compiles and writes the blobs)
  warm   --cache-dir on the directory the cold start filled
Per start: time to Ready (spawn -> /v2/health/ready 200), time to first token (spawn -> the answer of a
one-token /v3/completions sent at Ready), and the report's phases (/v1/status `startup`: weights read,
compile or cache load, first token, total) with the cache outcome. The table shows medians over the reps.
The page cache holds the weights in every start (the benchmark does not drop the machine's caches: other work
shares it), so `cold` here is "not compiled before", not "weights on a cold disk".

  .venv/bin/python benchmarks/startup_bench.py --models tiny-llm,bench-qwen --pipelines AUTO,LM --reps 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

MODELS = Path("/var/cache/ovserve/models")
MODES = ("off", "cold", "warm")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def start_once(model: Path, pipeline: str, cache: Path | None, log: Path, timeout: float = 300) -> dict:
    port = _port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "ovserve_runtime", "--model-path", str(model), "--port", str(port)]
    cmd += ["--host", "127.0.0.1", "--pipeline-type", pipeline]
    if cache is not None:
        cmd += ["--cache-dir", str(cache)]
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            while _get(url + "/v2/health/ready")[0] != 200:
                if proc.poll() is not None or time.perf_counter() - t0 > timeout:
                    raise RuntimeError(f"runtime did not get ready:\n{log.read_text()[-3000:]}")
                time.sleep(0.02)
            ready = time.perf_counter() - t0
            body = json.dumps({"model": model.name, "prompt": "Hello", "max_tokens": 1}).encode()
            req = urllib.request.Request(
                url + "/v3/completions", body, {"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
            first = time.perf_counter() - t0
            startup = json.loads(_get(url + "/v1/status")[1])["startup"]
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"ready": ready, "first": first, **startup}


def _med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny-llm,bench-qwen", help="model directories under --models-dir")
    ap.add_argument("--models-dir", type=Path, default=MODELS)
    ap.add_argument("--pipelines", default="AUTO,LM", help="--pipeline-type values (AUTO resolves to LM_CB)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ovserve-startup-bench-"))
    results: dict[tuple[str, str, str], list[dict]] = {}
    try:
        for name in args.models.split(","):
            for pipeline in args.pipelines.split(","):
                for rep in range(args.reps):
                    cache = work / f"cache-{name}-{pipeline}-{rep}"
                    for mode in MODES:
                        d = None if mode == "off" else cache
                        log = work / f"{name}-{pipeline}-{rep}-{mode}.log"
                        row = start_once(args.models_dir / name, pipeline, d, log)
                        results.setdefault((name, pipeline, mode), []).append(row)
                        print(
                            f"{name} {pipeline} rep {rep} {mode}: ready {row['ready']:.2f}s first token "
                            f"{row['first']:.2f}s compile {_fmt(row['compileSeconds'])}s cache {row['cache']}"
                            + (f" ({row['message']})" if row.get("message") else ""),
                            flush=True,
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        "| model | pipeline | start | to Ready s | to first token s | weights read s | compile s | first token s "
        "| total (report) s | cache | warm/cold (Ready) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, pipeline, mode), rows in results.items():
        cold = _med(results.get((name, pipeline, "cold"), []), "ready")
        ratio = _med(rows, "ready") / cold if mode == "warm" and cold else None
        caches = ",".join(sorted({r["cache"] for r in rows}))
        print(
            f"| {name} | {pipeline} | {mode} | {_fmt(_med(rows, 'ready'))} | {_fmt(_med(rows, 'first'))} | "
            f"{_fmt(_med(rows, 'weightsReadSeconds'))} | {_fmt(_med(rows, 'compileSeconds'))} | "
            f"{_fmt(_med(rows, 'firstTokenSeconds'))} | {_fmt(_med(rows, 'totalSeconds'))} | {caches} | "
            f"{_fmt(ratio)} |"
        )


if __name__ == "__main__":
    main()
