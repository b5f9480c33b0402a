"""The HTTP API of a real ovserve-runtime subprocess, through the real `openai` client."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import urllib.request

import numpy as np
import openai
import pytest

from .conftest import http_get, wait_until

pytestmark = pytest.mark.runtime


def client(server, prefix="/v3") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + prefix, api_key="unused", max_retries=0, timeout=60)


def post(server, path: str, body: bytes | str | dict) -> tuple[int, dict]:
    data = json.dumps(body).encode() if isinstance(body, dict) else (body.encode() if isinstance(body, str) else body)
    req = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# --- continuous batching server -------------------------------------------------------------------


def test_models(cb_server):
    for prefix in ("/v3", "/v1"):
        models = client(cb_server, prefix).models.list()
        assert [m.id for m in models.data] == ["tiny-llm"]
    code, body = http_get(cb_server.url + "/v3/models/other")
    assert code == 404 and json.loads(body)["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("prefix", ["/v3", "/v1"])
def test_chat_completion(cb_server, prefix):
    r = client(cb_server, prefix).chat.completions.create(
        model="tiny-llm",
        messages=[{"role": "user", "content": "hello world"}],
        max_tokens=8,
        extra_body={"ignore_eos": True},
    )
    assert r.object == "chat.completion"
    assert r.model == "tiny-llm"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 2
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8


def test_chat_stream(cb_server):
    chunks = list(
        client(cb_server).chat.completions.create(
            model="tiny-llm",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3 and isinstance(text, str)


def test_completion_and_stream_agree(cb_server):
    c = client(cb_server)
    full = c.completions.create(
        model="tiny-llm",
        prompt="the quick brown fox",
        max_tokens=10,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert full.object == "text_completion" and full.usage.completion_tokens == 10
    chunks = list(
        c.completions.create(
            model="tiny-llm",
            prompt="the quick brown fox",
            max_tokens=10,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    assert "".join(ch.choices[0].text for ch in chunks) == full.choices[0].text  # greedy: identical
    assert chunks[-1].choices[0].finish_reason == "length"


def test_sse_ends_with_done(cb_server):
    req = urllib.request.Request(
        cb_server.url + "/v1/completions",
        data=json.dumps({"prompt": "hello", "max_tokens": 3, "stream": True}).encode(),
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [line for line in r.read().decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "code"),
    [
        ("/v3/chat/completions", b"{not json", 400, None, "invalid_json"),
        ("/v3/chat/completions", b"[1, 2]", 400, None, "invalid_json"),
        (
            "/v3/chat/completions",
            {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]},
            404,
            "model",
            "model_not_found",
        ),
        (
            "/v3/completions",
            {"model": "tiny-llm", "prompt": "x", "max_tokens": -5},
            400,
            "max_tokens",
            "invalid_value",
        ),
        (
            "/v3/completions",
            {"model": "tiny-llm", "prompt": "x", "max_tokens": "ten"},
            400,
            "max_tokens",
            "invalid_type",
        ),
        (
            "/v3/completions",
            {"model": "tiny-llm", "prompt": "hello " * 400},
            400,
            "prompt",
            "context_length_exceeded",
        ),
        (
            "/v3/chat/completions",
            {"model": "tiny-llm", "messages": [{"role": "user", "content": "hello " * 400}]},
            400,
            "messages",
            "context_length_exceeded",
        ),
        (
            "/v3/completions",
            {"model": "tiny-llm", "prompt": "hi", "max_tokens": 100000},
            400,
            "max_tokens",
            "context_length_exceeded",
        ),
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": []}, 400, "messages", "invalid_value"),
        ("/v3/completions", {"model": "tiny-llm"}, 400, "prompt", "missing_required_parameter"),
        (
            "/v3/completions",
            {"model": "tiny-llm", "prompt": "x", "temperature": 5},
            400,
            "temperature",
            "invalid_value",
        ),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "x", "n": 17}, 400, "n", "invalid_value"),
    ],
)
def test_bad_requests(cb_server, path, body, status, param, code):
    got, err = post(cb_server, path, body)
    assert got == status
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["message"]
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["param"] == param
    assert err["error"]["code"] == code
    # and the server keeps serving
    r = client(cb_server).completions.create(model="tiny-llm", prompt="hi", max_tokens=2)
    assert r.usage.completion_tokens >= 1


def test_openai_client_raises_on_bad_request(cb_server):
    with pytest.raises(openai.BadRequestError) as ei:
        client(cb_server).completions.create(model="tiny-llm", prompt="x", max_tokens=-1)
    assert ei.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client(cb_server).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


def test_32_concurrent_requests_none_lost(cb_server):
    before = cb_server.metric("ovserve_requests_total", 'endpoint="chat",status="200"')

    async def run():
        c = openai.AsyncOpenAI(base_url=cb_server.url + "/v3", api_key="x", max_retries=0, timeout=120)

        async def one(i: int):
            if i % 2:
                return await c.chat.completions.create(
                    model="tiny-llm",
                    messages=[{"role": "user", "content": f"number {i} hello"}],
                    max_tokens=16,
                    extra_body={"ignore_eos": True},
                )
            chunks = [
                ch
                async for ch in await c.chat.completions.create(
                    model="tiny-llm",
                    messages=[{"role": "user", "content": f"number {i} hello"}],
                    max_tokens=16,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )
            ]
            return chunks[-1]

        try:
            return await asyncio.gather(*(one(i) for i in range(32)))
        finally:
            await c.close()

    results = asyncio.run(run())
    assert len(results) == 32
    assert all(r.usage.completion_tokens == 16 for r in results)
    assert len({r.id for r in results}) == 32
    after = cb_server.metric("ovserve_requests_total", 'endpoint="chat",status="200"')
    assert after - before == 32
    assert cb_server.metric("ovserve_requests_running") == 0
    assert cb_server.metric("ovserve_queue_depth") == 0


def test_metrics(cb_server):
    client(cb_server).completions.create(
        model="tiny-llm", prompt="hello", max_tokens=4, extra_body={"ignore_eos": True}
    )
    text = cb_server.metrics()
    for name in (
        "ovserve_requests_total",
        "ovserve_prompt_tokens_total",
        "ovserve_generated_tokens_total",
        "ovserve_time_to_first_token_seconds_bucket",
        "ovserve_time_per_output_token_seconds_bucket",
        "ovserve_ready 1.0",
    ):
        assert name in text, name
    # the load gauges by value, idle here (under load: test_gauges.py)
    for name in ("ovserve_queue_depth", "ovserve_requests_running", "ovserve_kv_cache_usage_percent"):
        assert wait_until(lambda name=name: cb_server.metric(name) == 0, timeout=5), name
    assert (
        'ovserve_pipeline_info{continuous_batching="true",device="CPU",fallback="false",model="tiny-llm",'
        'reason="ContinuousBatching",requested="AUTO",resolved="LM_CB",state="ready"} 1.0'
    ) in text
    assert cb_server.metric("ovserve_generated_tokens_total") >= 4
    assert cb_server.metric("ovserve_time_to_first_token_seconds_count") >= 1


def test_status_and_health(cb_server):
    st = cb_server.status()
    assert st["state"] == "ready" and st["model"] == "tiny-llm" and st["device"] == "CPU"
    assert st["pipeline"] == {
        "requested": "AUTO",
        "resolved": "LM_CB",
        "continuousBatching": True,
        "fallback": False,
        "reason": "ContinuousBatching",
        "message": "",
    }
    assert st["versions"]["openvino"].startswith("20") and st["versions"]["openvinoGenai"].startswith("20")
    assert http_get(cb_server.url + "/v2/health/live")[0] == 200
    assert http_get(cb_server.url + "/v2/health/ready")[0] == 200


def _stream_then_disconnect(server, body: dict, chunks: int = 2) -> None:
    """Raw HTTP: read a few SSE chunks and drop the connection."""
    host, port = "127.0.0.1", server.port
    data = json.dumps(body).encode()
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(
        b"POST /v3/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )
    got = b""
    while got.count(b"data: ") < chunks:
        part = s.recv(4096)
        assert part, got
        got += part
    s.close()


@pytest.mark.parametrize("which", ["cb_server", "legacy_server"])
def test_disconnect_cancels_generation(request, which):
    server = request.getfixturevalue(which)
    max_tokens = 450
    before = server.metric("ovserve_generated_tokens_total")
    cancelled_before = server.metric("ovserve_requests_total", 'status="499"')
    _stream_then_disconnect(server, {"prompt": "hi", "max_tokens": max_tokens, "stream": True, "ignore_eos": True})
    assert wait_until(lambda: server.metric("ovserve_requests_total", 'status="499"') == cancelled_before + 1)
    assert wait_until(lambda: server.metric("ovserve_requests_running") == 0)
    generated = server.metric("ovserve_generated_tokens_total") - before
    assert 0 < generated < max_tokens  # stopped early
    # capacity is back: the next request is served
    r = client(server).completions.create(model=server.status()["model"], prompt="hi", max_tokens=3)
    assert r.usage.completion_tokens >= 1


# --- legacy (fallback) server ---------------------------------------------------------------------


def test_legacy_fallback_status_and_metrics(legacy_server):
    st = legacy_server.status()
    assert st["model"] == "nosdpa"
    p = st["pipeline"]
    assert (p["requested"], p["resolved"], p["continuousBatching"], p["fallback"], p["reason"]) == (
        "AUTO",
        "LM",
        False,
        True,
        "PagedAttentionNotSupported",
    )
    assert "No ScaledDotProductAttention operation observed in the graph" in p["message"]
    assert 'fallback="true"' in legacy_server.metrics()
    assert 'reason="PagedAttentionNotSupported"' in legacy_server.metrics()


def test_legacy_serializes_concurrent_requests(legacy_server):
    async def run():
        c = openai.AsyncOpenAI(base_url=legacy_server.url + "/v3", api_key="x", max_retries=0, timeout=120)
        try:
            return await asyncio.gather(
                *(
                    c.completions.create(
                        model="nosdpa", prompt=f"hello {i}", max_tokens=8, extra_body={"ignore_eos": True}
                    )
                    for i in range(8)
                )
            )
        finally:
            await c.close()

    results = asyncio.run(run())
    assert [r.usage.completion_tokens for r in results] == [8] * 8
    stream = list(
        client(legacy_server).chat.completions.create(
            model="nosdpa", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
        )
    )
    assert stream[-1].choices[0].finish_reason in ("length", "stop")


# --- VLM ------------------------------------------------------------------------------------------


def _png_data_url(seed: int = 0) -> str:
    from ovserve_runtime.images import encode_png

    img = np.random.RandomState(seed).randint(0, 255, (40, 48, 3), dtype=np.uint8)
    return "data:image/png;base64," + base64.b64encode(encode_png(img)).decode()


def test_vlm_chat_with_image(vlm_server):
    assert vlm_server.status()["pipeline"]["resolved"] == "VLM_CB"
    msg = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": _png_data_url()}},
                {"type": "text", "text": "describe the picture"},
            ],
        }
    ]
    r = client(vlm_server).chat.completions.create(
        model="tiny-vlm", messages=msg, max_tokens=6, extra_body={"ignore_eos": True}
    )
    assert r.usage.completion_tokens == 6
    chunks = list(
        client(vlm_server).chat.completions.create(
            model="tiny-vlm", messages=msg, max_tokens=4, stream=True, extra_body={"ignore_eos": True}
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    bad = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        }
    ]
    with pytest.raises(openai.BadRequestError):
        client(vlm_server).chat.completions.create(model="tiny-vlm", messages=bad, max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client(vlm_server).chat.completions.create(
            model="tiny-vlm",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
                }
            ],
            max_tokens=2,
        )
    assert vlm_server.metric("ovserve_requests_running") == 0


def test_png_decoder_roundtrip():
    from ovserve_runtime.images import decode_data_url

    url = _png_data_url(3)
    img = decode_data_url(url)
    expect = np.random.RandomState(3).randint(0, 255, (40, 48, 3), dtype=np.uint8)
    assert np.array_equal(img, expect)


def _raw_stream(server, body: dict, version: str = "1.1", stall_s: float = 0.0) -> tuple[bytes, bytes]:
    """One streaming POST on a plain socket (a tiny receive buffer; nothing read for `stall_s`): the response's
    head and its body bytes, chunked framing removed."""
    data = json.dumps(body).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.connect(("127.0.0.1", server.port))
    s.sendall(
        f"POST /v3/completions HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    if stall_s:
        time.sleep(stall_s)
    s.settimeout(60)
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    s.close()
    head, _, body_bytes = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", body_bytes
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        body_bytes = out
    return head, body_bytes


def _sse_text(body: bytes) -> tuple[str, list]:
    events = [e for e in body.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    return "".join(p["choices"][0]["text"] for p in payloads if p["choices"]), payloads


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_stalled_reader_gets_the_whole_stream(cb_server, version):
    """Tokens go from the engine's delivery straight to the socket (chunked framing on HTTP/1.1, none on 1.0)
    while the client keeps up, else through the handler. A reader that stalls for a while still gets every token,
    in order, byte-exact with the non-streamed answer. (Loopback's kernel buffers absorb this whole stream; the
    hand-over to the handler was checked by making the sink decline 30% of calls at random: this module passed.)"""
    req = {"model": "tiny-llm", "prompt": "the quick brown fox", "max_tokens": 480, "temperature": 0}
    req["ignore_eos"] = True
    full = client(cb_server).completions.create(
        model="tiny-llm", prompt=req["prompt"], max_tokens=480, temperature=0, extra_body={"ignore_eos": True}
    )
    head, body = _raw_stream(cb_server, {**req, "stream": True}, version=version, stall_s=2.0)
    assert head.startswith(f"HTTP/{version} 200".encode())
    text, payloads = _sse_text(body)
    assert text == full.choices[0].text
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


def _chat_stream_chunks(server, **kw) -> tuple[list[tuple[float, str]], str | None, float]:
    """A streamed chat completion through the openai client: (arrival time, text) of each chunk with text, the
    finish reason, and the seconds from the request to the end of the stream."""
    t0 = time.monotonic()
    chunks, finish = [], None
    for c in client(server).chat.completions.create(stream=True, **kw):
        if c.choices and c.choices[0].delta.content:
            chunks.append((time.monotonic() - t0, c.choices[0].delta.content))
        if c.choices and c.choices[0].finish_reason:
            finish = c.choices[0].finish_reason
    return chunks, finish, time.monotonic() - t0


@pytest.mark.parametrize("interval_ms", [50, 0])
def test_stream_interval_gathers_a_streams_text_into_fewer_chunks(tiny_models, server_factory, interval_ms):
    """--stream-interval-ms: text that comes within the interval of a stream's last chunk goes out in one chunk at
    the interval's end (by a timer: the text does not wait for more tokens), so a stream has at most one chunk
    per interval besides its first and last ones, and the text is the same; 0 gives a chunk per engine step."""
    model = tiny_models / "tiny-llm"
    srv = server_factory(model, "--served-name", "tiny-llm", "--stream-interval-ms", str(interval_ms))
    kw = {
        "model": "tiny-llm",
        "messages": [{"role": "user", "content": "the quick brown fox"}],
        "max_tokens": 480,
        "temperature": 0,
        "extra_body": {"ignore_eos": True},
    }
    full = client(srv).chat.completions.create(**kw)
    chunks, finish, took = _chat_stream_chunks(srv, **kw)
    assert "".join(t for _, t in chunks) == full.choices[0].message.content and finish == "length"
    assert full.usage.completion_tokens == 480
    if interval_ms == 0:  # one engine step at a time: a token per chunk but where a character spans tokens
        assert len(chunks) >= 240, len(chunks)
        return
    interval_s = interval_ms / 1000
    # the server writes a text chunk at most once per interval after the first (the client can only see fewer)
    assert len(chunks) <= took / interval_s + 2, (len(chunks), took)
    # held text goes out when its interval ends, not only with the end of the stream
    assert len(chunks) >= min(3, took / interval_s - 1), (len(chunks), took)


def test_a_body_that_does_not_decode_as_its_content_encoding_says_is_a_400(cb_server):
    """The fuzzer sent `Content-Encoding: gzip` over a plain body: aiohttp's decoding error was a 500 (issue 38).
    Where the answer comes before the body is read (another task's endpoint, an unknown path), aiohttp's drain of
    the unread rest failed the same way and logged an unhandled server exception: the connection closes
    instead (http/app.py unread_body_closes)."""
    for path, status, code in (
        ("/v3/chat/completions", 400, "invalid_body"),
        ("/v1/responses", 400, "invalid_body"),
        ("/v3/embeddings", 404, "task_not_served"),
        ("/v3/no-such-path", 404, "not_found"),
    ):
        req = urllib.request.Request(
            cb_server.url + path,
            data=b'{"messages": []}',
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        try:
            urllib.request.urlopen(req, timeout=30)
            raise AssertionError("accepted")
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            assert (e.code, body["error"]["code"]) == (status, code), (path, body)
    time.sleep(0.5)  # the drain runs after the answer
    log = cb_server.log.read_text()
    assert "Unhandled exception" not in log and "zlib.error" not in log  # aiohttp's drain of the rest, logged
