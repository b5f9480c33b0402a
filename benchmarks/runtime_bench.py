"""Benchmark: ovserve-runtime over HTTP vs the raw ContinuousBatchingPipeline, CB vs legacy, and RSS.

Not a timed test: it prints figures and ratios measured in one run. Per model:
  raw CB      ContinuousBatchingPipeline in this process, N requests added at t0, add_request/step loop
  http CB     ovserve-runtime (LM_CB) as a subprocess, N concurrent streaming requests (--endpoint)
  raw legacy  LLMPipeline(ATTENTION_BACKEND=SDPA), N requests one after another   (--legacy-streams)
  http legacy ovserve-runtime --pipeline-type LM, N concurrent streaming requests  (serialized inside)
Raw and HTTP runs alternate (paired, `--reps` times) so that load from other work on the machine hits
both sides alike; the table shows medians, and the spread of the paired HTTP/raw ratio is the noise.
TTFT = from submitting all N requests to each request's first token (HTTP: the first SSE chunk with text at the
client); TPOT = (last token - first token) / (tokens - 1) per request; p50/p99 over all requests of all
reps. Greedy, ignore_eos, --max-tokens tokens each. RSS: the serving process's VmRSS/VmHWM at the end.
CPU per token (user + system, per process role, from /proc and getrusage around each run): the raw loop vs
the HTTP process, the engine-core process and the benchmark client. Less noisy than throughput on a shared
machine, and it says where the time goes: on a box whose cores are all busy, throughput follows it.

Endpoints (`--endpoint`, default completions): completions = streaming /v3/completions with the prompt;
chat = streaming /v3/chat/completions with the prompt as one user message; responses = streaming
/v3/responses with `input` the prompt and `max_output_tokens` (the stream's `response.output_text.delta`
events are its text, its last event `response.completed` / `.incomplete` holds the usage). All three send
the vendor field `ignore_eos` and count tokens from the server's usage (completion_tokens; responses:
output_tokens). Several, comma-separated (`--endpoint chat,responses`), are measured on the same server:
every raw run is paired with one HTTP run on each endpoint, order rotated per rep (as --runtime entries
"LABEL/ENDPOINT", with --runtime or without: "http/ENDPOINT"), and a table gives each one's HTTP tok/s over
the first one's, per rep and median (no legacy, no aiperf).

The default client is a lean aiohttp SSE reader (the client shares the CPU with the server, and the
openai client's per-chunk parsing would dominate on small models); `--client openai` uses the openai client.
While the HTTP runs, the client's thread is SCHED_BATCH (`--client-policy other` keeps the default): it stands
for users on other machines, so its wake-ups should not preempt the engine's inference threads, which the raw
loop never shares its cores with. Its CPU per token is still counted, and still taken from the same cores.

Second opinion (`--aiperf`): after our own paired runs, NVIDIA AIPerf (`aiperf profile`, pinned in
hack/bench/requirements-aiperf.txt, its own cached venv made on demand by hack/bench/aiperf-venv.sh) runs
against the same LM_CB server for each stream count N: streaming /v3/completions, concurrency N,
--aiperf-requests x N requests after N warmup requests, synthetic prompts as long as ours (the model's own
tokenizer.json), --max-tokens output tokens with ignore_eos, token counts from the server's usage. Its
summary (output tok/s, req/s, TTFT and ITL p50/p99, errors) is printed beside our HTTP figures with the
ratio of the two tools' throughput. aiperf keeps N requests in flight (a new one as each ends), ours sends
N at once and waits for all (steady state vs one burst). On the 2-core dev machine aiperf reads 0.6-0.8 of
our throughput: its client spends several times more CPU per token than the lean client, on the cores the
server uses, and refills a slot only after a round trip through its own processes, while the server's CPU
per token is no higher under aiperf.

Speculative decoding (`--speculative`, benchmarks/speculative_bench.py): no speculation vs a draft (--draft,
default tiny-llm-draft, which shares tiny-bench's tokenizer; several comma-separated drafts run side by side)
vs prompt lookup over HTTP: throughput, TTFT, TPOT and the acceptance counters; with random weights it
measures the price of speculation that is never right (and a high acceptance there is an artefact).

Embeddings (`--mode embeddings`, benchmarks/embeddings_bench.py): /v3/embeddings over HTTP vs the raw
TextEmbeddingPipeline in documents per second at --streams concurrent clients (default models tiny-embed-bench,
tiny-embed: `hack/models/encoders/build.sh bench`).

Runtimes side by side (`--runtime LABEL=SOURCE`, repeated): each runtime's LM_CB server is started (a source
directory holding ovserve_runtime/, or an executable), and every raw run is paired with one HTTP run of each,
their order rotated per rep, so that e.g. a revision before a redesign and after it are measured on the same
machine at the same time; `--json-out FILE` writes every figure. hack/bench/device.sh packs this for the
16-core device machine (docs/benchmarks.md).

usage: .venv/bin/python benchmarks/runtime_bench.py [--models tiny-llm,tiny-bench,bench-qwen]
         [--streams 1,16,64] [--legacy-streams 16,64 | --legacy-streams ''] [--max-tokens 64] [--reps 3]
         [--aiperf [--aiperf-requests 4]] [--runtime old=DIR --runtime new=DIR] [--json-out FILE]
         [--endpoint completions|chat|responses[,...]] [--client lean|openai]
       models are names under $OVSERVE_MODELS (/var/cache/ovserve/models) or paths; missing ones are skipped
       (tiny-bench: `hack/models/build.sh bench`, bench-qwen: `hack/models/bench-qwen.sh`, bench-qwen-small:
       `hack/models/bench-qwen.sh bench-qwen-small`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics as st
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

SCHED = {"cache_size": 1, "max_num_seqs": 64, "max_num_batched_tokens": 256, "dynamic_split_fuse": True}


def prompts(n: int) -> list[str]:
    return [f"hello world number {i} the quick brown fox jumps over the lazy dog" for i in range(n)]


def gen_config(g, max_new: int):
    c = g.GenerationConfig()
    c.max_new_tokens = max_new
    c.ignore_eos = True
    c.do_sample = False
    return c


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))] if xs else float("nan")


class Run:
    """One measured batch of N concurrent requests; `cpu`: CPU seconds it took, by process role."""

    def __init__(self, wall: float, tokens: int, ttfts: list[float], tpots: list[float]) -> None:
        self.wall, self.tokens, self.ttfts, self.tpots = wall, tokens, ttfts, tpots
        self.cpu: dict[str, float] = {}

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall


class RawCB:
    def __init__(self, model: str, threads: int) -> None:
        import openvino_genai as g

        self.g = g
        s = g.SchedulerConfig()
        for k, v in SCHED.items():
            setattr(s, k, v)
        self.pipe = g.ContinuousBatchingPipeline(model, s, "CPU", {"INFERENCE_NUM_THREADS": threads})
        self.tok = self.pipe.get_tokenizer()
        self.rid = 0
        self.pipe.generate(["warmup"], [gen_config(g, 4)])

    def run(self, n: int, max_new: int) -> Run:
        g, pipe = self.g, self.pipe
        ids = [self.tok.encode(p).input_ids for p in prompts(n)]
        c0 = self_cpu()
        t0 = time.perf_counter()
        handles = []
        for x in ids:
            handles.append(pipe.add_request(self.rid, x, gen_config(g, max_new)))
            self.rid += 1
        first, last, count = [None] * n, [0.0] * n, [0] * n
        while pipe.has_non_finished_requests():
            pipe.step()
            now = time.perf_counter()
            for i, h in enumerate(handles):
                if h.can_read():
                    k = sum(len(o.generated_ids) for o in h.read().values())
                    if k:
                        count[i] += k
                        last[i] = now
                        if first[i] is None:
                            first[i] = now
        wall = time.perf_counter() - t0
        run = _run(wall, t0, first, last, count)
        run.cpu = {"raw": self_cpu() - c0}
        return run


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_stat(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields after the command name (state, ppid, ...; utime and stime at 11 and 12)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of one process, all its threads; 0 once it is gone."""
    try:
        f = proc_stat(pid)
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _run(wall, t0, first, last, count) -> Run:
    ttfts = [f - t0 for f in first if f is not None]
    tpots = [(la - f) / (c - 1) for f, la, c in zip(first, last, count, strict=True) if f is not None and c > 1]
    return Run(wall, sum(count), ttfts, tpots)


def raw_legacy(model: str, n: int, max_new: int, threads: int) -> Run:
    import openvino_genai as g

    pipe = g.LLMPipeline(model, "CPU", ATTENTION_BACKEND="SDPA", INFERENCE_NUM_THREADS=threads)
    tok = pipe.get_tokenizer()
    pipe.generate(tok.encode("warmup").input_ids, gen_config(g, 4))
    ids = [tok.encode(p).input_ids for p in prompts(n)]
    first, last, count = [None] * n, [0.0] * n, [0] * n
    t0 = time.perf_counter()
    for i, x in enumerate(ids):

        class S(g.StreamerBase):
            def write(self, token, i=i):
                now = time.perf_counter()
                if first[i] is None:
                    first[i] = now
                last[i] = now
                count[i] += 1 if isinstance(token, int) else len(token)
                return g.StreamingStatus.RUNNING

            def end(self):
                pass

        pipe.generate(x, gen_config(g, max_new), S())
    wall = time.perf_counter() - t0
    del pipe
    return _run(wall, t0, first, last, count)


AIPERF_VENV_SCRIPT = Path(__file__).resolve().parent.parent / "hack" / "bench" / "aiperf-venv.sh"


class AiperfMetric(BaseModel):
    model_config = ConfigDict(extra="ignore")
    avg: float
    p50: float | None = None
    p99: float | None = None


class AiperfErrorCount(BaseModel):
    model_config = ConfigDict(extra="ignore")
    count: int


class AiperfExport(BaseModel):
    """What the bench reads of aiperf's profile_export_aiperf.json (schema 1.4, aiperf 0.13).

    Latency metrics are in ms, throughputs per second; a metric no request produced (all failed) is absent.
    """

    model_config = ConfigDict(extra="ignore")
    aiperf_version: str = "?"
    output_token_throughput: AiperfMetric | None = None
    request_throughput: AiperfMetric | None = None
    time_to_first_token: AiperfMetric | None = None
    inter_token_latency: AiperfMetric | None = None
    request_count: AiperfMetric | None = None
    error_summary: list[AiperfErrorCount] = []

    @property
    def errors(self) -> int:
        return sum(e.count for e in self.error_summary)


def find_aiperf() -> str:
    """The aiperf executable: $OVSERVE_AIPERF, else the pinned cached venv (created on demand).

    Exits with a message, before anything is measured, when it is missing and cannot be installed.
    """
    exe = os.environ.get("OVSERVE_AIPERF")
    if exe:
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"--aiperf: OVSERVE_AIPERF={exe} is not an executable")
        return exe
    try:
        p = subprocess.run(["bash", str(AIPERF_VENV_SCRIPT)], stdout=subprocess.PIPE, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"--aiperf: {AIPERF_VENV_SCRIPT} failed: {e}") from None
    if p.returncode != 0 or not p.stdout.strip():
        raise SystemExit(
            f"--aiperf: aiperf is not installed and {AIPERF_VENV_SCRIPT} could not install it (exit "
            f"{p.returncode}, see above); run without --aiperf, or point OVSERVE_AIPERF at an aiperf executable"
        )
    return p.stdout.strip().splitlines()[-1]


def run_aiperf(exe: str, url: str, model: str, n: int, requests: int, isl: int, max_tokens: int) -> dict:
    """One `aiperf profile` at concurrency n against a running server; its summary, or {"error": ...}.

    Artifacts go to a temp dir, removed on success and kept (named in the error) on failure.
    """
    d = tempfile.mkdtemp(prefix="ovserve-aiperf-")
    cmd = [exe, "profile", "--model", "bench", "--url", url, "--endpoint-type", "completions"]
    cmd += ["--custom-endpoint", "/v3/completions", "--streaming", "--use-server-token-count"]
    cmd += ["--concurrency", str(n), "--request-count", str(requests), "--warmup-request-count", str(n)]
    cmd += ["--isl", str(isl), "--isl-stddev", "0", "--osl", str(max_tokens), "--osl-stddev", "0"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0"]
    cmd += ["--tokenizer", model, "--random-seed", "0", "--artifact-dir", d, "--ui-type", "none"]
    cmd += ["--no-server-metrics", "--no-gpu-telemetry"]
    # its dataset mmap files would otherwise stay behind in /tmp
    env = {**os.environ, "TMPDIR": d}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"aiperf timed out after 1800 s (artifacts in {d})"}
    export = Path(d) / "profile_export_aiperf.json"
    if p.returncode != 0 or not export.is_file():
        log = Path(d) / "logs" / "aiperf.log"
        errs = [x for x in log.read_text().splitlines() if " ERROR " in x] if log.is_file() else []
        why = errs[0].split(" ERROR - ", 1)[-1][:300] if errs else (p.stdout + p.stderr).strip()[-300:]
        return {"error": f"aiperf exited {p.returncode}: {why} (artifacts in {d})"}
    res = {"export": AiperfExport.model_validate_json(export.read_text()), "requests": requests}
    shutil.rmtree(d, ignore_errors=True)
    return res


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runtime(BaseModel):
    """Which ovserve-runtime a server runs (`--runtime LABEL=SOURCE`): `source` is a directory holding the
    package ovserve_runtime/ (run with this Python, the directory first on PYTHONPATH), an executable (run
    as is, e.g. the device bundle's ./ovserve-runtime), or "" for the ovserve_runtime this Python imports."""

    label: str = "http"
    source: str = ""

    @classmethod
    def parse(cls, spec: str) -> Runtime:
        label, sep, source = spec.partition("=")
        if not sep or not label or not source:
            raise SystemExit(f"--runtime {spec!r}: expected LABEL=SOURCE (a source directory or an executable)")
        path = Path(source)
        if not (path / "ovserve_runtime").is_dir() and not (path.is_file() and os.access(path, os.X_OK)):
            raise SystemExit(f"--runtime {spec!r}: {source} holds no ovserve_runtime/ and is no executable")
        return cls(label=label, source=source)

    def argv_env(self) -> tuple[list[str], dict[str, str] | None]:
        if not self.source:
            return [sys.executable, "-m", "ovserve_runtime"], None
        path = Path(self.source).resolve()
        if path.is_dir():
            pp = os.pathsep.join(x for x in (str(path), os.environ.get("PYTHONPATH", "")) if x)
            return [sys.executable, "-m", "ovserve_runtime"], {**os.environ, "PYTHONPATH": pp}
        return [str(path)], None


def wait_ready(proc: subprocess.Popen, url: str, timeout: float) -> None:
    """Wait until the runtime at url answers ready; exit with its stderr (when piped) if it dies, kill it on the
    timeout. soak_bench and embeddings_bench use it too."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = proc.stderr.read()[-2000:] if proc.stderr else "(see its log)"
            raise SystemExit(f"server exited {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("server not ready")


class Server:
    def __init__(
        self, model: str, ptype: str, threads: int, extra: list[str] | None = None, runtime: Runtime | None = None
    ) -> None:
        port = _free_port()
        argv, env = (runtime or Runtime()).argv_env()
        cmd = [*argv, "--model-path", model, "--pipeline-type", ptype]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--inference-threads", str(threads)]
        cmd += ["--cache-size-gb", str(SCHED["cache_size"]), "--max-num-seqs", str(SCHED["max_num_seqs"])]
        cmd += ["--max-num-batched-tokens", str(SCHED["max_num_batched_tokens"]), "--dynamic-split-fuse"]
        cmd += ["--served-name", "bench", "--termination-log", os.devnull, "--log-level", "WARNING"]
        cmd += extra or []
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        self.url = f"http://127.0.0.1:{port}"
        wait_ready(self.proc, self.url, 600)

    def pids(self) -> tuple[int, list[int]]:
        """(the server, its children: the engine-core process and multiprocessing's resource tracker)."""
        kids = []
        for d in Path("/proc").iterdir():  # children of any of its threads
            try:
                if d.name.isdigit() and int(proc_stat(d.name)[1]) == self.proc.pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
        return self.proc.pid, kids

    def rss_mb(self) -> tuple[float, float]:
        """VmRSS and VmHWM of the server and its children (an engine process, if any), in MB."""
        pid, kids = self.pids()
        rss = hwm = 0.0
        for p in [pid, *kids]:
            try:
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) / 1024
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1]) / 1024
            except OSError:
                pass
        return rss, hwm

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Endpoint(NamedTuple):
    """What the lean client sends to one endpoint and how it reads the stream without parsing every chunk:
    a read holding more `text` keys than `empty` ones brought text; the tokens come from the usage."""

    path: str
    text: bytes  # the key of a chunk with text
    empty: bytes | None  # the same key with no text (the chat role chunk), which does not count


ENDPOINTS = {
    # the usage chunk and [DONE] end the stream: the last USAGE_TAIL bytes hold them
    "completions": Endpoint("/v3/completions", b'"text": "', b'"text": ""'),
    "chat": Endpoint("/v3/chat/completions", b'"content": "', b'"content": ""'),
    # text deltas have their own event, never empty; the last event (the whole response object, its text
    # included, so possibly longer than USAGE_TAIL) is kept from its start (RESPONSES_END) on
    "responses": Endpoint("/v3/responses", b"event: response.output_text.delta\n", None),
}
USAGE_KEY, USAGE_TAIL = b'"usage": {', 1024
RESPONSES_END = (b"event: response.completed\n", b"event: response.incomplete\n")


def request_body(endpoint: str, prompt: str, max_new: int) -> dict:
    """The streaming request of one benchmark request: greedy, exactly max_new tokens (ignore_eos, a vendor
    field of all three), the usage at the end."""
    if endpoint == "responses":  # streamed usage is always in the final event; no stream_options needed
        return {
            "model": "bench",
            "input": prompt,
            "max_output_tokens": max_new,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
        }
    body: dict = {
        "model": "bench",
        "max_tokens": max_new,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


POLICY_REFUSED: list[int] = []  # the policies the kernel refused (the JSON output says so)


@contextlib.contextmanager
def sched_policy(policy: int | None):
    """This thread's scheduling policy for a while (None: unchanged); SCHED_BATCH <-> SCHED_OTHER needs no
    privilege."""
    if policy is None:
        yield
        return
    before = os.sched_getscheduler(0)
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as e:  # a sandbox may allow SCHED_OTHER only: the run goes on at normal priority
        if not POLICY_REFUSED:
            print(f"WARNING client policy {policy} refused ({e}): the client runs SCHED_OTHER", file=sys.stderr)
        POLICY_REFUSED.append(policy)
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, before, os.sched_param(0))


def client_policy(a) -> int | None:
    return os.SCHED_BATCH if a.client_policy == "batch" and hasattr(os, "SCHED_BATCH") else None


def usage_tokens(endpoint: str, end: bytes) -> int:
    """The completion tokens of the stream's usage, from its last bytes (responses: its last event); 0 when
    absent (the token check warns)."""
    if endpoint == "responses":
        line = next((x for x in end.split(b"\n") if x.startswith(b"data: ")), None)
        return json.loads(line[len(b"data: ") :])["response"]["usage"]["output_tokens"] if line else 0
    line = next((x for x in end.split(b"\n") if USAGE_KEY in x), None)
    return json.loads(line[len(b"data: ") :])["usage"]["completion_tokens"] if line else 0


class HttpClient:
    def __init__(self, url: str, kind: str, policy: int | None = None, endpoint: str = "completions") -> None:
        self.url, self.kind, self.policy, self.endpoint = url, kind, policy, endpoint

    async def __aenter__(self):
        if self.kind == "openai":
            import openai

            self.c = openai.AsyncOpenAI(base_url=self.url + "/v3", api_key="x", max_retries=0, timeout=600)
        else:
            import aiohttp

            self.c = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
            )
        return self

    async def __aexit__(self, *exc) -> None:
        await self.c.close()

    async def one(self, prompt: str, max_new: int) -> tuple[float | None, float, int]:
        """(first chunk time, last chunk time, completion tokens)."""
        first, last, n = None, 0.0, 0
        body = request_body(self.endpoint, prompt, max_new)
        if self.kind == "openai":
            return await self.one_openai(body)
        ep = ENDPOINTS[self.endpoint]
        async with self.c.post(self.url + ep.path, json=body) as r:
            r.raise_for_status()
            # per network read, not per SSE line: a read that completes a chunk with text is when its tokens
            # arrived (the client's CPU is taken from the server's cores here, so it parses as little as it can)
            carry, end = b"", None
            async for data in r.content.iter_any():
                buf = carry + data
                k = buf.count(ep.text)
                if k and (ep.empty is None or k > buf.count(ep.empty)):
                    last = time.perf_counter()
                    first = first or last
                carry = buf[-USAGE_TAIL:]
                if self.endpoint == "responses":
                    if end is not None:
                        end += data
                    elif (i := max(buf.find(x) for x in RESPONSES_END)) >= 0:
                        end = buf[i:]
            n = usage_tokens(self.endpoint, carry if end is None else end)
        return first, last, n

    async def one_openai(self, body: dict) -> tuple[float | None, float, int]:
        first, last, n = None, 0.0, 0
        extra = {"extra_body": {"ignore_eos": body.pop("ignore_eos")}}
        if self.endpoint == "responses":
            async for ev in await self.c.responses.create(**body, **extra):
                if ev.type == "response.output_text.delta":
                    last = time.perf_counter()
                    first = first or last
                elif ev.type in ("response.completed", "response.incomplete") and ev.response.usage:
                    n = ev.response.usage.output_tokens
            return first, last, n
        create = self.c.chat.completions.create if self.endpoint == "chat" else self.c.completions.create
        async for ch in await create(**body, **extra):
            if ch.choices and (ch.choices[0].delta.content if self.endpoint == "chat" else ch.choices[0].text):
                last = time.perf_counter()
                first = first or last
            if ch.usage:
                n = ch.usage.completion_tokens
        return first, last, n

    async def run(self, n: int, max_new: int, server: Server | None = None) -> Run:
        """One burst; with `server`, the CPU it took: the HTTP process, its children (the engine), this client."""
        pid, kids = server.pids() if server is not None else (None, [])
        c0 = (self_cpu(), proc_cpu(pid) if pid else 0.0, sum(proc_cpu(k) for k in kids))
        with sched_policy(self.policy):
            t0 = time.perf_counter()
            res = await asyncio.gather(*(self.one(p, max_new) for p in prompts(n)))
            wall = time.perf_counter() - t0
        # tokens per chunk may exceed one (a step's tokens): TPOT uses the usage count
        run = _run(wall, t0, [r[0] for r in res], [r[1] for r in res], [r[2] for r in res])
        if pid:
            run.cpu = {
                "http": proc_cpu(pid) - c0[1],
                "engine": sum(proc_cpu(k) for k in kids) - c0[2],
                "client": self_cpu() - c0[0],
            }
        return run


def summarize(runs: list[Run]) -> dict:
    return {
        "tok_s": st.median(r.tok_s for r in runs),
        "ttft_mean_ms": st.median(st.mean(r.ttfts) for r in runs) * 1000,
        "ttft_p50_ms": pct([x for r in runs for x in r.ttfts], 50) * 1000,
        "ttft_p99_ms": pct([x for r in runs for x in r.ttfts], 99) * 1000,
        "tpot_p50_ms": pct([x for r in runs for x in r.tpots], 50) * 1000,
        "tpot_p99_ms": pct([x for r in runs for x in r.tpots], 99) * 1000,
        "tokens": [r.tokens for r in runs],
        # CPU microseconds per generated token, by process role, over all the runs together (/proc counts in
        # clock ticks of 10 ms: one short run alone would be mostly rounding)
        "cpu_us_per_token": {
            k: sum(r.cpu[k] for r in runs) / sum(r.tokens for r in runs) * 1e6 for k in (runs[0].cpu if runs else {})
        },
    }


def spread(xs: list[float]) -> dict:
    return {"median": st.median(xs), "min": min(xs), "max": max(xs), "all": xs}


def endpoints(a) -> list[str]:
    eps = [x for x in a.endpoint.split(",") if x]
    bad = [x for x in eps if x not in ENDPOINTS]
    if bad or not eps:
        raise SystemExit(f"--endpoint {a.endpoint!r}: expected one or more of {', '.join(ENDPOINTS)}")
    return eps


def pair_summary(ps: list[tuple[Run, Run]]) -> dict:
    """Medians of paired (raw, HTTP) runs at one stream count; the spread of the ratio is the noise."""
    ratios = [h.tok_s / r.tok_s for r, h in ps]
    ttft_ratios = [st.mean(h.ttfts) / st.mean(r.ttfts) for r, h in ps]
    return {
        "raw": summarize([r for r, _ in ps]),
        "http": summarize([h for _, h in ps]),
        "ratio_median": st.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ttft_ratio_median": st.median(ttft_ratios),
    }


def bench_runtimes(model: str, a) -> dict:
    """`--runtime` given: each runtime's LM_CB server runs beside the others (idle while another is
    measured), and each raw run is paired with one HTTP run of every runtime, their order rotated per rep,
    so that runtimes (e.g. a revision before a redesign and after it) are compared on the same machine at
    the same time. Each runtime's entry has the shape of the default mode's `cb`; `cb` is the first one's.
    Several `--endpoint`s: every runtime is measured on each (entries "LABEL/ENDPOINT"), on the same server;
    `versus` holds each entry's paired HTTP tok/s ratio to the first entry (same rep, same raw run)."""
    ns = [int(x) for x in a.streams.split(",") if x]
    eps = endpoints(a)
    out: dict = {"model": model, "cb": {}, "legacy": {}, "runtimes": {}, "versus": {}}
    print(
        f"== {model}: loading raw CB and the LM_CB servers of {', '.join(r.label for r in a.runtime)}", file=sys.stderr
    )
    raw = RawCB(model, a.threads)
    servers: dict[str, Server] = {}
    try:
        sides: dict[str, tuple[str, str]] = {}  # entry -> (runtime label, endpoint)
        for rt in a.runtime:
            keys = [rt.label if len(eps) == 1 else f"{rt.label}/{ep}" for ep in eps]
            for k, ep in zip(keys, eps, strict=True):
                out["runtimes"][k] = {"source": rt.source, "endpoint": ep, "cb": {}}
                sides[k] = (rt.label, ep)
            try:
                servers[rt.label] = Server(model, "LM_CB", a.threads, a.server_args.split(), rt)
            except SystemExit as e:  # one runtime that cannot start leaves the others measured
                for k in keys:
                    out["runtimes"][k]["error"] = str(e)[-2000:]
                print(f"  runtime {rt.label}: {str(e)[-2000:]}", file=sys.stderr)

        async def paired() -> None:
            async with contextlib.AsyncExitStack() as stack:
                clients = {
                    k: await stack.enter_async_context(HttpClient(servers[label].url, a.client, client_policy(a), ep))
                    for k, (label, ep) in sides.items()
                    if label in servers
                }
                for c in clients.values():
                    await c.run(1, 4)  # warmup
                pairs = {k: {n: [] for n in ns} for k in clients}
                labels = list(clients)
                for rep in range(a.reps):
                    order = labels[rep % len(labels) :] + labels[: rep % len(labels)] if labels else []
                    for n in ns:
                        r = raw.run(n, a.max_tokens)
                        said = []
                        for k in order:
                            h = await clients[k].run(n, a.max_tokens, servers[sides[k][0]])
                            pairs[k][n].append((r, h))
                            said.append(f"{k} {h.tok_s:.0f} ({h.tok_s / r.tok_s:.2f})")
                        print(f"  rep {rep} N={n}: raw {r.tok_s:.0f} tok/s, " + ", ".join(said), file=sys.stderr)
                for k, by_n in pairs.items():
                    out["runtimes"][k]["cb"] = {n: pair_summary(ps) for n, ps in by_n.items()}
                if labels:
                    base = pairs[labels[0]]
                    out["versus"] = {"base": labels[0], "entries": {}}
                    for k in labels[1:]:
                        out["versus"]["entries"][k] = {
                            n: spread([h.tok_s / b.tok_s for (_, h), (_, b) in zip(ps, base[n], strict=True)])
                            for n, ps in pairs[k].items()
                        }

        asyncio.run(paired())
        for k, (label, _) in sides.items():
            if label in servers:
                out["runtimes"][k]["rss_mb"], out["runtimes"][k]["hwm_mb"] = servers[label].rss_mb()
    finally:
        for s in servers.values():
            s.stop()
    first = next(iter(out["runtimes"].values()))
    out["cb"], out["rss_mb"], out["hwm_mb"] = first["cb"], first.get("rss_mb", 0.0), first.get("hwm_mb", 0.0)
    return out


def bench_model(model: str, a) -> dict:
    ns = [int(x) for x in a.streams.split(",") if x]
    lns = [int(x) for x in a.legacy_streams.split(",") if x]
    out: dict = {"model": model, "cb": {}, "legacy": {}}
    print(f"== {model}: loading raw CB and the LM_CB server", file=sys.stderr)
    raw = RawCB(model, a.threads)
    srv = Server(model, "LM_CB", a.threads, a.server_args.split())
    try:

        async def paired() -> None:
            async with HttpClient(srv.url, a.client, client_policy(a), a.endpoint) as c:
                await c.run(1, 4)  # warmup
                pairs: dict[int, list[tuple[Run, Run]]] = {n: [] for n in ns}
                for rep in range(a.reps):
                    for n in ns:
                        r = raw.run(n, a.max_tokens)
                        h = await c.run(n, a.max_tokens, srv)
                        pairs[n].append((r, h))
                        print(
                            f"  rep {rep} N={n}: raw {r.tok_s:.0f} tok/s, http {h.tok_s:.0f} tok/s "
                            f"({h.tok_s / r.tok_s:.2f})",
                            file=sys.stderr,
                        )
                for n, ps in pairs.items():
                    out["cb"][n] = pair_summary(ps)

        asyncio.run(paired())
        out["rss_mb"], out["hwm_mb"] = srv.rss_mb()
        if a.aiperf_exe:
            isl = int(raw.tok.encode(prompts(1)[0], add_special_tokens=False).input_ids.shape[1])
            out["aiperf"] = {"isl": isl, "runs": {}}
            for n in ns:
                k = a.aiperf_requests * n
                print(f"== {model}: aiperf at concurrency {n}, {k} requests", file=sys.stderr)
                out["aiperf"]["runs"][n] = run_aiperf(a.aiperf_exe, srv.url, model, n, k, isl, a.max_tokens)
    finally:
        srv.stop()
    raw = None  # free the raw pipeline before the legacy runs
    if lns:
        print(f"== {model}: legacy (LM) server and raw LLMPipeline", file=sys.stderr)
        srv = Server(model, "LM", a.threads)
        try:

            async def leg() -> dict:
                async with HttpClient(srv.url, a.client, client_policy(a), a.endpoint) as c:
                    await c.run(1, 4)
                    return {n: summarize([await c.run(n, a.max_tokens)]) for n in lns}

            http_leg = asyncio.run(leg())
        finally:
            srv.stop()
        for n in lns:
            out["legacy"][n] = {"raw": summarize([raw_legacy(model, n, a.max_tokens, a.threads)]), "http": http_leg[n]}
    return out


def print_tables(res: dict, max_tokens: int) -> None:
    if res.get("runtimes"):
        for label, sub in res["runtimes"].items():
            if "error" in sub:
                print(f"\n### {Path(res['model']).name}, runtime {label}: did not start: {sub['error'][-300:]}")
            elif sub["cb"]:
                _print_cb_tables({"model": res["model"], **sub, "legacy": {}}, max_tokens, f" ({label})")
        vs = res.get("versus") or {}
        if vs.get("entries"):
            name = Path(res["model"]).name
            print(f"\n### {name}: HTTP tok/s of each vs {vs['base']} (paired: same rep, same raw run)\n")
            print("| entry | streams | ratio median (min-max) | per rep |")
            print("|---|---|---|---|")
            for k, by_n in vs["entries"].items():
                for n, d in by_n.items():
                    reps = " ".join(f"{x:.3f}" for x in d["all"])
                    print(f"| {k} / {vs['base']} | {n} | {d['median']:.3f} ({d['min']:.3f}-{d['max']:.3f}) | {reps} |")
        return
    _print_cb_tables(res, max_tokens)


def _print_cb_tables(res: dict, max_tokens: int, label: str = "") -> None:
    name = Path(res["model"]).name
    print(f"\n### {name}: raw ContinuousBatchingPipeline vs ovserve HTTP{label} (medians of paired runs)")
    print(f"runtime RSS {res['rss_mb']:.0f} MB (peak {res['hwm_mb']:.0f} MB)\n")
    print(
        "| streams | raw tok/s | HTTP tok/s | HTTP/raw (min-max) | mean TTFT raw -> HTTP ms (ratio) "
        "| TTFT p50/p99 raw | TTFT p50/p99 HTTP | TPOT p50/p99 raw | TPOT p50/p99 HTTP |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, d in res["cb"].items():
        r, h = d["raw"], d["http"]
        print(
            f"| {n} | {r['tok_s']:.0f} | {h['tok_s']:.0f} | {d['ratio_median']:.2f} "
            f"({d['ratio_min']:.2f}-{d['ratio_max']:.2f}) | {r['ttft_mean_ms']:.1f} -> {h['ttft_mean_ms']:.1f} "
            f"({d['ttft_ratio_median']:.2f}x) | {r['ttft_p50_ms']:.1f}/{r['ttft_p99_ms']:.1f} "
            f"| {h['ttft_p50_ms']:.1f}/{h['ttft_p99_ms']:.1f} | {r['tpot_p50_ms']:.2f}/{r['tpot_p99_ms']:.2f} "
            f"| {h['tpot_p50_ms']:.2f}/{h['tpot_p99_ms']:.2f} |"
        )
        for side in ("raw", "http"):
            bad = [t for t in d[side]["tokens"] if t != int(n) * max_tokens]
            if bad:
                print(f"WARNING {side} N={n}: {bad} tokens, expected {int(n) * max_tokens}", file=sys.stderr)
    print(
        f"\n{name}: CPU per generated token, us (all reps together): raw = the benchmark's add_request/step loop; "
        "HTTP = the runtime's HTTP process + its engine-core process + the benchmark client, all on this "
        "machine's cores\n"
    )
    print("| streams | raw | HTTP process | engine process | client | engine/raw | all HTTP/raw |")
    print("|---|---|---|---|---|---|---|")
    for n, d in res["cb"].items():
        rc, hc = d["raw"]["cpu_us_per_token"], d["http"]["cpu_us_per_token"]
        if not rc or not hc:
            continue
        raw, total = rc["raw"], sum(hc.values())
        print(
            f"| {n} | {raw:.1f} | {hc['http']:.1f} | {hc['engine']:.1f} | {hc['client']:.1f} "
            f"| {hc['engine'] / raw:.2f} | {total / raw:.2f} |"
        )
    if res["legacy"]:
        print(f"\n### {name}: CB vs legacy (single runs)\n")
        print(
            "| streams | raw CB tok/s | raw legacy tok/s | CB/legacy raw | HTTP CB tok/s | HTTP legacy tok/s "
            "| CB/legacy HTTP |"
        )
        print("|---|---|---|---|---|---|---|")
        for n, d in res["legacy"].items():
            cb = res["cb"].get(n)
            rc = cb["raw"]["tok_s"] if cb else float("nan")
            hc = cb["http"]["tok_s"] if cb else float("nan")
            rl, hl = d["raw"]["tok_s"], d["http"]["tok_s"]
            print(f"| {n} | {rc:.0f} | {rl:.0f} | {rc / rl:.1f}x | {hc:.0f} | {hl:.0f} | {hc / hl:.1f}x |")
    if res.get("aiperf"):
        print_aiperf(name, res, max_tokens)


def _pq(m: AiperfMetric | None, fmt: str) -> str:
    if m is None or m.p50 is None or m.p99 is None:
        return "n/a"
    return f"{m.p50:{fmt}}/{m.p99:{fmt}}"


def print_aiperf(name: str, res: dict, max_tokens: int) -> None:
    ap = res["aiperf"]
    versions = {d["export"].aiperf_version for d in ap["runs"].values() if "export" in d}
    print(
        f"\n### {name}: second opinion, aiperf {', '.join(sorted(versions)) or '?'} against the same LM_CB server "
        f"(streaming /v3/completions, {ap['isl']}-token synthetic prompts, {max_tokens} tokens, ignore_eos; "
        "concurrency N kept in flight vs ours: N at once)\n"
    )
    print(
        "| streams | our HTTP tok/s | aiperf tok/s | aiperf/ours | our req/s | aiperf req/s "
        "| TTFT p50/p99 ms ours | TTFT p50/p99 ms aiperf | TPOT p50/p99 ms ours | ITL p50/p99 ms aiperf "
        "| aiperf requests (errors) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    failed: list[str] = []
    for n, d in ap["runs"].items():
        h = res["cb"][n]["http"]
        if "error" in d:
            print(f"| {n} | {h['tok_s']:.0f} | failed | | {h['tok_s'] / max_tokens:.1f} | | | | | | |")
            failed.append(f"aiperf at {n} streams: {d['error']}")
            continue
        e: AiperfExport = d["export"]
        tok = e.output_token_throughput.avg if e.output_token_throughput else float("nan")
        rps = e.request_throughput.avg if e.request_throughput else float("nan")
        done = int(e.request_count.avg) if e.request_count else 0
        print(
            f"| {n} | {h['tok_s']:.0f} | {tok:.0f} | {tok / h['tok_s']:.2f} | {h['tok_s'] / max_tokens:.1f} "
            f"| {rps:.1f} | {h['ttft_p50_ms']:.1f}/{h['ttft_p99_ms']:.1f} | {_pq(e.time_to_first_token, '.1f')} "
            f"| {h['tpot_p50_ms']:.2f}/{h['tpot_p99_ms']:.2f} | {_pq(e.inter_token_latency, '.2f')} "
            f"| {done}/{d['requests']} ({e.errors}) |"
        )
    for f in failed:
        print(f)


def main() -> None:
    models = Path(os.environ.get("OVSERVE_MODELS", "/var/cache/ovserve/models"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["generation", "embeddings", "speculative"], default="generation")
    ap.add_argument(
        "--speculative",
        action="store_true",
        help="= --mode speculative: no speculation vs --draft vs prompt lookup over HTTP (speculative_bench.py)",
    )
    ap.add_argument(
        "--draft",
        default=None,
        help="speculative: the draft model or several, comma-separated (default tiny-llm-draft)",
    )
    ap.add_argument("--num-assistant-tokens", type=int, default=3, help="speculative: tokens proposed per step")
    ap.add_argument("--max-ngram-size", type=int, default=3, help="speculative: prompt lookup's n-gram size")
    ap.add_argument(
        "--models",
        default=None,
        help="default: tiny-llm,tiny-bench,bench-qwen (embeddings: tiny-embed-bench,tiny-embed)",
    )
    ap.add_argument("--docs", type=int, default=1024, help="embeddings: documents per run")
    ap.add_argument("--docs-per-request", type=int, default=1, help="embeddings: documents in one request")
    ap.add_argument("--embeddings-max-batch", type=int, default=64, help="embeddings: the server's batch")
    ap.add_argument("--streams", default="1,16,64")
    ap.add_argument("--legacy-streams", default="16,64", help="'' skips the legacy comparison")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="paired raw/HTTP repetitions per stream count")
    ap.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS for every pipeline")
    ap.add_argument("--client", choices=["lean", "openai"], default="lean")
    ap.add_argument(
        "--endpoint",
        default="completions",
        help="the HTTP runs' endpoint: completions, chat or responses (streaming, ignore_eos); several, "
        "comma-separated, are measured side by side on the same server (as --runtime entries; no legacy, no aiperf)",
    )
    ap.add_argument(
        "--client-policy",
        choices=["batch", "other"],
        default="batch",
        help="the client's scheduling policy during HTTP runs (batch: it does not preempt the server)",
    )
    ap.add_argument("--server-args", default="", help="extra ovserve-runtime flags, e.g. --no-engine-process")
    ap.add_argument("--json", action="store_true", help="also print one RESULT json line per model")
    ap.add_argument("--json-out", default="", help="also write every model's results and the settings to this file")
    ap.add_argument(
        "--runtime",
        action="append",
        type=Runtime.parse,
        default=[],
        metavar="LABEL=SOURCE",
        help="compare runtimes (repeat it): SOURCE is a directory holding ovserve_runtime/ (e.g. one revision's "
        "runtime/) or an executable; every raw run is paired with one HTTP run of each (no legacy, no aiperf)",
    )
    ap.add_argument(
        "--aiperf",
        action="store_true",
        help="second opinion: also run NVIDIA AIPerf against the LM_CB server at each stream count "
        "(its cached venv is created on demand by hack/bench/aiperf-venv.sh; OVSERVE_AIPERF overrides)",
    )
    ap.add_argument("--aiperf-requests", type=int, default=4, help="aiperf sends this many x N requests")
    a = ap.parse_args()
    if a.speculative or a.mode == "speculative":
        import speculative_bench

        a.models = a.models or "tiny-bench"
        speculative_bench.run(a, models)
        return
    if a.mode == "embeddings":
        import embeddings_bench

        a.models = a.models or "tiny-embed-bench,tiny-embed"
        embeddings_bench.run(a, models)
        return
    a.models = a.models or "tiny-llm,tiny-bench,bench-qwen"
    if len(endpoints(a)) > 1 and not a.runtime:
        a.runtime = [Runtime()]  # this Python's ovserve_runtime, entries "http/ENDPOINT"
    if a.endpoint != "completions" and a.aiperf:
        print("--endpoint: aiperf measures /v3/completions only: skipped", file=sys.stderr)
        a.aiperf = False
    if a.runtime and (a.aiperf or a.legacy_streams):
        print("--runtime: the legacy and aiperf comparisons are skipped", file=sys.stderr)
        a.aiperf, a.legacy_streams = False, ""
    a.aiperf_exe = find_aiperf() if a.aiperf else None
    meta = {
        "argv": sys.argv[1:],
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average_start": os.getloadavg()[0],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    results: list[dict] = []
    print(
        f"max_tokens {a.max_tokens}, {a.reps} paired reps, threads {a.threads}, client {a.client} "
        f"({a.client_policy} policy), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus",
        file=sys.stderr,
    )
    for m in a.models.split(","):
        path = Path(m) if "/" in m else models / m
        if not (path / "openvino_model.xml").is_file():
            print(f"skipping {m}: no model at {path}", file=sys.stderr)
            continue
        res = bench_runtimes(str(path), a) if a.runtime else bench_model(str(path), a)
        print_tables(res, a.max_tokens)
        if a.json:
            print("RESULT " + json.dumps(res, default=lambda o: o.model_dump()))
        sys.stdout.flush()
        results.append(res)
        if a.json_out:  # after each model: a run cut short keeps what it measured
            meta["client_policy_refused"] = bool(POLICY_REFUSED)
            meta["load_average_end"] = os.getloadavg()[0]
            doc = {"meta": meta, "models": results}
            Path(a.json_out).write_text(json.dumps(doc, indent=1, default=lambda o: o.model_dump()))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
