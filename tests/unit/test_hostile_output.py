"""Any model output is survivable: the tool and reasoning parsers never raise, bound the nesting they
decode, and stream in time linear in the output (issue 38, item 2).

A hostile or broken model can write anything: 100,000 brackets, an expression Python's parser cannot hold,
a 96 KB argument in 4-character deltas, 100,000 spaces. Each is either a valid call or content as written;
never an exception on the event loop, never seconds of its CPU.
"""

from __future__ import annotations

import itertools
import time

import pytest
from ovserve_runtime.openai import assistant, reasoning, tools
from ovserve_runtime.openai.assistant import OutputPlan, OutputStream

NAMES = frozenset({"f"})


def _ids():
    n = itertools.count()
    return lambda: f"call_{next(n)}"


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _id(v: object) -> str:
    text = str(v)
    return text if len(text) < 20 else f"{text[:16]}..{len(text)}"


HOSTILE = [
    # (parser, output): each must come back as content, exactly as written
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": ' + _deep(1_000) + "}}</tool_call>"),
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": ' + _deep(100_000) + "}}</tool_call>"),
    ("hermes", '<tool_call>{"name": "f", "arguments": "' + _deep(5_000) + '"}</tool_call>'),
    ("hermes", "<tool_call>" + _deep(5_000)),  # never closed, never an object
    ("llama3_json", '{"name": "f", "parameters": {"a": ' + _deep(1_000) + "}}"),
    ("llama3_json", '{"name": "f", "parameters": {"a": ' + _deep(100_000) + "}}"),
    ("llama3_json", '{"name": "f", "parameters": "' + "{" * 3_000 + "}" * 3_000 + '"}'),
    ("llama3_json", '{"name": "f", "parameters": {"a": ' + "[" * 100_000),  # cut mid-way
    ("llama3_pythonic", "[f(a=" + _deep(1_000) + ")]"),
    ("llama3_pythonic", "[f(a=" + "1+" * 100_000 + "1)]"),  # ast.parse: RecursionError
    ("llama3_pythonic", "[f(a=" + "-" * 200_000 + "1)]"),  # ast.parse: MemoryError
    ("llama3_pythonic", "[f(a=" + _deep(150) + ")]"),  # parses: deeper than the bound
    ("llama3_pythonic", "[f(a=" + "9" * 10_000 + ")]"),  # past int's digit limit
    ("llama3_pythonic", "[f(a='\x00')]"),
    # what json.loads reads but is not JSON: the arguments string would not be valid JSON
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": NaN}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": 1e999}}</tool_call>'),
    ("llama3_json", '{"name": "f", "parameters": {"a": -Infinity}}'),
    ("llama3_json", '{"name": "f", "parameters": {"a": ' + "9" * 5_000 + "}}"),
]


@pytest.mark.parametrize(("parser", "text"), HOSTILE, ids=lambda v: _id(v))
def test_hostile_output_is_content_as_written(parser, text):
    parsed = tools.parse(parser, text, NAMES, new_id=_ids())
    assert parsed.tool_calls == []
    assert parsed.content == text
    # streamed in pieces: the same
    s = tools.stream(parser, NAMES, new_id=_ids())
    deltas = [d for i in range(0, len(text), 997) for d in s.feed(text[i : i + 997])] + s.finish()
    assert all(d.tool_call is None for d in deltas)
    assert "".join(d.content or "" for d in deltas) == text


@pytest.mark.parametrize(
    ("parser", "template"),
    [
        ("hermes", '<tool_call>{{"name": "f", "arguments": {{"a": {}}}}}</tool_call>'),
        ("llama3_json", '{{"name": "f", "parameters": {{"a": {}}}}}'),
        ("llama3_pythonic", "[f(a={})]"),
    ],
)
def test_nesting_within_the_bound_is_a_call_beyond_it_content(parser, template):
    ok = template.format(_deep(tools.MAX_DEPTH - 3))
    parsed = tools.parse(parser, ok, NAMES, new_id=_ids())
    assert len(parsed.tool_calls) == 1, parsed
    too_deep = template.format(_deep(tools.MAX_DEPTH + 1))
    parsed = tools.parse(parser, too_deep, NAMES, new_id=_ids())
    assert parsed.tool_calls == [] and parsed.content == too_deep


def _big_argument(n: int) -> str:
    """An object of about n characters: a long string and a long array (each a decoder's worst case)."""
    return '{"a": "' + "x" * (n // 2) + '", "b": [' + "1, " * (n // 6) + '{"c": "\\"}{"}]}'


LONG = 96 * 1024
STREAMED = [
    ("hermes", "<tool_call>" + '{"name": "f", "arguments": ' + _big_argument(LONG) + "}</tool_call>", 1),
    ("llama3_json", '{"name": "f", "parameters": ' + _big_argument(LONG) + "}", 1),
    ("llama3_json", "; ".join(['{"name": "f", "parameters": ' + _big_argument(2_000) + "}"] * 48), 48),
    ("llama3_pythonic", "[f(a='" + "x" * LONG + "', b=[" + "1, " * (LONG // 3) + "])]", 1),
    ("hermes", " " * LONG + "done", 0),
    ("llama3_json", " " * LONG + "done", 0),
    ("llama3_pythonic", " " * LONG + "done", 0),
    ("hermes", "x " * (LONG // 2), 0),
    # ast.get_source_segment re-split the whole text for each call: 74 s of CPU for these 87 KB
    ("llama3_pythonic", "[" + ", ".join(f"f(a={i})" for i in range(8_000)) + "]", 8_000),
]


@pytest.mark.parametrize(("parser", "text", "calls"), STREAMED, ids=lambda v: _id(v))
def test_streaming_a_long_output_in_small_deltas_takes_linear_time(parser, text, calls):
    """4-character deltas (a token's worth): the old llama3_json parser re-decoded the pending call on every
    one (96 KB: 7.5 s of event-loop CPU); linear, it is a few tens of milliseconds."""
    s = tools.stream(parser, NAMES, new_id=_ids())
    t0 = time.process_time()
    deltas = [d for i in range(0, len(text), 4) for d in s.feed(text[i : i + 4])] + s.finish()
    took = time.process_time() - t0
    assert sum(d.tool_call is not None for d in deltas) == calls
    assert took < 1.0, f"{took:.2f} s of CPU to stream {len(text)} characters"
    whole = tools.parse(parser, text, NAMES, new_id=_ids())
    assert "".join(d.content or "" for d in deltas) == (whole.content or "")
    assert [d.tool_call for d in deltas if d.tool_call is not None] == whole.tool_calls


@pytest.mark.parametrize(
    "text",
    [
        " " * LONG + "<think>why</think>answer",
        "<think>" + " " * LONG + "why</think>" + " " * LONG + "answer",
        "<think>" + "why " * (LONG // 4) + "</think>answer",
    ],
    ids=["leading-space", "spaces-inside", "long-reasoning"],
)
@pytest.mark.parametrize("in_reasoning", [False, True])
def test_reasoning_streams_in_linear_time(text, in_reasoning):
    s = reasoning.ReasoningStream(in_reasoning=in_reasoning)
    t0 = time.process_time()
    parts = [s.feed(text[i : i + 4]) for i in range(0, len(text), 4)] + [s.finish()]
    took = time.process_time() - t0
    assert took < 1.0, f"{took:.2f} s of CPU"
    got = reasoning.Split(
        "".join(p.reasoning or "" for p in parts) or None, "".join(p.content or "" for p in parts) or None
    )
    assert got == reasoning.split(text, in_reasoning=in_reasoning)


class _Broken(tools.ToolCallStream):
    """A parser with a bug: it raises on the second delta."""

    def _step(self, final: bool) -> None:
        if len(self._buf) > 3:
            raise RuntimeError("a parser bug")


def test_a_parser_that_raises_turns_the_rest_of_the_output_into_content(monkeypatch):
    monkeypatch.setitem(tools.STREAMS, "hermes", _Broken)
    plan = OutputPlan(tool_parser="hermes", tool_names=NAMES)
    s = OutputStream(plan)
    out = s.feed("ab") + s.feed("cd") + s.feed("ef") + s.finish()
    assert "".join(d.get("content") or "" for d in out) == "abcdef"
    msg = assistant.message(plan, "abcdef")
    assert msg["content"] == "abcdef" and "tool_calls" not in msg


def test_the_assistant_message_of_hostile_output_is_content():
    plan = OutputPlan(tool_parser="llama3_json", tool_names=NAMES, reasoning="qwen3")
    text = '{"name": "f", "parameters": {"a": ' + _deep(50_000) + "}}"
    msg = assistant.message(plan, "<think>hm</think>" + text)
    assert msg["content"] == text and msg["reasoning_content"] == "hm" and "tool_calls" not in msg


def test_pythonic_calls_beyond_the_limit_stay_text_as_written():
    text = "[f(a=1),\n  f(a='\u00e9\u4e2d'),\r\n f(b=[1,\n 2])]"
    parsed = tools.parse("llama3_pythonic", text, NAMES, new_id=_ids(), max_calls=1)
    assert [c.function.arguments for c in parsed.tool_calls] == ['{"a": 1}']
    assert parsed.content == "f(a='\u00e9\u4e2d'), f(b=[1,\n 2])"
