"""The LLM metrics of docs/observability.md move as requests go through a real runtime on tiny-llm: TTFT,
inter-token latency, queue wait and preparation histograms, token counters, requests by finish reason and by
error code, the start time; `usage` carries no cached-token count openvino-genai cannot give (never a fake 0).

The servers are the session's (other tests use them too): every assert is on a difference between two scrapes
around this test's own requests, which run one test at a time."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import aiohttp
import pytest

pytestmark = pytest.mark.runtime

TOKENS = 8


def scrape(srv) -> dict[str, float]:
    """Every sample of one scrape by its full key (name{labels})."""
    out: dict[str, float] = {}
    for line in srv.metrics().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def chat(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url + "/v3/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(n: int) -> dict:
    return {"model": "tiny-llm", "messages": [{"role": "user", "content": f"count to {n}"}], "max_tokens": TOKENS}


def test_generation_moves_the_llm_metrics(cb_server):
    before = scrape(cb_server)
    code, body = chat(cb_server.url, {**ask(1), "ignore_eos": True})
    assert code == 200, body
    assert body["usage"]["completion_tokens"] == TOKENS
    # openvino-genai 2026.4 reports no prefix-cache hits per request: the field is absent, never a made-up 0
    assert "prompt_tokens_details" not in body["usage"], body["usage"]
    streamed = []
    with urllib.request.urlopen(
        urllib.request.Request(
            cb_server.url + "/v3/chat/completions",
            json.dumps({**ask(2), "ignore_eos": True, "stream": True}).encode(),
            {"Content-Type": "application/json"},
        ),
        timeout=60,
    ) as r:
        streamed = [line for line in r if line.startswith(b"data: ")]
    assert streamed[-1].strip() == b"data: [DONE]"
    code, refused = chat(cb_server.url, {**ask(3), "temperature": 7})  # out of range: 400 invalid_value
    assert code == 400, refused
    after = scrape(cb_server)
    err = refused["error"]["code"]

    report = "\n".join(f"{k} {v}" for k, v in after.items() if k.startswith("ovserve_"))
    assert delta(after, before, 'ovserve_request_finish_total{endpoint="chat",reason="length"}') == 2, report
    assert delta(after, before, f'ovserve_request_errors_total{{code="{err}",endpoint="chat",status="400"}}') == 1, (
        report
    )
    assert delta(after, before, 'ovserve_requests_total{endpoint="chat",status="200"}') == 2, report
    assert delta(after, before, "ovserve_prompt_tokens_total") >= 2 * 3, report
    assert delta(after, before, "ovserve_generated_tokens_total") == 2 * TOKENS, report
    for hist in ("time_to_first_token", "request_queue", "request_prepare"):
        hist = f"ovserve_{hist}_seconds"
        assert delta(after, before, f"{hist}_count") == 2, (hist, report)
    # one gap per token after the first; a transport read may carry several steps, never more gaps than tokens
    gaps = delta(after, before, "ovserve_inter_token_latency_seconds_count")
    assert 2 <= gaps <= 2 * (TOKENS - 1), report
    assert delta(after, before, "ovserve_inter_token_latency_seconds_sum") > 0, report
    # queue wait is a part of the time to the first token
    assert delta(after, before, "ovserve_request_queue_seconds_sum") <= delta(
        after, before, "ovserve_time_to_first_token_seconds_sum"
    ), report
    assert after["ovserve_runtime_start_time_seconds"] > 1.7e9, report
    info = [k for k, v in after.items() if k.startswith("ovserve_pipeline_info{") and v == 1]
    assert len(info) == 1 and 'resolved="LM_CB"' in info[0] and 'fallback="false"' in info[0], info


def test_queue_wait_counts_the_legacy_pipelines_queue(legacy_server):
    """The legacy pipeline generates one request at a time: of two sent together, one waits for the other."""
    before = scrape(legacy_server)

    async def both() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as c:

            async def one(i: int) -> None:
                body = {**ask(i), "model": "nosdpa", "max_tokens": 48, "ignore_eos": True}
                async with c.post(legacy_server.url + "/v3/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()

            await asyncio.gather(one(1), one(2))

    asyncio.run(both())
    after = scrape(legacy_server)
    report = "\n".join(f"{k} {v}" for k, v in after.items() if "seconds" in k and "bucket" not in k)
    assert delta(after, before, "ovserve_request_queue_seconds_count") == 2, report
    waited = delta(after, before, "ovserve_request_queue_seconds_sum")
    took = delta(after, before, "ovserve_request_duration_seconds_sum")
    # the second waited for (most of) the first's generation
    assert waited >= 0.25 * took / 2, report
    info = [k for k, v in after.items() if k.startswith("ovserve_pipeline_info{") and v == 1]
    assert len(info) == 1 and 'fallback="true"' in info[0] and 'resolved="LM"' in info[0], info
