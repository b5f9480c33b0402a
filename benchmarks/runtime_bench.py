"""Benchmark: ovserve-runtime over HTTP vs the raw ContinuousBatchingPipeline, and CB vs legacy.

Not a timed test. Everything runs one after another in this process (the HTTP servers as subprocesses),
so figures are comparable within one run:
  raw CB      ContinuousBatchingPipeline, N requests added at t0, add_request/step loop
  http CB     ovserve-runtime (AUTO -> LM_CB), N concurrent streaming /v3/completions (openai client)
  raw legacy  LLMPipeline(ATTENTION_BACKEND=SDPA), N requests one after another
  http legacy ovserve-runtime --pipeline-type LM, N concurrent streaming requests (serialized inside)
TTFT = from submitting all N requests to each request's first token (mean over requests; the HTTP side
measures the first SSE chunk at the client). Greedy, ignore_eos, max_tokens tokens each.

usage: .venv/bin/python benchmarks/runtime_bench.py [--model DIR] [--streams 1,8,16] [--max-tokens 64]
       (default model: $OVSERVE_MODELS/tiny-bench from `hack/models/build.sh bench`, else tiny-llm)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics as st
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SCHED = {"cache_size": 1, "max_num_seqs": 16, "max_num_batched_tokens": 256, "dynamic_split_fuse": True}


def prompts(n: int) -> list[str]:
    return [f"hello world number {i} the quick brown fox jumps over the lazy dog" for i in range(n)]


def gen_config(g, max_new: int):
    c = g.GenerationConfig()
    c.max_new_tokens = max_new
    c.ignore_eos = True
    c.do_sample = False
    return c


def raw_cb(model: str, ns: list[int], max_new: int, reps: int, threads: int) -> dict:
    import openvino_genai as g

    s = g.SchedulerConfig()
    for k, v in SCHED.items():
        setattr(s, k, v)
    pipe = g.ContinuousBatchingPipeline(model, s, "CPU", {"INFERENCE_NUM_THREADS": threads})
    tok = pipe.get_tokenizer()
    pipe.generate(["warmup"], [gen_config(g, 4)])
    out, rid = {}, 0
    for n in ns:
        walls, ttfts, toks = [], [], []
        ids = [tok.encode(p).input_ids for p in prompts(n)]
        for _ in range(reps):
            t0 = time.perf_counter()
            handles = []
            for x in ids:
                handles.append(pipe.add_request(rid, x, gen_config(g, max_new)))
                rid += 1
            first, count = [None] * n, 0
            while pipe.has_non_finished_requests():
                pipe.step()
                now = time.perf_counter()
                for i, h in enumerate(handles):
                    if h.can_read():
                        k = sum(len(o.generated_ids) for o in h.read().values())
                        count += k
                        if k and first[i] is None:
                            first[i] = now - t0
            walls.append(time.perf_counter() - t0)
            ttfts.append(st.mean(first))
            toks.append(count)
        out[n] = _summary(walls, ttfts, toks)
    del pipe
    return out


def raw_legacy(model: str, ns: list[int], max_new: int, reps: int, threads: int) -> dict:
    import openvino_genai as g

    pipe = g.LLMPipeline(model, "CPU", ATTENTION_BACKEND="SDPA", INFERENCE_NUM_THREADS=threads)
    tok = pipe.get_tokenizer()
    pipe.generate(tok.encode("warmup").input_ids, gen_config(g, 4))
    out = {}
    for n in ns:
        walls, ttfts, toks = [], [], []
        ids = [tok.encode(p).input_ids for p in prompts(n)]
        for _ in range(reps):
            t0 = time.perf_counter()
            first, count = [], [0]
            for x in ids:
                pipe.generate(x, gen_config(g, max_new), _Streamer(g, first, count, t0))
            walls.append(time.perf_counter() - t0)
            ttfts.append(st.mean(first))
            toks.append(count[0])
        out[n] = _summary(walls, ttfts, toks)
    del pipe
    return out


def _Streamer(g, first: list, count: list, t0: float):
    class S(g.StreamerBase):
        seen = False

        def write(self, token):
            if not self.seen:
                self.seen = True
                first.append(time.perf_counter() - t0)
            count[0] += 1 if isinstance(token, int) else len(token)
            return g.StreamingStatus.RUNNING

        def end(self):
            pass

    return S()


def _summary(walls, ttfts, toks) -> dict:
    best = min(range(len(walls)), key=walls.__getitem__)
    return {
        "wall_s": round(walls[best], 3),
        "tok_s": round(toks[best] / walls[best], 1),
        "ttft_ms": round(st.median(ttfts) * 1000, 1),
        "tokens": toks[best],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, ptype: str, threads: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "ovserve_runtime",
        "--model-path",
        model,
        "--pipeline-type",
        ptype,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--inference-threads",
        str(threads),
        "--cache-size-gb",
        str(SCHED["cache_size"]),
        "--max-num-seqs",
        str(SCHED["max_num_seqs"]),
        "--max-num-batched-tokens",
        str(SCHED["max_num_batched_tokens"]),
        "--dynamic-split-fuse",
        "--served-name",
        "bench",
        "--termination-log",
        os.devnull,
        "--log-level",
        "WARNING",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    with urllib.request.urlopen(url + "/v1/status", timeout=2) as s:
                        print(f"  server {ptype}: {json.loads(s.read())['pipeline']}", file=sys.stderr)
                    return proc, url
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("server not ready")


def http_bench(url: str, ns: list[int], max_new: int, reps: int) -> dict:
    import openai

    async def one(c, prompt: str, t0: float):
        first, n = None, 0
        stream = await c.completions.create(
            model="bench",
            prompt=prompt,
            max_tokens=max_new,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        async for ch in stream:
            if ch.choices and first is None:
                first = time.perf_counter() - t0
            if ch.usage:
                n = ch.usage.completion_tokens
        return first, n

    async def run():
        c = openai.AsyncOpenAI(base_url=url + "/v3", api_key="x", max_retries=0, timeout=600)
        try:
            await one(c, "warmup", time.perf_counter())
            out = {}
            for n in ns:
                walls, ttfts, toks = [], [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    res = await asyncio.gather(*(one(c, p, t0) for p in prompts(n)))
                    walls.append(time.perf_counter() - t0)
                    ttfts.append(st.mean(r[0] for r in res))
                    toks.append(sum(r[1] for r in res))
                out[n] = _summary(walls, ttfts, toks)
            return out
        finally:
            await c.close()

    return asyncio.run(run())


def main() -> None:
    models = Path(os.environ.get("OVSERVE_MODELS", "/var/cache/ovserve/models"))
    default = models / "tiny-bench" if (models / "tiny-bench").is_dir() else models / "tiny-llm"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(default))
    ap.add_argument("--streams", default="1,8,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS for every pipeline")
    ap.add_argument("--json", action="store_true", help="also print one RESULT json line")
    a = ap.parse_args()
    ns = [int(x) for x in a.streams.split(",")]
    print(f"model {a.model}, max_tokens {a.max_tokens}, best of {a.reps}, threads {a.threads}", file=sys.stderr)
    res: dict[str, dict] = {}
    print("raw CB ...", file=sys.stderr)
    res["raw_cb"] = raw_cb(a.model, ns, a.max_tokens, a.reps, a.threads)
    for ptype, key in (("LM_CB", "http_cb"), ("LM", "http_legacy")):
        print(f"http {ptype} ...", file=sys.stderr)
        proc, url = start_server(a.model, ptype, a.threads)
        try:
            res[key] = http_bench(url, ns, a.max_tokens, a.reps)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print("raw legacy ...", file=sys.stderr)
    res["raw_legacy"] = raw_legacy(a.model, ns, a.max_tokens, a.reps, a.threads)

    print(
        f"\n{'N':>3} | {'raw CB tok/s':>12} {'TTFT ms':>8} | {'http CB tok/s':>13} {'TTFT ms':>8} | "
        f"{'http/raw':>8} | {'raw legacy tok/s':>16} {'TTFT ms':>8} | "
        f"{'http legacy tok/s':>17} {'TTFT ms':>8} | "
        f"{'CB/legacy raw':>13} {'CB/legacy http':>14}"
    )
    for n in ns:
        rc, hc, rl, hl = (res[k][n] for k in ("raw_cb", "http_cb", "raw_legacy", "http_legacy"))
        print(
            f"{n:>3} | {rc['tok_s']:>12} {rc['ttft_ms']:>8} | {hc['tok_s']:>13} {hc['ttft_ms']:>8} | "
            f"{hc['tok_s'] / rc['tok_s']:>8.2f} | {rl['tok_s']:>16} {rl['ttft_ms']:>8} | {hl['tok_s']:>17} "
            f"{hl['ttft_ms']:>8} | {rc['tok_s'] / rl['tok_s']:>12.1f}x {hc['tok_s'] / hl['tok_s']:>13.1f}x"
        )
    for k, v in res.items():
        for n, d in v.items():
            if d["tokens"] != n * a.max_tokens:
                print(f"WARNING {k} N={n}: {d['tokens']} tokens, expected {n * a.max_tokens}", file=sys.stderr)
    if a.json:
        print("RESULT " + json.dumps({"model": a.model, "max_tokens": a.max_tokens, "results": res}))


if __name__ == "__main__":
    main()
