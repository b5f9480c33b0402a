"""Soak benchmark: many concurrent streams with misbehaving clients, then what the runtime has left over.

Not a timed test: a bounded run (--duration seconds, at most --max-requests requests) that prints figures.
`--streams` workers (default 256) loop until the deadline, each request drawn at random (seeded):
  well-formed  a streaming chat completion read to `data: [DONE]`           (the rest)
  disconnect   a streaming chat completion abandoned after a few chunks     (--disconnect, default 10%)
  malformed    one of a list of invalid bodies (JSON, types, values, model)  (--malformed, default 10%)
Printed: well-formed completed / lost (lost = anything but a 200 stream ending in [DONE] without an error
event, or a 429: must be 0), 429s, malformed answered 4xx with an OpenAI error JSON vs anything else, the
runtime's /metrics gauges once the clients are gone (queue depth and running must return to 0), and the
RSS of the HTTP process and of the engine-core child before (after a warm-up) and after the run.

The runtime is started here on loopback on a tiny model (--model, a directory or a name under
/var/cache/ovserve/models), or reached at --url (a pod IP; loopback and pod addresses only) with --pid for
the RSS of its HTTP process when it runs on this machine. Exit code 1 when a figure that must be 0 is not.

Short-connection mode (--short-connections N): instead of the streams, N connections that each send one
GET (the kubelet's probes /v2/health/ready and /v2/health/live, the operator's readback /v1/status, in
turn), read the answer and close, --short-concurrency at a time (after a warm-up of N/10). Printed: the
RSS of the HTTP process sampled every N/20 connections and its least-squares slope in KB per connection,
with what that slope makes of 70,000 connections a day (a pod's probes and readback). Exit code 1 when the
slope is above --max-slope-kb (default 0.1): something is kept per connection after it ends.

usage: .venv/bin/python benchmarks/soak_bench.py [--duration 180] [--streams 256] [--model tiny-llm]
         [--url http://POD_IP:8000 [--pid PID]] [--max-tokens 64] [--seed 0]
       .venv/bin/python benchmarks/soak_bench.py --short-connections 20000 [--short-concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

from runtime_bench import wait_ready  # the script's directory is on sys.path

MODELS = Path(os.environ.get("OVSERVE_MODELS") or "/var/cache/ovserve/models")

# Invalid requests (each must be a 4xx with {"error": {...}}); chat unless the path says otherwise.
MALFORMED: list[tuple[str, bytes]] = [
    ("/v3/chat/completions", b"{not json"),
    ("/v3/chat/completions", b"[1, 2, 3]"),
    ("/v3/chat/completions", b""),
    ("/v3/chat/completions", json.dumps({"messages": []}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": "hello"}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"content": "no role"}]}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": 5}]}).encode()),
    ("/v3/chat/completions", json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 9}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "top_p": 0}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 3}).encode()),
    ("/v3/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "stop": [1]}).encode()),
    (
        "/v3/chat/completions",
        json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}).encode(),
    ),
    ("/v3/completions", json.dumps({"prompt": 42}).encode()),
    ("/v3/completions", json.dumps({"prompt": "x" * 20000}).encode()),  # beyond the context
    ("/v3/completions", json.dumps({"prompt": "x", "seed": -1}).encode()),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def engine_child(pid: int | None) -> int | None:
    """The engine-core child (multiprocessing spawn_main) of the runtime process `pid`."""
    if pid is None:
        return None
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in (d / "cmdline").read_bytes():
                return int(d.name)
        except (OSError, IndexError, ValueError):
            continue
    return None


def metrics(url: str) -> dict[str, float]:
    """Unlabelled samples and label-summed totals of the runtime's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = Counter()
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, value = line.rsplit(" ", 1)
        out[key.split("{", 1)[0]] += float(value)
        if key.startswith("ovserve_requests_total{"):
            out["status " + key.split('status="', 1)[1].split('"', 1)[0]] += float(value)
    return out


class Soak:
    def __init__(self, url: str, args: argparse.Namespace, served: str, pids: tuple[int | None, ...] = ()) -> None:
        self.url, self.args, self.served, self.pids = url, args, served, pids
        self.samples: list[tuple[float, list[int | None]]] = []  # RSS over the run: a leak grows, a cache plateaus
        self.counts: Counter[str] = Counter()
        self.lost: list[str] = []
        self.other: list[str] = []
        self.issued = 0

    def chat_body(self, text: str) -> bytes:
        return json.dumps(
            {
                "model": self.served,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": self.args.max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()

    async def well_formed(self, session, rng: random.Random, abandon: bool) -> None:
        import aiohttp

        kind = "disconnect" if abandon else "wellformed"
        keep = rng.randint(1, 3)  # chunks read before going away (under load a chunk carries several tokens)
        try:
            async with session.post(
                self.url + "/v3/chat/completions",
                data=self.chat_body(f"soak {rng.random()}"),
                headers={"Content-Type": "application/json"},
            ) as resp:
                if resp.status == 429:
                    self.counts[kind + " 429"] += 1
                    await resp.read()
                    return
                if resp.status != 200:
                    raise RuntimeError(f"status {resp.status}: {(await resp.read())[:200]!r}")
                chunks, done, error = 0, False, None
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        done = True
                        break
                    if b'"error"' in data and "error" in json.loads(data):
                        error = data[:200]
                    chunks += 1
                    if abandon and chunks >= keep:
                        resp.close()  # the client goes away mid-stream
                        self.counts["disconnect"] += 1
                        return
                if not done or error is not None:
                    raise RuntimeError(f"stream ended without [DONE] or with an error: done={done} error={error!r}")
                self.counts[kind + " completed"] += 1
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as exc:
            self.counts[kind + " lost"] += 1
            self.lost.append(f"{kind}: {exc!r}"[:300])

    async def malformed(self, session, rng: random.Random) -> None:
        import aiohttp

        path, body = rng.choice(MALFORMED)
        try:
            async with session.post(self.url + path, data=body, headers={"Content-Type": "application/json"}) as resp:
                raw = await resp.read()
                status = resp.status
            ok_json = False
            try:
                err = json.loads(raw)["error"]
                ok_json = isinstance(err, dict) and isinstance(err.get("message"), str)
            except (ValueError, KeyError, TypeError):
                pass
            if status == 429:
                self.counts["malformed 429"] += 1
            elif 400 <= status < 500 and ok_json:
                self.counts["malformed 4xx json"] += 1
            else:
                self.counts["malformed other"] += 1
                self.other.append(f"{path} {body[:60]!r}: {status} {raw[:200]!r}")
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.counts["malformed other"] += 1
            self.other.append(f"{path} {body[:60]!r}: {exc!r}")

    async def worker(self, session, wid: int, deadline: float) -> None:
        rng = random.Random(self.args.seed * 100003 + wid)
        while time.monotonic() < deadline and self.issued < self.args.max_requests:
            self.issued += 1
            r = rng.random()
            if r < self.args.malformed:
                await self.malformed(session, rng)
            else:
                await self.well_formed(session, rng, abandon=r < self.args.malformed + self.args.disconnect)

    async def run(self) -> float:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.args.request_timeout)
        conn = aiohttp.TCPConnector(limit=self.args.streams, force_close=False)
        t0 = time.monotonic()
        deadline = t0 + self.args.duration
        sampler = asyncio.ensure_future(self.sample(t0, deadline))
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            await asyncio.gather(*(self.worker(session, i, deadline) for i in range(self.args.streams)))
        sampler.cancel()
        return time.monotonic() - t0

    async def sample(self, t0: float, deadline: float) -> None:
        if not any(self.pids):
            return
        step = max(1.0, (deadline - t0) / 6)
        while True:
            await asyncio.sleep(step)
            self.samples.append((time.monotonic() - t0, [rss_kib(p) for p in self.pids]))


SHORT_PATHS = ("/v2/health/ready", "/v2/health/live", "/v1/status")  # probes and the operator's readback
CONNECTIONS_PER_DAY = 70_000  # a pod: kubelet probes every few seconds plus the operator's readback


async def one_short_connection(host: str, port: int, path: str) -> int:
    """One connection, one GET, the whole answer read, closed by the client; the status code."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        return int(head.split(b" ", 2)[1])
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def short_connections(url: str, count: int, concurrency: int, pid: int | None, samples: int = 20):
    """`count` short connections; (connections made, RSS KiB) sampled every count/samples, and the statuses."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    started = finished = 0
    statuses: Counter[int] = Counter()
    points: list[tuple[int, int]] = []
    every = max(1, count // samples)

    async def worker() -> None:
        nonlocal started, finished
        while started < count:
            i = started
            started += 1
            try:
                statuses[await one_short_connection(host, int(port), SHORT_PATHS[i % len(SHORT_PATHS)])] += 1
            except (OSError, asyncio.IncompleteReadError, ValueError):
                statuses[0] += 1
            finished += 1
            if finished % every == 0 and (k := rss_kib(pid)) is not None:
                points.append((finished, k))

    if (k := rss_kib(pid)) is not None:
        points.append((0, k))
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return points, statuses


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS (KiB) over connections: KiB per connection."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def short_mode(url: str, pid: int | None, args: argparse.Namespace) -> int:
    if pid is None:
        raise SystemExit("--short-connections measures the RSS of the HTTP process: start it here or pass --pid")
    asyncio.run(short_connections(url, max(1, args.short_connections // 10), args.short_concurrency, None))
    print(
        f"short connections: {url}, {args.short_connections} connections ({', '.join(SHORT_PATHS)} in turn), "
        f"{args.short_concurrency} at a time, after a warm-up of {max(1, args.short_connections // 10)}"
    )
    t0 = time.monotonic()
    points, statuses = asyncio.run(short_connections(url, args.short_connections, args.short_concurrency, pid))
    elapsed = time.monotonic() - t0
    kib = slope(points)
    print(f"connections: {args.short_connections} in {elapsed:.0f}s ({args.short_connections / elapsed:.0f}/s)")
    print(f"statuses: {dict(sorted(statuses.items()))} (0: the connection failed)")
    print("RSS HTTP process (connections: MiB): " + ", ".join(f"{x}: {y / 1024:.1f}" for x, y in points))
    print(
        f"RSS slope: {kib * 1024 / 1000:.3f} KB per connection, {points[0][1] / 1024:.1f} -> "
        f"{points[-1][1] / 1024:.1f} MiB; at {CONNECTIONS_PER_DAY} connections a day: "
        f"{kib * CONNECTIONS_PER_DAY / 1024:.1f} MiB a day"
    )
    failed = statuses[0] + sum(v for k, v in statuses.items() if k != 200 and k != 0)
    return 1 if failed or kib * 1024 / 1000 > args.max_slope_kb else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-llm", help="model directory or name under $OVSERVE_MODELS")
    ap.add_argument("--url", help="an already running runtime (loopback or pod IP) instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the runtime's PID on this machine (for RSS)")
    ap.add_argument("--served-name", help="with --url: the served model name (default: asked from /v3/models)")
    ap.add_argument("--duration", type=float, default=180, help="seconds of load (default 180)")
    ap.add_argument("--streams", type=int, default=256, help="concurrent clients (default 256)")
    ap.add_argument("--max-requests", type=int, default=500_000, help="bound on the number of requests")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--disconnect", type=float, default=0.10, help="fraction abandoning mid-stream")
    ap.add_argument("--malformed", type=float, default=0.10, help="fraction of invalid requests")
    ap.add_argument("--request-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runtime-arg", action="append", default=[], help="extra ovserve-runtime argument (repeat)")
    ap.add_argument("--short-connections", type=int, default=0, help="short-connection mode: this many connections")
    ap.add_argument("--short-concurrency", type=int, default=8, help="short connections open at once (default 8)")
    ap.add_argument("--max-slope-kb", type=float, default=0.1, help="short mode: exit 1 above this KB/connection")
    args = ap.parse_args()
    if args.url and not args.url.startswith("http://"):
        raise SystemExit("--url: http://HOST:PORT (loopback or a pod IP)")

    proc = None
    log = None
    if args.url:
        url = args.url.rstrip("/")
        pid = args.pid
    else:
        model = Path(args.model) if "/" in args.model else MODELS / args.model
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(f"/tmp/soak-runtime-{port}.log", "w")
        cmd = [sys.executable, "-m", "ovserve_runtime", "--model-path", str(model), "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--termination-log", f"/tmp/soak-termination-{port}.log", *args.runtime_arg]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OVSERVE_")}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        pid = proc.pid
    try:
        wait_ready(proc, url, 300)
        served = args.served_name
        if not served:
            with urllib.request.urlopen(url + "/v3/models", timeout=10) as r:
                served = json.loads(r.read())["data"][0]["id"]
        if args.short_connections:
            return short_mode(url, pid, args)
        child = engine_child(pid)
        soak = Soak(url, args, served, (pid, child))
        # warm-up at full concurrency, so that "before" is the serving footprint (the KV cache grown to the
        # working set), not the freshly loaded one: before/after then shows what the run leaked
        warm = argparse.Namespace(**{**vars(args), "duration": 10, "malformed": 0, "disconnect": 0})
        asyncio.run(Soak(url, warm, served).run())
        before = (rss_kib(pid), rss_kib(child))
        print(
            f"soak: {url} model {served}, {args.streams} streams for {args.duration:g}s, "
            f"{args.disconnect:.0%} disconnect, {args.malformed:.0%} malformed, max_tokens {args.max_tokens}"
        )
        elapsed = asyncio.run(soak.run())
        # the gauges after the clients are gone (a cancelled request is dropped at the engine's next step)
        gauges: dict[str, float] = {}
        for _ in range(50):
            gauges = metrics(url)
            if gauges.get("ovserve_queue_depth", 0) == 0 and gauges.get("ovserve_requests_running", 0) == 0:
                break
            time.sleep(0.2)
        after = (rss_kib(pid), rss_kib(child))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            print(f"runtime exit code after SIGTERM: {code} (log {log.name if log else ''})")
    c = soak.counts
    wf_done, wf_lost = c["wellformed completed"], c["wellformed lost"]
    print(f"requests issued: {soak.issued} in {elapsed:.0f}s ({soak.issued / elapsed:.1f}/s)")
    print(f"well-formed: completed {wf_done}, lost {wf_lost}, 429 {c['wellformed 429']}")
    print(
        f"disconnecting: abandoned mid-stream {c['disconnect']}, completed before abandoning "
        f"{c['disconnect completed']}, lost {c['disconnect lost']}, 429 {c['disconnect 429']}"
    )
    print(f"malformed: 4xx JSON {c['malformed 4xx json']}, other {c['malformed other']}, 429 {c['malformed 429']}")
    statuses = {k[7:]: int(v) for k, v in sorted(gauges.items()) if k.startswith("status ")}
    print(f"runtime ovserve_requests_total by status: {statuses}")
    print(
        f"gauges after: ovserve_queue_depth {gauges.get('ovserve_queue_depth', 0):g}, "
        f"ovserve_requests_running {gauges.get('ovserve_requests_running', 0):g}"
    )

    def mib(k: int | None) -> str:
        return "n/a" if k is None else f"{k / 1024:.0f} MiB"

    print(f"RSS HTTP process: before {mib(before[0])}, after {mib(after[0])}")
    print(f"RSS engine child: before {mib(before[1])}, after {mib(after[1])}")
    if soak.samples:
        print(
            "RSS during the run (HTTP / engine): "
            + ", ".join(f"{t:.0f}s {mib(a)} / {mib(b)}" for t, (a, b) in soak.samples)
        )
    for line in soak.lost[:10]:
        print("  lost:", line)
    for line in soak.other[:10]:
        print("  malformed answered otherwise:", line)
    bad = (
        wf_lost
        + c["disconnect lost"]
        + c["malformed other"]
        + gauges.get("ovserve_queue_depth", 0)
        + gauges.get("ovserve_requests_running", 0)
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
