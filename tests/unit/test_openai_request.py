"""The typed request bodies (ovserve_runtime.openai.request): every invalid value is one named 400 error."""

from __future__ import annotations

import json

import pytest
from ovserve_runtime.openai.request import (
    MAX_SEED,
    MAX_TOKENS,
    ChatRequest,
    CompletionRequest,
    RequestError,
    param_path,
    parse,
)

MSG = [{"role": "user", "content": "hi"}]


def chat(**fields) -> dict:
    return {"model": "m", "messages": MSG, **fields}


def comp(**fields) -> dict:
    return {"model": "m", "prompt": "hi", **fields}


def raw(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


@pytest.mark.parametrize(
    ("is_chat", "body", "param", "code"),
    [
        # not JSON / not an object
        (True, b"{not json", None, "invalid_json"),
        (True, b"", None, "invalid_json"),
        (True, b'{"messages": [}', None, "invalid_json"),
        (True, b'{"x": "\xff\xfe"}', None, "invalid_json"),  # invalid UTF-8
        (True, b'{"x": "\\ud800"}', None, "invalid_json"),  # lone surrogate
        (True, b"[" * 1000 + b"]" * 1000, None, "invalid_json"),  # nesting beyond the parser's limit
        (True, b'{"temperature": NaN, "messages": []}', "temperature", "invalid_value"),  # parsed, not finite
        (True, b"[1, 2]", None, "invalid_json"),
        (True, b"null", None, "invalid_json"),
        (True, b'"text"', None, "invalid_json"),
        # required fields
        (True, {"model": "m"}, "messages", "missing_required_parameter"),
        (False, {"model": "m"}, "prompt", "missing_required_parameter"),
        # booleans are booleans
        (True, chat(stream="false"), "stream", "invalid_type"),
        (True, chat(stream=0), "stream", "invalid_type"),
        (True, chat(ignore_eos="yes"), "ignore_eos", "invalid_type"),
        (
            True,
            chat(stream=True, stream_options={"include_usage": "true"}),
            "stream_options.include_usage",
            "invalid_type",
        ),
        (True, chat(stream=True, stream_options=[]), "stream_options", "invalid_type"),
        (True, chat(stream_options={"include_usage": True}), "stream_options", "invalid_value"),
        # numbers are numbers, integers are integers, in range
        (True, chat(temperature=True), "temperature", "invalid_type"),
        (True, chat(temperature="0.5"), "temperature", "invalid_type"),
        (True, chat(temperature=2.5), "temperature", "invalid_value"),
        (True, chat(temperature=-0.1), "temperature", "invalid_value"),
        (
            True,
            raw(b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e400}'),
            "temperature",
            "invalid_value",
        ),
        (True, chat(top_p=0), "top_p", "invalid_value"),
        (True, chat(top_p=1.5), "top_p", "invalid_value"),
        (True, chat(top_k=-1), "top_k", "invalid_value"),
        (True, chat(top_k=2**40), "top_k", "invalid_value"),
        (True, chat(top_k=1.5), "top_k", "invalid_type"),
        (True, chat(seed=-1), "seed", "invalid_value"),
        (True, chat(seed=2**64), "seed", "invalid_value"),
        (True, chat(seed=10**30), "seed", "invalid_value"),
        (True, chat(seed=1.0), "seed", "invalid_type"),
        (True, chat(max_tokens=0), "max_tokens", "invalid_value"),
        (True, chat(max_tokens=2**31), "max_tokens", "invalid_value"),
        (True, chat(max_tokens=10**100), "max_tokens", "invalid_value"),
        (True, chat(max_completion_tokens="5"), "max_completion_tokens", "invalid_type"),
        (False, comp(max_tokens=-5), "max_tokens", "invalid_value"),
        (False, comp(max_tokens="ten"), "max_tokens", "invalid_type"),
        (True, chat(presence_penalty=3), "presence_penalty", "invalid_value"),
        (True, chat(frequency_penalty=-2.5), "frequency_penalty", "invalid_value"),
        (True, chat(repetition_penalty=0), "repetition_penalty", "invalid_value"),
        # positive doubles that are 0 as float32 (GenerationConfig) failed at generation time: a 500
        (True, chat(repetition_penalty=5e-324), "repetition_penalty", "invalid_value"),
        (True, chat(top_p=1e-300), "top_p", "invalid_value"),
        (True, chat(repetition_penalty=[1]), "repetition_penalty", "invalid_type"),
        # unsupported values are refused, not ignored
        (False, comp(n=17), "n", "invalid_value"),
        (True, chat(n=0), "n", "invalid_value"),
        (True, chat(top_logprobs=3), "top_logprobs", "unsupported_value"),
        (False, comp(echo=True), "echo", "unsupported_value"),
        (False, comp(best_of=2), "best_of", "unsupported_value"),
        (False, comp(logprobs=2), "logprobs", "unsupported_value"),
        (False, comp(suffix="x"), "suffix", "unsupported_value"),
        # stop: a string or up to 16 non-empty strings
        (True, chat(stop=5), "stop", "invalid_type"),
        (True, chat(stop=["a", 5]), "stop[1]", "invalid_type"),
        (True, chat(stop=[""]), "stop[0]", "invalid_value"),
        (True, chat(stop=["s"] * 17), "stop", "invalid_value"),
        (True, chat(stop={"a": 1}), "stop", "invalid_type"),
        # model
        (True, chat(model=5), "model", "invalid_type"),
        # messages and content parts
        (True, chat(messages=[]), "messages", "invalid_value"),
        (True, chat(messages="hi"), "messages", "invalid_type"),
        (True, chat(messages=[5]), "messages[0]", "invalid_type"),
        (True, chat(messages=[{"content": "x"}]), "messages[0].role", "missing_required_parameter"),
        (True, chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role", "invalid_value"),
        (True, chat(messages=[{"role": 1, "content": "x"}]), "messages[0].role", "invalid_value"),
        (True, chat(messages=[{"role": "user", "content": 5}]), "messages[0].content", "invalid_type"),
        (True, chat(messages=[{"role": "user", "content": {"text": "x"}}]), "messages[0].content", "invalid_type"),
        (True, chat(messages=[MSG[0], {"role": "user", "content": [5]}]), "messages[1].content[0]", "invalid_type"),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]),
            "messages[0].content[0].type",
            "invalid_value",
        ),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "text"}]}]),
            "messages[0].content[0]",
            "missing_required_parameter",
        ),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "text", "text": ["x"]}]}]),
            "messages[0].content[0].text",
            "invalid_type",
        ),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}]),
            "messages[0].content[0].image_url.url",
            "invalid_type",
        ),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content[0].image_url.url",
            "missing_required_parameter",
        ),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
            "messages[0].content[0]",
            "missing_required_parameter",
        ),
        # completions prompt: a string or a list of one string
        (False, comp(prompt=5), "prompt", "invalid_type"),
        (False, comp(prompt=["a", "b"]), "prompt", "invalid_value"),
        (False, comp(prompt=[]), "prompt", "invalid_value"),
        (False, comp(prompt=[1]), "prompt[0]", "invalid_type"),  # token ids are not supported
        (False, comp(prompt=[1, 2, 3]), "prompt", "invalid_value"),
        (False, comp(prompt=None), "prompt", "invalid_type"),
    ],
)
def test_invalid_bodies(is_chat, body, param, code):
    with pytest.raises(RequestError) as ei:
        parse(raw(body), is_chat)
    err = ei.value
    assert (err.param, err.code) == (param, code), err.message
    assert err.message
    if param is not None:
        assert f"'{param}'" in err.message  # the message names the field
        assert len(err.message) < 300  # and does not echo the input


@pytest.mark.parametrize(
    ("is_chat", "body", "check"),
    [
        # fields OpenAI clients send that the runtime does not use are ignored
        (True, chat(user="u", tools=[], metadata={"a": 1}, service_tier="auto", parallel_tool_calls=True), None),
        (True, chat(messages=[{"role": "user", "content": None}]), lambda r: r.messages[0].content is None),
        (True, chat(stop="x"), lambda r: r.stop == ["x"]),
        (True, chat(stop=["a", "b"]), lambda r: r.stop == ["a", "b"]),
        (True, chat(temperature=1), lambda r: r.temperature == 1.0 and r.sampling),  # an integer is a number
        (True, chat(temperature=5e-324), lambda r: not r.sampling),  # 0 as float32: greedy
        (True, chat(temperature=0), lambda r: not r.sampling),
        (True, chat(), lambda r: not r.sampling),
        (True, chat(seed=MAX_SEED, top_k=2**31 - 1), lambda r: r.seed == MAX_SEED),
        (True, chat(max_tokens=MAX_TOKENS), lambda r: r.new_tokens() == MAX_TOKENS),
        (True, chat(max_tokens=5, max_completion_tokens=7), lambda r: r.new_tokens() == 7),
        (True, chat(stream=True, stream_options={"include_usage": True}), lambda r: r.include_usage),
        (True, chat(stream=False), lambda r: not r.include_usage),
        (True, chat(n=1, logprobs=False, top_logprobs=0), None),
        (
            True,
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": "data:x"}]}]),
            lambda r: r.messages[0].content[0].image_url.url == "data:x",
        ),
        (
            True,
            chat(
                messages=[
                    {"role": "system", "content": "s"},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "a"},
                            {"type": "image_url", "image_url": {"url": "data:y", "detail": "low"}},
                        ],
                    },
                    {"role": "assistant", "content": "b", "name": "bot"},
                ]
            ),
            lambda r: [m.role for m in r.messages] == ["system", "user", "assistant"],
        ),
        (False, comp(prompt=["one"]), lambda r: r.text == "one"),
        (False, comp(echo=False, best_of=1, logprobs=0, suffix=""), None),
        (False, comp(stream=True), lambda r: r.stream is True),
    ],
)
def test_valid_bodies(is_chat, body, check):
    req = parse(raw(body), is_chat)
    assert isinstance(req, ChatRequest if is_chat else CompletionRequest)
    if check is not None:
        assert check(req)


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        ((), None),
        (("temperature",), "temperature"),
        (("messages", 0, "content"), "messages[0].content"),
        (("messages", 2, "content", 1, "image_url", "url"), "messages[2].content[1].image_url.url"),
        (("stop", 3), "stop[3]"),
    ],
)
def test_param_path(loc, path):
    assert param_path(loc) == path
