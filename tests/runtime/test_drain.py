"""SIGTERM drain of a real runtime on the tiny model (runtime/ovserve_runtime/drain.py).

Many streams of 480 tokens (tiny-llm's context is 512) on one inference thread: about a second of
generation even batched, so that many are in flight when SIGTERM arrives.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest

from .conftest import http_get
from .test_engine_process import _alive, _engine_pid

pytestmark = pytest.mark.runtime

TOKENS = 480  # tiny-llm's context is 512


@dataclass
class Outcome:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    finish: str | None = None
    completion_tokens: int | None = None
    error: dict | None = None
    done: bool = False
    body: str = ""
    exc: str = ""
    first_chunk: threading.Event = field(default_factory=threading.Event)
    conn: http.client.HTTPConnection | None = None


def stream_chat(port: int, out: Outcome, tokens: int = TOKENS) -> None:
    """One streaming chat completion over its own connection, recorded in `out` (no retries)."""
    body = {
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    conn = out.conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out.conn = conn
    try:
        conn.request("POST", "/v3/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out.status = resp.status
        out.headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            out.body = resp.read().decode()
            return
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                out.done = True
                continue
            ev = json.loads(data)
            if "error" in ev:
                out.error = ev["error"]
            elif ev.get("usage"):
                out.completion_tokens = ev["usage"]["completion_tokens"]
            elif ev["choices"]:
                out.chunks += 1
                out.first_chunk.set()
                out.finish = ev["choices"][0]["finish_reason"] or out.finish
    except Exception as exc:  # a lost request: recorded, asserted on
        out.exc = repr(exc)
    finally:
        out.first_chunk.set()


def start_streams(
    port: int, n: int, tokens: int = TOKENS, spacing: float = 0.02
) -> tuple[list[Outcome], list[threading.Thread]]:
    outs = [Outcome() for _ in range(n)]
    threads = []
    for o in outs:
        t = threading.Thread(target=stream_chat, args=(port, o, tokens), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(spacing)  # arrival order = generation order
    return outs, threads


def peer_closed(conn: http.client.HTTPConnection, timeout: float) -> bool:
    """True when the server closed this (idle, keep-alive) connection within `timeout`."""
    sock = conn.sock
    if sock is None:
        return True
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable) and sock.recv(1, 0x2) == b""  # MSG_PEEK: EOF


def complete(o: Outcome) -> bool:
    return o.status == 200 and o.done and o.error is None and o.finish == "length" and o.completion_tokens == TOKENS


def test_sigterm_lets_in_flight_streams_finish_then_exits_0(tiny_models, server_factory):
    srv = server_factory(tiny_models / "tiny-llm", "--max-num-seqs", "64", "--drain-timeout-seconds", "120")
    engine = _engine_pid(srv)
    outs, threads = start_streams(srv.port, 48, spacing=0.002)
    assert outs[0].first_chunk.wait(30) and outs[0].status == 200, outs[0]
    time.sleep(0.2)  # the rest reached the server
    # a signal to the engine child alone (a process-group kill does this) does not stop generation
    os.kill(engine, signal.SIGTERM)
    srv.proc.send_signal(signal.SIGTERM)
    t_term = time.monotonic()

    # readiness goes 503 "draining" while the streams still run; liveness stays 200
    code, text = http_get(srv.url + "/v2/health/ready")
    assert (code, json.loads(text)) == (503, {"ready": False, "state": "draining"})
    assert http_get(srv.url + "/v2/health/live")[0] == 200
    assert not complete(outs[-1]), "the streams finished before the drain could be observed"

    # a request arriving during the drain (endpoint removal lags) is served, with Connection: close
    late = Outcome()
    stream_chat(srv.port, late)
    assert complete(late), late
    assert late.headers.get("connection") == "close", late.headers

    # the first stream was prepared before the drain (keep-alive, no `Connection: close`): its client may
    # send the next request on the same connection right away; it is served, and then the connection closes
    threads[0].join(60)
    assert complete(outs[0]), outs[0]
    assert outs[0].headers.get("connection") != "close"
    assert not peer_closed(outs[0].conn, 0.3), "closing a connection the client may be reusing loses a request"
    again = Outcome(conn=outs[0].conn)
    stream_chat(srv.port, again)
    assert complete(again) and again.headers.get("connection") == "close", again
    assert peer_closed(again.conn, 5.0)

    for t in threads:
        t.join(120)
    lost = [o for o in outs if not complete(o)]
    assert not lost, lost
    assert srv.proc.wait(60) == 0
    assert not _alive(engine), "the engine child outlived the runtime"
    log = srv.log.read_text()
    assert "drained in" in log, log[-3000:]
    assert time.monotonic() - t_term < 60


def collect_chat(port: int, out: Outcome) -> None:
    """One non-streaming chat completion (no retries)."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": TOKENS, "ignore_eos": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v3/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out.status, out.body = resp.status, resp.read().decode()
    except Exception as exc:
        out.exc = repr(exc)
    finally:
        conn.close()


def test_drain_bound_ends_requests_that_outlast_it(tiny_models, server_factory):
    # 48 x 480 tokens on one inference thread: about a second of generation even batched, beyond the bound
    srv = server_factory(tiny_models / "tiny-llm", "--max-num-seqs", "64", "--drain-timeout-seconds", "0.2")
    n = 48
    outs, threads = start_streams(srv.port, n, spacing=0.002)
    plain = [Outcome() for _ in range(4)]
    for o in plain:
        threads.append(threading.Thread(target=collect_chat, args=(srv.port, o), daemon=True))
        threads[-1].start()
    assert outs[0].first_chunk.wait(30) and outs[0].status == 200, outs[0]
    time.sleep(0.2)
    srv.proc.send_signal(signal.SIGTERM)
    t_term = time.monotonic()
    assert srv.proc.wait(30) == 0
    elapsed = time.monotonic() - t_term
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a client still waits after the process exited"

    summary = [(o.status, o.chunks, o.done, o.error, o.completion_tokens, o.exc) for o in outs + plain]
    done = [o for o in outs if complete(o)]
    ended = [o for o in outs if o.status == 200 and not complete(o)]
    assert len(done) + len(ended) == n, [s for s in summary if not (s[0] == 200 and s[2])]
    # a stream running at the deadline: an error event, then [DONE] (no silent cut)
    assert ended, summary
    for o in ended:
        assert o.done and o.error is not None and o.error["code"] == "server_shutting_down", summary
        assert "drain timeout of 0.2s" in o.error["message"]
    # a non-streaming request running at the deadline: an OpenAI-format 503
    for o in plain:
        assert o.status == 503, summary
        err = json.loads(o.body)["error"]
        assert err["code"] == "server_shutting_down" and err["type"] == "server_error", o.body
    assert len(done) < n // 2, summary
    assert elapsed < 20, f"exit took {elapsed:.1f}s after SIGTERM with a 0.2 s bound"
    assert "drain timeout" in srv.log.read_text()
