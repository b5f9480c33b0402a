"""Admission and the fatal path through a real runtime: 429 beyond the bound, truthful queue/running
gauges, and a broken pipeline that answers every request and exits 3 with its report."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import aiohttp
import pytest

from .test_engine_process import _engine_pid

pytestmark = pytest.mark.runtime


def _body(i: int, max_tokens: int) -> dict:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": f"number {i} hello"}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }


async def _stream(client: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict, list[str]]:
    """(status, headers, SSE data lines) of one streaming chat completion (the body when not 200)."""
    async with client.post(url + "/v3/chat/completions", json=body) as r:
        if r.status != 200:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, [await r.text()]
        lines = [line.decode().strip()[6:] async for line in r.content if line.startswith(b"data: ")]
        return r.status, {k.lower(): v for k, v in r.headers.items()}, lines


def _session(timeout: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout), connector=aiohttp.TCPConnector(limit=100)
    )


def _gauges(srv) -> tuple[float, float]:
    """(queue depth, running) from ONE scrape."""
    values = dict(line.rsplit(" ", 1) for line in srv.metrics().splitlines() if line.startswith("ovserve_"))
    return float(values["ovserve_queue_depth"]), float(values["ovserve_requests_running"])


@pytest.mark.parametrize(
    "model,args,capacity",
    [("tiny-llm", ("--max-num-seqs", "2"), 2), ("tiny-llm-nosdpa", (), 1)],
    ids=["cb", "legacy"],
)
def test_bounded_admission_answers_429_with_retry_after(tiny_models, server_factory, model, args, capacity):
    queued_max = 4
    srv = server_factory(tiny_models / model, "--served-name", "m", "--max-queued-requests", str(queued_max), *args)
    clients = 40
    samples: list[tuple[float, float]] = []

    async def main():
        async with _session(120) as c:
            tasks = [asyncio.ensure_future(_stream(c, srv.url, _body(i, 400))) for i in range(clients)]
            while not all(t.done() for t in tasks):
                samples.append(await asyncio.to_thread(_gauges, srv))
                await asyncio.sleep(0.01)
            return [t.result() for t in tasks]

    results = asyncio.run(main())
    ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 429]
    assert len(ok) + len(refused) == clients, [r[0] for r in results]
    assert capacity + queued_max <= len(ok) < clients and refused
    for _status, _headers, lines in ok:  # every admitted stream is whole
        assert lines[-1] == "[DONE]"
        assert json.loads(lines[-2])["choices"][0]["finish_reason"] == "length"
    for _status, headers, body in refused:
        assert int(headers["retry-after"]) >= 1
        assert headers["content-type"].startswith("application/json")
        err = json.loads(body[0])["error"]
        assert err["code"] == "queue_full" and "capacity" in err["message"]
    # the gauges: never more in flight than the bound, never more generating than the capacity, and the
    # full state was seen while the burst lasted (before the first step all admitted requests wait: the
    # queue may read up to the whole bound for a moment)
    assert max(q + r for q, r in samples) <= capacity + queued_max and max(r for _q, r in samples) <= capacity
    assert (queued_max, capacity) in samples, samples[:50]
    assert _gauges(srv) == (0, 0)
    assert srv.metric("ovserve_requests_total", 'status="429"') == len(refused)
    assert srv.metric("ovserve_queue_limit") == queued_max


def test_broken_engine_answers_active_and_queued_then_exits_3(tiny_models, server_factory):
    srv = server_factory(tiny_models / "tiny-llm", "--served-name", "m", "--max-num-seqs", "20")
    engine = _engine_pid(srv)
    health: list[int] = []

    async def main():
        async with _session(60) as c:
            tasks = [asyncio.ensure_future(_stream(c, srv.url, _body(i, 480))) for i in range(40)]
            deadline = time.monotonic() + 30
            while _gauges(srv) != (20, 20):  # 20 generating, 20 waiting in the engine
                assert time.monotonic() < deadline and not any(t.done() for t in tasks)
                await asyncio.sleep(0.005)
            os.kill(engine, signal.SIGKILL)
            killed = time.monotonic()
            while srv.proc.poll() is None and time.monotonic() - killed < 10:
                try:
                    async with c.get(srv.url + "/v2/health/live", timeout=aiohttp.ClientTimeout(total=1)) as r:
                        health.append(r.status)
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.02)
            results = await asyncio.gather(*tasks)
            return results, time.monotonic() - killed

    results, took = asyncio.run(main())
    assert took < 10
    for status, _headers, lines in results:  # each one ended with an error: none hung, none looks complete
        text = "\n".join(lines)
        assert "pipeline failed" in text, (status, text[-300:])
        assert (status == 200 and '"error"' in lines[-2]) or status >= 500
    assert 503 in health
    assert srv.proc.wait(timeout=10) == 3
    report = json.loads(srv.termination_log.read_text().strip().splitlines()[-1])
    assert report["state"] == "failed" and "engine process" in report["pipeline"]["message"]
