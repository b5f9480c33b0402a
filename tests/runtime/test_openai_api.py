"""The OpenAI API surface of real ovserve-runtime processes through the real `openai` client: structured outputs
(`beta.chat.completions.parse` with a pydantic model, streamed and not, CB and legacy), refusals by name, the
capabilities report, and the fixes of the HTTP layer (admission after the body read, the prompt-size
pre-check, the liveness progress watchdog)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from .conftest import http_get, wait_until
from .test_engine_process import _engine_pid
from .test_http import client, post

pytestmark = pytest.mark.runtime


class Order(BaseModel):
    """Bounded fields only: a random-weight model fills each within a few tokens."""

    color: Literal["red", "green", "blue"]
    urgent: bool
    count: int = Field(ge=1, le=12)
    code: str = Field(max_length=4)


def _fits(obj: dict) -> Order:
    return Order.model_validate(obj)  # raises when the output does not fit the schema


@pytest.fixture(params=["cb", "legacy"])
def text_server(request, cb_server, legacy_server):
    return cb_server if request.param == "cb" else legacy_server


def _model(server) -> str:
    return server.status()["model"]


def test_parse_returns_a_parsed_object(text_server):
    for i in range(3):
        r = client(text_server).beta.chat.completions.parse(
            model=_model(text_server),
            messages=[{"role": "user", "content": f"order number {i}"}],
            response_format=Order,
            max_tokens=64,
        )
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Order), choice.message.content
        assert " " not in choice.message.content.replace(choice.message.parsed.code, "")  # compact


def test_json_schema_streamed(text_server):
    schema = {"name": "order", "schema": Order.model_json_schema(), "strict": False}
    stream = client(text_server).chat.completions.create(
        model=_model(text_server),
        messages=[{"role": "user", "content": "an order"}],
        response_format={"type": "json_schema", "json_schema": schema},
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert finish == "stop"
    _fits(json.loads(text))
    assert usage is not None and usage.completion_tokens >= 1


def test_json_object_is_a_json_object_or_says_length(text_server):
    for i in range(3):
        r = client(text_server).chat.completions.create(
            model=_model(text_server),
            messages=[{"role": "user", "content": f"json please {i}"}],
            response_format={"type": "json_object"},
            max_tokens=48,
        )
        c = r.choices[0]
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict), c.message.content
        else:
            assert c.finish_reason == "length" and r.usage.completion_tokens == 48
        assert c.message.content.startswith("{")


def test_cut_at_max_tokens_says_length(cb_server):
    r = client(cb_server).chat.completions.create(
        model="tiny-llm",
        messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": Order.model_json_schema()}},
        max_tokens=2,
    )
    assert r.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/no"}}}},
            "response_format",
            "invalid_value",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format.type", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools", "unsupported_value"),
        ({"tool_choice": "required"}, "tool_choice", "invalid_value"),  # without tools
        ({"logit_bias": {"1": 10}}, "logit_bias", "unsupported_value"),
        ({"modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
        ({"n": 2, "stream": True}, "n", "unsupported_value"),
        ({"max_token": 5}, "max_token", "unknown_parameter"),
        (  # tiny-llm's chat template renders no tool turns: refused, never dropped
            {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r", "tool_call_id": "c"}]},
            "messages[1]",
            "unsupported_value",
        ),
        (
            {"stream": True, "stream_options": {"include_obfuscation": True}},
            "stream_options.include_obfuscation",
            "unsupported_value",
        ),
    ],
)
def test_refusals_name_the_field(cb_server, body, param, code):
    status, err = post(cb_server, "/v3/chat/completions", {"messages": [{"role": "user", "content": "x"}], **body})
    assert status == 400, err
    assert (err["error"]["param"], err["error"]["code"]) == (param, code), err


def test_the_openai_client_sees_the_refusal(cb_server):
    with pytest.raises(openai.BadRequestError) as ei:
        client(cb_server).chat.completions.create(
            model="tiny-llm",
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            tool_choice="required",
        )
    assert ei.value.body["param"] == "tools"


def test_vlm_refuses_structured_output_by_name(vlm_server):
    status, err = post(
        vlm_server,
        "/v3/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
    )
    assert (status, err["error"]["param"]) == (400, "response_format.type"), err


def test_capabilities_are_reported(cb_server, legacy_server, vlm_server):
    cb, legacy, vlm = (s.status()["capabilities"] for s in (cb_server, legacy_server, vlm_server))
    assert cb["structuredOutput"] and legacy["structuredOutput"] and not vlm["structuredOutput"]
    assert vlm["images"] and not cb["images"]
    assert cb["logprobs"] and not legacy["logprobs"]
    assert cb["maxPromptTokens"] == 256 and cb["maxContext"] >= 256
    assert cb["toolParser"] is None  # tiny-llm's chat template renders no tools (test_tool_calling: the others)


def test_min_tokens_is_honoured(cb_server):
    r = client(cb_server).completions.create(
        model="tiny-llm", prompt="hello", max_tokens=12, extra_body={"min_tokens": 12}
    )
    assert r.usage.completion_tokens == 12


# --- fixes of the HTTP layer -----------------------------------------------------------------------


def test_a_huge_prompt_is_refused_before_tokenizing(cb_server):
    prompt = "hello " * (4 * 1024 * 1024 // 6)  # 4 MiB against --max-prompt-tokens 256
    t = time.monotonic()
    status, err = post(cb_server, "/v3/completions", {"prompt": prompt, "max_tokens": 1})
    assert status == 400 and err["error"]["code"] == "context_length_exceeded", err
    assert "before tokenizing" in err["error"]["message"], err
    assert time.monotonic() - t < 10


def _stalled_upload(port: int) -> socket.socket:
    """A POST whose body never comes: headers and half the body, then silence."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        b"POST /v3/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"messages": ['
    )
    return s


def test_stalled_uploads_are_not_admitted(tiny_models, server_factory):
    srv = server_factory(
        tiny_models / "tiny-llm",
        "--served-name",
        "m",
        "--max-num-seqs",
        "1",
        "--max-queued-requests",
        "0",
        "--body-timeout-seconds",
        "3",
    )
    stalled = [_stalled_upload(srv.port) for _ in range(3)]
    try:
        time.sleep(0.5)
        values = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in srv.metrics().splitlines()
            if line.startswith("ovserve_queue_depth")
        }
        assert values["ovserve_queue_depth"] == 0, values
        # three uploads in progress and room for one request: it is served, not 429
        r = client(srv).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert r.choices[0].finish_reason in ("stop", "length")
        # the deadline: each stalled upload gets a 408 and its connection closes
        for s in stalled:
            s.settimeout(10)
            head = s.recv(4096)
            assert head.startswith(b"HTTP/1.1 408"), head[:200]
    finally:
        for s in stalled:
            s.close()


def test_liveness_watchdog_finds_a_hung_engine(tiny_models, server_factory):
    srv = server_factory(tiny_models / "tiny-llm", "--served-name", "m", "--liveness-stall-seconds", "1")
    assert http_get(srv.url + "/v2/health/live")[0] == 200
    engine = _engine_pid(srv)
    os.kill(engine, signal.SIGSTOP)  # the engine hangs: no step, no token
    answers: list = []
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    t = threading.Thread(target=lambda: answers.append(post(srv, "/v3/chat/completions", body)), daemon=True)
    try:
        t.start()
        time.sleep(2)
        assert http_get(srv.url + "/v2/health/live")[0] == 200  # the clock starts at the first look
        assert wait_until(lambda: http_get(srv.url + "/v2/health/live")[0] == 503, timeout=30)
        code, text = http_get(srv.url + "/v2/health/live")
        assert code == 503 and "engine stalled" in json.loads(text)["reason"], text
        assert "engine stalled" in srv.log.read_text()
    finally:
        os.kill(engine, signal.SIGCONT)
    t.join(30)
    assert answers and answers[0][0] == 200, answers
    assert http_get(srv.url + "/v2/health/live")[0] == 200  # nothing in flight: live again


def test_logprobs_on_continuous_batching(cb_server):
    c = client(cb_server)
    r = c.chat.completions.create(
        model="tiny-llm",
        messages=[{"role": "user", "content": "x"}],
        max_tokens=6,
        logprobs=True,
        extra_body={"ignore_eos": True},
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    assert "".join(t.token for t in content) == r.choices[0].message.content
    assert all(t.logprob <= 0 and t.top_logprobs == [] and bytes(t.bytes) == t.token.encode() for t in content)
    stream = c.chat.completions.create(
        model="tiny-llm",
        messages=[{"role": "user", "content": "x"}],
        max_tokens=6,
        logprobs=True,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    streamed = [t for ch in stream for choice in ch.choices if choice.logprobs for t in choice.logprobs.content]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [(t.token, round(t.logprob, 4)) for t in content]


def test_logprobs_refused_by_name_where_the_pipeline_has_none(legacy_server):
    status, err = post(
        legacy_server, "/v3/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}
    )
    assert (status, err["error"]["param"]) == (400, "logprobs"), err
    status, err = post(
        legacy_server, "/v3/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}
    )
    assert (status, err["error"]["param"]) == (400, "top_logprobs"), err


def test_seed_makes_sampling_reproducible(text_server):
    def sample(seed: int) -> str:
        r = client(text_server).completions.create(
            model=_model(text_server),
            prompt="once upon",
            max_tokens=12,
            temperature=1.0,
            seed=seed,
            extra_body={"ignore_eos": True},
        )
        return r.choices[0].text

    first = sample(7)
    assert sample(7) == first
    assert any(sample(s) != first for s in (8, 9, 10))


def test_stop_ends_the_text_before_the_stop_string(text_server):
    """OpenAI's meaning: the text ends before the stop string, also when it lies inside one token (openvino-genai
    leaves it in then), streamed and not."""
    c = client(text_server)
    kw = {"model": _model(text_server), "prompt": "hello", "max_tokens": 24}
    full = c.completions.create(**kw, extra_body={"ignore_eos": True}).choices[0].text
    stop = next(
        full[i : i + 3] for i in range(2, len(full) - 3) if full[i : i + 3].isascii() and full[i : i + 3].strip()
    )
    expected = full[: full.index(stop)]
    choice = c.completions.create(**kw, stop=[stop]).choices[0]
    assert (choice.text, choice.finish_reason) == (expected, "stop"), (full, stop)
    chunks = list(c.completions.create(**kw, stop=[stop], stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == expected, (full, stop)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_n_choices(text_server):
    c = client(text_server)
    kw = {"model": _model(text_server), "prompt": "once", "max_tokens": 8, "extra_body": {"ignore_eos": True}}
    r = c.completions.create(**kw, n=3, temperature=1.0, seed=5)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 24
    # choice i samples with seed + i: choice 0 is the single request with the seed, choice 1 the one with seed + 1
    assert r.choices[0].text == c.completions.create(**kw, temperature=1.0, seed=5).choices[0].text
    assert r.choices[1].text == c.completions.create(**kw, temperature=1.0, seed=6).choices[0].text
    chat = c.chat.completions.create(
        model=_model(text_server), messages=[{"role": "user", "content": "x"}], max_tokens=4, n=2
    )
    assert len(chat.choices) == 2 and chat.choices[0].message.content == chat.choices[1].message.content  # greedy
