"""The load gauges' values on a real runtime (the signals `spec.autoscaling` scales on, docs/autoscaling.md):
ovserve_kv_cache_usage_percent above 0 under load and back to 0 once idle (it once froze at its last value,
so a KVCacheUsage autoscaler never scaled down), ovserve_queue_depth and ovserve_requests_running counting
exactly the requests that wait and generate, ovserve_queue_limit the flag."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from .conftest import wait_until

pytestmark = pytest.mark.runtime

GAUGES = ("ovserve_queue_depth", "ovserve_requests_running", "ovserve_kv_cache_usage_percent")
TOKENS = 480  # tiny-llm's context is 512: a stream of a second or more, even batched


def scrape(srv) -> dict[str, float]:
    """The three load gauges from ONE scrape."""
    values = dict(line.rsplit(" ", 1) for line in srv.metrics().splitlines() if line.startswith("ovserve_"))
    return {name: float(values[name]) for name in GAUGES}


async def stream(client: aiohttp.ClientSession, url: str, i: int) -> int:
    """One streaming chat completion read to its end; the number of SSE events."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"story number {i}"}],
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    async with client.post(url + "/v3/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return sum([1 async for line in r.content if line.startswith(b"data: ")])


def load(srv, clients: int) -> list[dict[str, float]]:
    """`clients` concurrent streams; the gauges scraped while they run."""
    samples: list[dict[str, float]] = []

    async def main() -> None:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=100)) as c:
            tasks = [asyncio.ensure_future(stream(c, srv.url, i)) for i in range(clients)]
            while not all(t.done() for t in tasks):
                samples.append(await asyncio.to_thread(scrape, srv))
                await asyncio.sleep(0.01)
            assert all(t.result() > 1 for t in tasks)

    asyncio.run(main())
    return samples


@pytest.mark.parametrize("engine_args", [(), ("--no-engine-process",)], ids=["engine-process", "in-process"])
def test_cb_gauges_under_load_and_after_idle(tiny_models, server_factory, engine_args):
    capacity, clients = 2, 5
    srv = server_factory(
        tiny_models / "tiny-llm",
        "--served-name",
        "m",
        "--max-num-seqs",
        str(capacity),
        "--max-queued-requests",
        "7",
        *engine_args,
    )
    idle = scrape(srv)
    assert idle == dict.fromkeys(GAUGES, 0.0)  # loaded, smoke-tested, nothing served yet
    assert srv.metric("ovserve_queue_limit") == 7
    samples = load(srv, clients)
    # while all five are in: two generate, three wait, and the two hold KV blocks (from the first step on:
    # a scrape between admission and that step reads 0, and that is true)
    full = [s for s in samples if (s["ovserve_requests_running"], s["ovserve_queue_depth"]) == (2, 3)]
    assert full, samples[:40]
    busy = [s["ovserve_kv_cache_usage_percent"] for s in full if s["ovserve_kv_cache_usage_percent"] > 0]
    assert len(busy) >= len(full) / 2, full[:20]
    assert all(0 <= s["ovserve_kv_cache_usage_percent"] <= 100 for s in samples)
    assert max(s["ovserve_requests_running"] for s in samples) <= capacity
    assert max(s["ovserve_requests_running"] + s["ovserve_queue_depth"] for s in samples) <= clients
    # idle: every gauge back to 0, and it stays there (nothing is stepping any more to refresh it)
    assert wait_until(lambda: scrape(srv) == dict.fromkeys(GAUGES, 0.0), timeout=5), scrape(srv)
    time.sleep(1)
    assert scrape(srv) == dict.fromkeys(GAUGES, 0.0)


def test_legacy_gauges_under_load_and_after_idle(tiny_models, server_factory):
    """The legacy pipeline generates for one request at a time and has no KV-cache metric: 0 throughout."""
    srv = server_factory(tiny_models / "tiny-llm-nosdpa", "--served-name", "m")
    samples = load(srv, 3)
    assert any((s["ovserve_requests_running"], s["ovserve_queue_depth"]) == (1, 2) for s in samples), samples[:40]
    assert max(s["ovserve_requests_running"] for s in samples) <= 1
    assert all(s["ovserve_kv_cache_usage_percent"] == 0 for s in samples)
    assert wait_until(lambda: scrape(srv) == dict.fromkeys(GAUGES, 0.0), timeout=5), scrape(srv)
