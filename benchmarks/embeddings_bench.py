"""Embeddings mode of runtime_bench.py: ovserve-runtime's /v3/embeddings over HTTP vs the raw
TextEmbeddingPipeline, in documents per second, at C concurrent clients.

raw   TextEmbeddingPipeline in this process with the config the server reports it resolved, the same
      documents embedded in calls of C x --docs-per-request texts (capped at the server's batch): what
      perfect batching of C clients' requests would give the pipeline
http  ovserve-runtime as a subprocess; C clients (aiohttp, one connection each) loop sending requests of
      --docs-per-request documents (base64, the openai client's default) until all documents are embedded
Raw and HTTP runs alternate (`--reps` paired runs per C); the table shows medians and the spread of the
paired HTTP/raw ratio. Documents: synthetic sentences of 8-40 words (no hub). CPU per document (user +
system: the benchmark process around a raw run; the server process and the client around an HTTP run) is
printed too: on a shared machine whose cores are all busy, throughput follows it, and it moves less.
raw/(server+client) CPU is the HTTP/raw throughput such a machine allows when the client runs on the
server's cores; the server's mean batch (texts per pipeline call, from its metrics) shows the batching.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import socket
import statistics as st
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

WORDS = (
    "hello world the quick brown fox jumps over lazy dog openvino genai kubernetes operator serving runtime model "
    "pipeline token batch cache attention embedding rerank query document search retrieval vector index question "
    "answer paris france capital river city mountain red green blue cat house tree book page"
).split()


def documents(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(8, 40))) for _ in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbedServer:
    def __init__(self, model: str, threads: int, max_batch: int, extra: list[str]) -> None:
        port = _free_port()
        cmd = [sys.executable, "-m", "ovserve_runtime", "--model-path", model, "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--inference-threads", str(threads), "--served-name", "bench"]
        cmd += ["--embeddings-max-batch", str(max_batch), "--max-queued-requests", "4096"]
        cmd += ["--termination-log", os.devnull, "--log-level", "WARNING", *extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{port}"
        from runtime_bench import wait_ready  # the script's directory is on sys.path, as for speculative_bench

        wait_ready(self.proc, self.url, 300)

    def status(self) -> dict:
        with urllib.request.urlopen(self.url + "/v1/status", timeout=5) as r:
            return json.loads(r.read())

    def batch_counts(self) -> tuple[float, float]:
        """(texts, pipeline calls) so far, from ovserve_task_batch_texts."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        got = {}
        for line in text.splitlines():
            if line.startswith(("ovserve_task_batch_texts_sum ", "ovserve_task_batch_texts_count ")):
                name, value = line.split()
                got[name] = float(value)
        return got.get("ovserve_task_batch_texts_sum", 0.0), got.get("ovserve_task_batch_texts_count", 0.0)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def raw_pipeline(model: str, status: dict, threads: int):
    import openvino_genai as g

    rep = status["embeddings"]
    c = g.TextEmbeddingPipeline.Config()
    c.pooling_type = getattr(g.TextEmbeddingPipeline.PoolingType, rep["pooling"]["value"])
    c.normalize = rep["normalize"]["value"] == "true"
    if rep.get("maxLength"):
        c.max_length = rep["maxLength"]
    return g.TextEmbeddingPipeline(model, "CPU", c, INFERENCE_NUM_THREADS=threads)


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    """User + system seconds of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_run(pipe, docs: list[str], batch: int) -> tuple[float, float]:
    """(documents per second, CPU ms per document)."""
    t0, c0 = time.perf_counter(), self_cpu()
    for i in range(0, len(docs), batch):
        pipe.embed_documents(docs[i : i + batch])
    return len(docs) / (time.perf_counter() - t0), (self_cpu() - c0) * 1000 / len(docs)


async def _http_run(url: str, docs: list[str], clients: int, per_request: int) -> float:
    import aiohttp

    chunks = [docs[i : i + per_request] for i in range(0, len(docs), per_request)]
    it = iter(chunks)
    done = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        for chunk in it:
            body = {"model": "bench", "input": chunk, "encoding_format": "base64"}
            async with session.post(url + "/v3/embeddings", json=body) as r:
                data = json.loads(await r.read())
                if r.status != 200:
                    raise SystemExit(f"HTTP {r.status}: {data}")
                done += len(data["data"])

    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - t0
    assert done == len(docs), (done, len(docs))
    return len(docs) / wall


def bench(model: str, a) -> dict:
    clients = [int(x) for x in a.streams.split(",") if x]
    docs = documents(a.docs)
    extra = a.server_args.split() if a.server_args else []
    server = EmbedServer(model, a.threads, a.embeddings_max_batch, extra)
    out: dict = {"model": Path(model).name, "rows": []}
    try:
        pipe = raw_pipeline(model, server.status(), a.threads)
        raw_run(pipe, docs[:64], 16)  # warm-up both sides
        asyncio.run(_http_run(server.url, docs[:64], 4, a.docs_per_request))
        for c in clients:
            batch = min(c * a.docs_per_request, a.embeddings_max_batch)
            raws, https, ratios, raw_cpu, server_cpu, client_cpu, batches = [], [], [], [], [], [], []
            for _ in range(a.reps):
                r, rc = raw_run(pipe, docs, batch)
                s0, k0, (t0, n0) = proc_cpu(server.proc.pid), self_cpu(), server.batch_counts()
                h = asyncio.run(_http_run(server.url, docs, c, a.docs_per_request))
                server_cpu.append((proc_cpu(server.proc.pid) - s0) * 1000 / len(docs))
                client_cpu.append((self_cpu() - k0) * 1000 / len(docs))
                t1, n1 = server.batch_counts()
                batches.append((t1 - t0) / max(1.0, n1 - n0))
                raws.append(r)
                raw_cpu.append(rc)
                https.append(h)
                ratios.append(h / r)
            out["rows"].append(
                {
                    "clients": c,
                    "raw_batch": batch,
                    "raw_docs_s": st.median(raws),
                    "http_docs_s": st.median(https),
                    "ratio": st.median(ratios),
                    "ratio_min": min(ratios),
                    "ratio_max": max(ratios),
                    "raw_cpu_ms": st.median(raw_cpu),
                    "server_cpu_ms": st.median(server_cpu),
                    "client_cpu_ms": st.median(client_cpu),
                    "server_batch": st.median(batches),
                    # what a machine whose cores the client shares with the server allows: raw CPU per document
                    # over the server's and the client's together
                    "cpu_ceiling": st.median(raw_cpu) / (st.median(server_cpu) + st.median(client_cpu)),
                }
            )
            print(f"  {c} clients done", file=sys.stderr)
    finally:
        server.stop()
    return out


def print_table(res: dict, a) -> None:
    print(
        f"\n## {res['model']}: embeddings, {a.docs} documents, {a.docs_per_request} per request, "
        f"threads {a.threads}, max batch {a.embeddings_max_batch}, {a.reps} paired reps"
    )
    print(
        "| clients | raw batch | server batch | raw docs/s | HTTP docs/s | HTTP/raw (min-max) | CPU ms/doc raw | "
        "server | client | raw/server CPU | raw/(server+client) CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(
            f"| {r['clients']} | {r['raw_batch']} | {r['server_batch']:.1f} | {r['raw_docs_s']:.0f} | "
            f"{r['http_docs_s']:.0f} | {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
            f"{r['raw_cpu_ms']:.2f} | {r['server_cpu_ms']:.2f} | {r['client_cpu_ms']:.2f} | "
            f"{r['raw_cpu_ms'] / r['server_cpu_ms']:.2f} | {r['cpu_ceiling']:.2f} |"
        )


def run(a, models_dir: Path) -> None:
    for m in a.models.split(","):
        path = Path(m) if "/" in m else models_dir / m
        if not (path / "openvino_model.xml").is_file():
            print(f"skipping {m}: no model at {path}", file=sys.stderr)
            continue
        res = bench(str(path), a)
        print_table(res, a)
        if a.json:
            print("RESULT " + json.dumps(res))
        sys.stdout.flush()
