"""The assistant's turn (ovserve_runtime.openai.assistant): parsers chosen from flags and chat template, the
per-request plan (tool_choice none/auto/required/named, parallel calls, reasoning), and the output as a message
or as stream deltas, with its finish_reason."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from ovserve_runtime.grammars import build_job
from ovserve_runtime.openai import assistant, grammar
from ovserve_runtime.openai.assistant import OutputPlan, Parsers, ToolError
from ovserve_runtime.openai.tools import Function

HERMES_TEMPLATE = "{% if tools %}{{ tools | tojson }} <tool_call></tool_call>{% endif %}"
THINK_TEMPLATE = HERMES_TEMPLATE + "{{ '<|im_start|>assistant\\n<think>\\n' }}"
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
WEATHER = Function(name="get_weather", parameters={"type": "object", "properties": {"city": {"enum": ["Paris"]}}})
NOW = Function(name="now")
HERMES = Parsers(tool="hermes", renders_tools=True)
QWEN3 = Parsers(tool="hermes", reasoning="qwen3", renders_tools=True)


def ids():
    n = itertools.count()
    return lambda: f"call_{next(n)}"


@pytest.mark.parametrize(
    ("tool_flag", "reasoning_flag", "template", "tool", "rsn", "sources"),
    [
        ("AUTO", "AUTO", HERMES_TEMPLATE, "hermes", None, ("automatic", "automatic")),
        ("AUTO", "AUTO", THINK_TEMPLATE, "hermes", "qwen3", ("automatic", "automatic")),
        ("AUTO", "AUTO", PLAIN_TEMPLATE, None, None, ("automatic", "automatic")),
        ("AUTO", "AUTO", None, None, None, ("automatic", "automatic")),
        ("none", "none", THINK_TEMPLATE, None, None, ("requested", "requested")),
        ("llama3_json", "deepseek_r1", PLAIN_TEMPLATE, "llama3_json", "deepseek_r1", ("requested", "requested")),
    ],
)
def test_resolve_parsers(tool_flag, reasoning_flag, template, tool, rsn, sources):
    p = assistant.resolve_parsers(tool_flag, reasoning_flag, template)
    assert (p.tool, p.reasoning, (p.tool_source, p.reasoning_source)) == (tool, rsn, sources)


@pytest.mark.parametrize(
    ("parsers", "functions", "choice", "parallel", "param", "message"),
    [
        (HERMES, None, "required", None, "tool_choice", "needs tools"),
        (HERMES, [], {"type": "function", "function": {"name": "now"}}, None, "tool_choice", "needs tools"),
        (HERMES, [NOW], {"type": "function", "function": {"name": "later"}}, None, "tool_choice", "not one of"),
        (Parsers(), [NOW], "auto", None, "tools", "does not render tools"),
        (Parsers(renders_tools=True), [NOW], None, None, "tools", "tool calling is off"),
        (HERMES, [Function(name="bad name")], "required", True, "tools", "cannot force"),
    ],
)
def test_requests_the_model_cannot_serve_are_refused_by_field(parsers, functions, choice, parallel, param, message):
    with pytest.raises(ToolError, match=message) as exc:
        assistant.plan(parsers, functions, choice, parallel)
    assert exc.value.param == param


@pytest.mark.parametrize(
    ("parsers", "functions", "choice", "parallel", "parser", "forced", "render"),
    [
        (HERMES, None, None, None, None, False, False),
        (HERMES, [NOW], None, None, "hermes", False, True),  # tools without tool_choice: auto
        (HERMES, [NOW], "auto", None, "hermes", False, True),
        (HERMES, [NOW], "none", None, None, False, False),  # none: no tools in the prompt, nothing parsed
        (Parsers(), [NOW], "none", None, None, False, False),  # none needs no tool support
        (HERMES, [NOW, WEATHER], "required", None, "hermes", True, True),
        (HERMES, [NOW, WEATHER], {"type": "function", "function": {"name": "now"}}, True, "hermes", True, True),
        (Parsers(tool="llama3_pythonic", renders_tools=True), [NOW], "required", False, "llama3_json", True, True),
    ],
)
def test_plan(parsers, functions, choice, parallel, parser, forced, render):
    p = assistant.plan(parsers, functions, choice, parallel)
    assert (p.tool_parser, p.forced is not None, p.render_tools) == (parser, forced, render)
    assert (p.grammar_job() is not None) is forced


def _regex(p) -> str:
    return build_job(p.grammar_job(), grammar.Limits())["regex"]


def test_forced_grammar_admits_only_the_named_function_and_one_call():
    p = assistant.plan(HERMES, [NOW, WEATHER], {"type": "function", "function": {"name": "now"}}, True)
    one = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    rx = _regex(p)
    assert re.fullmatch(rx, one) and not re.fullmatch(rx, one + "\n" + one)
    assert not re.fullmatch(rx, one.replace("now", "get_weather"))


def test_forced_call_after_an_opened_think_closes_it_first():
    p = assistant.plan(QWEN3, [NOW], "required", False).for_prompt("<|im_start|>assistant\n<think>\n")
    assert p.in_reasoning
    out = '</think>\n\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert re.fullmatch(_regex(p), out)
    msg = assistant.message(p, out, new_id=ids())
    assert msg == {
        "role": "assistant",
        "content": None,
        "reasoning_content": None,
        "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "now", "arguments": "{}"}}],
    }


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
PARIS_CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize(
    ("plan", "text", "want", "finish", "want_finish"),
    [
        (OutputPlan(), "Hello", {"content": "Hello"}, "stop", "stop"),
        (OutputPlan(), "", {"content": ""}, "stop", "stop"),
        (OutputPlan(), CALL, {"content": CALL}, "stop", "stop"),  # no tools in the request: text
        (OutputPlan(tool_parser="hermes"), CALL, {"content": None, "tool_calls": [PARIS_CALL]}, "stop", "tool_calls"),
        (
            OutputPlan(tool_parser="hermes"),
            "Sure. " + CALL,
            {"content": "Sure.", "tool_calls": [PARIS_CALL]},
            "stop",
            "tool_calls",
        ),
        (OutputPlan(tool_parser="hermes"), CALL[:30], {"content": CALL[:30]}, "length", "length"),  # cut: text
        (OutputPlan(tool_parser="hermes"), CALL, {"content": None, "tool_calls": [PARIS_CALL]}, "length", "length"),
        (
            OutputPlan(tool_parser="hermes", reasoning="qwen3", in_reasoning=True),
            "Weather needed.\n</think>\n\n" + CALL,
            {"content": None, "reasoning_content": "Weather needed.", "tool_calls": [PARIS_CALL]},
            "stop",
            "tool_calls",
        ),
        (
            OutputPlan(reasoning="qwen3", in_reasoning=True),
            "thinking " + CALL,  # a call inside the reasoning is reasoning
            {"content": None, "reasoning_content": "thinking " + CALL},
            "length",
            "length",
        ),
        (
            OutputPlan(reasoning="qwen3"),
            "<think>hm</think>Paris.",
            {"content": "Paris.", "reasoning_content": "hm"},
            "stop",
            "stop",
        ),
        (OutputPlan(reasoning="qwen3"), "Paris.", {"content": "Paris.", "reasoning_content": None}, "stop", "stop"),
    ],
)
def test_message_stream_and_finish_reason_agree(plan, text, want, finish, want_finish):
    msg = assistant.message(plan, text, new_id=ids())
    assert msg == {"role": "assistant", **want}
    for size in (1, 3, 7, len(text) or 1):
        stream = assistant.OutputStream(plan, new_id=ids())
        deltas = [d for i in range(0, len(text), size) for d in stream.feed(text[i : i + size])] + stream.finish()
        content = "".join(d.get("content") or "" for d in deltas)
        assert (content or None) == (want.get("content") or None)
        assert ("".join(d.get("reasoning_content") or "" for d in deltas) or None) == want.get("reasoning_content")
        calls = [c for d in deltas for c in d.get("tool_calls", ())]
        assert [{k: v for k, v in c.items() if k != "index"} for c in calls] == want.get("tool_calls", [])
        assert [c["index"] for c in calls] == list(range(len(calls)))
        assert all(json.loads(c["function"]["arguments"]) is not None for c in calls)
        assert all(len(d) == 1 and next(iter(d.values())) for d in deltas)  # one non-empty field per delta
        assert assistant.finish_reason(plan, finish, stream.calls) == want_finish


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ((0, "user"), {}),
        (
            (
                2,
                "assistant",
                [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            ),
            {"tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        ),
        (
            (2, "assistant", [{"id": "c", "function": {"name": "f", "arguments": ""}}]),
            {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]},
        ),
        ((3, "tool", None, "call_1"), {"tool_call_id": "call_1"}),
        ((1, "assistant", None, None, "hm"), {"reasoning_content": "hm"}),
        ((1, "user", None, None, "hm"), {}),
    ],
)
def test_template_fields(args, want):
    assert assistant.template_fields(*args) == want


@pytest.mark.parametrize(
    ("args", "param"),
    [
        (
            (2, "assistant", [{"id": "c", "function": {"name": "f", "arguments": "{"}}]),
            "messages[2].tool_calls[0].function.arguments",
        ),
        (
            (2, "assistant", [{}, {"id": "c", "function": {"name": "f", "arguments": "[1]"}}]),
            "messages[2].tool_calls[1].function.arguments",
        ),
        ((4, "tool"), "messages[4].tool_call_id"),
    ],
)
def test_template_fields_refused(args, param):
    with pytest.raises(ToolError) as exc:
        assistant.template_fields(*args)
    assert exc.value.param == param


def test_the_parsers_are_decisions():
    auto = assistant.decisions(assistant.resolve_parsers("AUTO", "AUTO", THINK_TEMPLATE))
    assert auto["toolParser"].model_dump(mode="json") == {
        "value": "hermes",
        "source": "automatic",
        "requested": None,
        "detail": "detected from the chat template (hermes)",
    }
    assert auto["reasoningParser"].value == "qwen3"
    asked = assistant.decisions(assistant.resolve_parsers("llama3_json", "none", PLAIN_TEMPLATE))
    assert (asked["toolParser"].value, asked["toolParser"].source, asked["toolParser"].requested) == (
        "llama3_json",
        "requested",
        "llama3_json",
    )
    assert "renders no tools" in asked["toolParser"].detail
    assert (asked["reasoningParser"].value, asked["reasoningParser"].requested) == ("none", "none")
    off = assistant.decisions(assistant.resolve_parsers("AUTO", "AUTO", PLAIN_TEMPLATE))
    assert off["toolParser"].value == "none" and off["toolParser"].detail == "the chat template renders no tools"


def test_parallel_calls_off_in_auto_keeps_the_first_call():
    p = assistant.plan(HERMES, [WEATHER, NOW], "auto", False)
    assert p.max_calls == 1 and assistant.plan(HERMES, [NOW], "auto", None).max_calls is None
    two = CALL + "\n" + '<tool_call>{"name": "now", "arguments": {}}</tool_call>'
    msg = assistant.message(p, two, new_id=ids())
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
    assert msg["content"] == '<tool_call>{"name": "now", "arguments": {}}</tool_call>'


@pytest.mark.parametrize("parallel", [True, False])
def test_a_forced_call_cut_at_max_tokens_leaves_no_markup_in_content(parallel):
    p = assistant.plan(HERMES, [NOW, WEATHER], "required", parallel)
    one = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    for cut in ("<tool_call>\n", '<tool_call>\n{"name": "get_weather", "argu', one + "\n<tool_call>\n{"):
        msg = assistant.message(p, cut, new_id=ids())
        assert not msg.get("content"), (cut, msg)  # before: '<tool_call>\n' stayed in content
        assert len(msg.get("tool_calls") or ()) == (1 if cut.startswith(one) else 0)
        stream = assistant.OutputStream(p, new_id=ids())
        deltas = [d for ch in cut for d in stream.feed(ch)] + stream.finish()
        assert not any(d.get("content") for d in deltas), deltas


@pytest.mark.parametrize(
    ("template", "kept"),
    [
        ("{% for m in messages %}{{ m.role }}{% endfor %}", False),  # Qwen/Llama-style: the role is never named
        ("{% if m.role == 'developer' %}dev{% endif %}", True),
        (None, True),  # no template: the transcript writes any role
    ],
)
def test_a_developer_message_goes_as_system_to_a_template_that_does_not_know_the_role(template, kept):
    from ovserve_runtime.openai import prompt
    from ovserve_runtime.openai.request import Message

    parsers = assistant.resolve_parsers("AUTO", "AUTO", template)
    assert parsers.developer_role is kept
    msgs = [Message.model_validate({"role": "developer", "content": "be brief"})]
    flat, _ = prompt.template_messages(msgs, False, 0, lambda url, param: None, parsers.developer_role)
    assert flat[0]["role"] == ("developer" if kept else "system")  # before: dropped by the template, silently


def test_deep_arguments_of_an_earlier_call_are_a_400_not_a_500():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ToolError, match="nest deeper") as exc:
        assistant.template_fields(2, "assistant", [{"id": "c", "function": {"name": "f", "arguments": deep}}])
    assert exc.value.param == "messages[2].tool_calls[0].function.arguments"
