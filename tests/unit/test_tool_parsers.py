"""Tool-call parsers (ovserve_runtime.openai.tools): per family, the whole output and any split of it into
streamed deltas give the same content and calls; streamed arguments are only ever complete, valid JSON."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from ovserve_runtime.openai import tools

NAMES = {"get_weather", "add", "now"}


def ids():
    n = itertools.count()
    return lambda: f"call_{next(n)}"


W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
A = '{"name": "add", "arguments": {"a": 1, "b": [2, 3.5], "c": {"d": null, "e": true}}}'
PARIS = ("get_weather", {"city": "Paris"})


def tc(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


# not valid calls: they stay content, as written
BROKEN = [
    tc('{"name": "get_weather", "arguments": {"city": '),
    '<tool_call>\n{"name": "get_weather", "arguments": {"city"',  # cut
    tc('{"name": "rm_rf", "arguments": {}}'),  # not offered
    tc('{"name": "now", "arguments": [1]}'),
    tc('{"name": "now", "arguments": {}, "x": 1}'),
    "a <tool_ca",
    "x </tool_call> y",
]
PY_CALLS = '[get_weather(city="Paris"), add(a=1, b=True, c=None, d=[1, (2, 3)], e={"k": -1.5})]'
PY_ADD = {"a": 1, "b": True, "c": None, "d": [1, [2, 3]], "e": {"k": -1.5}}

# (parser, output, content, [(name, arguments as an object)])
CASES = [
    # hermes (Qwen2.5, Qwen3)
    ("hermes", "plain answer", "plain answer", []),
    ("hermes", "", "", []),
    ("hermes", f"<tool_call>\n{W}\n</tool_call>", None, [PARIS]),
    (
        "hermes",
        f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{A}\n</tool_call>",
        None,
        [PARIS, ("add", {"a": 1, "b": [2, 3.5], "c": {"d": None, "e": True}})],
    ),
    ("hermes", f"Let me look.\n\n<tool_call>\n{W}\n</tool_call>", "Let me look.", [PARIS]),
    ("hermes", f"{tc(W)}  then text ", "then text ", [PARIS]),
    ("hermes", f"<tool_call>\n{W}\n", None, [PARIS]),  # a last call without its closing tag: the output ended
    # arguments as a JSON string, "parameters" as the key, no arguments: all read
    ("hermes", tc('{"name": "now", "arguments": "{\\"tz\\": \\"UTC\\"}"}'), None, [("now", {"tz": "UTC"})]),
    ("hermes", tc('{"name": "now", "parameters": {}}'), None, [("now", {})]),
    ("hermes", tc('{"name": "now"}'), None, [("now", {})]),
    *[("hermes", text, text, []) for text in BROKEN],
    (
        "hermes",
        tc('{"name": "get_weather", "arguments": {"city": "Zürich 東京"}}'),
        None,
        [("get_weather", {"city": "Zürich 東京"})],
    ),  # unicode survives unescaped
    # llama3_json (Llama 3.1/3.2)
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [PARIS]),
    (
        "llama3_json",
        '<|python_tag|>{"name": "now", "parameters": {}}; {"name": "add", "arguments": {"a": 1}}',
        None,
        [("now", {}), ("add", {"a": 1})],
    ),
    ("llama3_json", ' \n{"name": "now", "parameters": {}}\n', None, [("now", {})]),
    ("llama3_json", '{"name": "now", "parameters": {}} and then words', "and then words", [("now", {})]),
    ("llama3_json", 'The answer is {"name": "now"}', 'The answer is {"name": "now"}', []),
    ("llama3_json", "  plain answer", "  plain answer", []),
    ("llama3_json", '{"name": "now", "parameters": {"a": ', '{"name": "now", "parameters": {"a": ', []),
    ("llama3_json", '{"city": "Paris"}', '{"city": "Paris"}', []),
    ("llama3_json", '{"name": "now", "parameters": {}}; {broken', "{broken", [("now", {})]),
    ("llama3_json", "<|python_ta", "<|python_ta", []),
    ("llama3_json", '{"name": "now", "parameters": {"s": "}{;"}}', None, [("now", {"s": "}{;"})]),
    # llama3_pythonic (Llama 3.2 pythonic, Llama 4)
    ("llama3_pythonic", PY_CALLS, None, [PARIS, ("add", PY_ADD)]),
    ("llama3_pythonic", "<|python_start|>[now()]<|python_end|>", None, [("now", {})]),
    ("llama3_pythonic", " [now()] ", None, [("now", {})]),
    ("llama3_pythonic", "It is [now()]", "It is [now()]", []),
    ("llama3_pythonic", "[now(1)]", "[now(1)]", []),  # positional: no name for it
    ("llama3_pythonic", "[now(x=y)]", "[now(x=y)]", []),  # a variable, not a literal
    ("llama3_pythonic", "[os.system(c='x')]", "[os.system(c='x')]", []),
    ("llama3_pythonic", "[rm(x=1)]", "[rm(x=1)]", []),
    ("llama3_pythonic", "[now(x=1e999)]", "[now(x=1e999)]", []),  # inf is not JSON
    ("llama3_pythonic", "[now(x=1", "[now(x=1", []),
    ("llama3_pythonic", "[1, 2]", "[1, 2]", []),
    ("llama3_pythonic", "[]", "[]", []),
]


def _check(parsed: tools.Parsed, content, want_calls):
    assert parsed.content == content
    got = [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls]
    assert got == want_calls
    assert [c.id for c in parsed.tool_calls] == [f"call_{i}" for i in range(len(want_calls))]
    assert all(c.type == "function" for c in parsed.tool_calls)


@pytest.mark.parametrize(("parser", "text", "content", "want"), CASES)
def test_parse_whole_output(parser, text, content, want):
    _check(tools.parse(parser, text, NAMES, new_id=ids()), content, want)


def _streamed(parser, pieces):
    s = tools.stream(parser, NAMES, new_id=ids())
    deltas = [d for p in pieces for d in s.feed(p)] + s.finish()
    return deltas


def _splits(text, rng):
    yield [text]
    yield list(text)  # a character at a time
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), rng.randint(1, 6))))
        yield [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


@pytest.mark.parametrize(("parser", "text", "content", "want"), CASES)
def test_any_split_streams_what_parse_gives(parser, text, content, want):
    rng = random.Random(text)
    for pieces in _splits(text, rng):
        deltas = _streamed(parser, pieces)
        got_content = "".join(d.content or "" for d in deltas if d.tool_call is None)
        got_calls = [d for d in deltas if d.tool_call is not None]
        assert (got_content or (None if got_calls else "")) == content, pieces
        assert [d.index for d in got_calls] == list(range(len(want))), pieces
        for d, (name, args) in zip(got_calls, want, strict=True):
            # each call is one delta with its complete arguments: valid JSON on its own
            assert d.tool_call.function.name == name and json.loads(d.tool_call.function.arguments) == args
        assert all(d.content for d in deltas if d.tool_call is None)  # no empty content deltas


def test_content_streams_before_the_output_ends():
    s = tools.stream("hermes", NAMES, new_id=ids())
    assert [d.content for d in s.feed("Hello wor")] == ["Hello wor"]
    assert [d.content for d in s.feed("ld, <tool")] == ["ld,"]  # " <tool" waits: a call may follow
    assert s.feed('_call>{"name": "now"') == []
    out = s.feed("}</tool_call> bye")
    assert out[0].openai() == {
        "tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "now", "arguments": "{}"}}]
    }
    assert [d.content for d in out[1:]] == ["bye"]
    assert s.finish() == []


def test_a_call_cut_at_max_tokens_streams_as_text_never_as_broken_arguments():
    s = tools.stream("hermes", NAMES, new_id=ids())
    out = s.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    assert out == []
    tail = s.finish()
    assert [d.tool_call for d in tail] == [None]
    assert tail[0].content == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'


def test_without_a_tool_list_any_name_is_a_call():
    parsed = tools.parse("hermes", '<tool_call>{"name": "anything", "arguments": {}}</tool_call>', None)
    assert parsed.tool_calls[0].function.name == "anything"


def test_ids_are_openai_style_and_unique():
    got = {tools.new_call_id() for _ in range(1000)}
    assert len(got) == 1000 and all(i.startswith("call_") and len(i) == 29 for i in got)


# --------------------------------------------------------------------------- detection from chat templates

QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
    "{{- 'within <tool_call></tool_call> XML tags' }}{%- endif %}"
)
LLAMA31 = (
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}"
    '{{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and '
    "its value}.' }}{{- '<|python_tag|>' }}"
)
LLAMA32_PYTHONIC = (
    "{%- if tools is not none %}{{- 'Respond in the format [func_name1(params_name1=params_value1, "
    "params_name2=params_value2...), func_name2(params)]' }}{%- endif %}"
)


@pytest.mark.parametrize(
    ("template", "parser"),
    [
        (QWEN25, "hermes"),
        (LLAMA31, "llama3_json"),
        (LLAMA32_PYTHONIC, "llama3_pythonic"),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", None),  # no tools at all
        ("{% if tools %}{{ tools | tojson }}{% endif %}", None),  # tools, but no format we parse
        ("", None),
        (None, None),
    ],
)
def test_detect_the_family_from_the_chat_template(template, parser):
    assert tools.detect(template) == parser


@pytest.mark.parametrize(
    ("template", "renders"),
    [(QWEN25, True), ("{{ messages }}", False), ("{{ mytools }}", False), (None, False)],
)
def test_renders_tools(template, renders):
    assert tools.renders_tools(template) is renders


# parallel_tool_calls false in "auto": the first call counts, the rest stays text as written
ONE_CALL = [
    ("hermes", f"{tc(W)}\n{tc(A)}", tc(A), [PARIS]),
    (
        "llama3_json",
        '{"name": "now", "parameters": {}}; {"name": "add", "arguments": {"a": 1}}',
        '{"name": "add", "arguments": {"a": 1}}',  # the separator between calls is not text
        [("now", {})],
    ),
    ("llama3_pythonic", "[now(), add(a=1), now()]", "add(a=1), now()", [("now", {})]),
    ("llama3_pythonic", "[now()]", None, [("now", {})]),
]


@pytest.mark.parametrize(("parser", "text", "content", "want"), ONE_CALL)
def test_at_most_one_call_when_parallel_calls_are_off(parser, text, content, want):
    _check(tools.parse(parser, text, NAMES, new_id=ids(), max_calls=1), content, want)
    for pieces in _splits(text, random.Random(text)):
        s = tools.stream(parser, NAMES, new_id=ids(), max_calls=1)
        deltas = [d for p in pieces for d in s.feed(p)] + s.finish()
        assert sum(d.tool_call is not None for d in deltas) == 1
        assert ("".join(d.content or "" for d in deltas) or None) == content
