"""The OpenAI protocol layer (ovserve_runtime.openai), pure: the support table against the request models, every
refusal naming its field, generation parameters, grammars, response and chunk builders, the watchdog."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ovserve_runtime.grammars import build_job
from ovserve_runtime.http.watchdog import Watchdog
from ovserve_runtime.openai import grammar, responses, support
from ovserve_runtime.openai.errors import ApiError
from ovserve_runtime.openai.request import ChatRequest, RequestError, ResponseFormat, parse
from ovserve_runtime.openai.sampling import generation_fields

ROOT = Path(__file__).resolve().parents[2]
MSG = [{"role": "user", "content": "hi"}]


def chat(**kw) -> bytes:
    return json.dumps({"messages": MSG, **kw}).encode()


def comp(**kw) -> bytes:
    return json.dumps({"prompt": "x", **kw}).encode()


# --- the support table -----------------------------------------------------------------------------


def test_every_request_field_is_in_the_support_table_and_no_row_names_a_missing_one():
    assert support.request_fields() - support.covered() == set(), "fields missing from support.FIELDS"
    assert support.covered() - support.request_fields() == set(), "rows naming no request field"


def test_docs_table_is_generated_from_the_registry():
    text = (ROOT / "docs" / "runtime.md").read_text()
    assert support.DOCS.render_into(text) == text, (
        "docs/runtime.md drifted: python -m ovserve_runtime.openai.support --write docs/runtime.md"
    )


REFUSED = [
    # (chat, body, param) every refused field, with a value that would change the answer
    (True, chat(functions=[{"name": "f"}]), "functions"),
    (True, chat(function_call="auto"), "function_call"),
    (True, chat(messages=[*MSG, {"role": "function", "content": "r", "name": "f"}]), "messages[1].role"),
    (True, chat(messages=[{"role": "assistant", "content": "x", "function_call": {}}]), "messages[0].function_call"),
    (True, chat(messages=[{"role": "assistant", "content": "x", "refusal": "no"}]), "messages[0].refusal"),
    (True, chat(messages=[{"role": "assistant", "content": "x", "audio": {"id": "a"}}]), "messages[0].audio"),
    (
        True,
        chat(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
        "messages[0].content[0].type",
    ),
    (True, chat(messages=[{"role": "user", "content": [{"type": "file", "file": {}}]}]), "messages[0].content[0].type"),
    (True, chat(logit_bias={"50256": -100}), "logit_bias"),
    (False, comp(logit_bias={"1": 5}), "logit_bias"),
    (True, chat(top_logprobs=2), "top_logprobs"),
    (False, comp(logprobs=1), "logprobs"),
    (True, chat(modalities=["text", "audio"]), "modalities"),
    (True, chat(audio={"voice": "alloy", "format": "wav"}), "audio"),
    (True, chat(prediction={"type": "content", "content": "x"}), "prediction"),
    (False, comp(chat_template_kwargs={"enable_thinking": False}), "chat_template_kwargs"),  # no template applied
    (True, chat(verbosity="low"), "verbosity"),
    (True, chat(web_search_options={}), "web_search_options"),
    (True, chat(stream=True, stream_options={"include_obfuscation": True}), "stream_options.include_obfuscation"),
    (False, comp(echo=True), "echo"),
    (False, comp(best_of=2), "best_of"),
    (False, comp(suffix="s"), "suffix"),
]


@pytest.mark.parametrize(("is_chat", "body", "param"), REFUSED)
def test_refused_fields_are_named(is_chat, body, param):
    with pytest.raises(RequestError) as ei:
        parse(body, is_chat)
    assert (ei.value.param, ei.value.code) == (param, "unsupported_value"), ei.value.message


@pytest.mark.parametrize(
    ("is_chat", "body", "param"),
    [
        (True, chat(max_token=5), "max_token"),
        (False, comp(guided_json={}), "guided_json"),
        (True, chat(messages=[{"role": "user", "content": "x", "extra": 1}]), "messages[0].extra"),
        (True, chat(stream=True, stream_options={"include_usage": True, "x": 1}), "stream_options.x"),
        (True, chat(response_format={"type": "json_object", "x": 1}), "response_format.x"),
        (False, comp(response_format={"type": "json_object"}), "response_format"),  # not a completions field
    ],
)
def test_unknown_fields_are_refused_by_name(is_chat, body, param):
    with pytest.raises(RequestError) as ei:
        parse(body, is_chat)
    assert (ei.value.param, ei.value.code) == (param, "unknown_parameter")


@pytest.mark.parametrize(
    "body",
    [
        chat(tools=[], tool_choice="none", parallel_tool_calls=False, functions=[], function_call="none"),
        chat(logit_bias={}, logprobs=False, top_logprobs=0, modalities=["text"], store=False, user="u"),
        chat(metadata={"k": "v"}, service_tier="auto", prompt_cache_key="k", safety_identifier="s"),
        chat(messages=[{"role": "assistant", "content": "x", "refusal": None, "tool_calls": None, "name": "n"}]),
        chat(stream=True, stream_options={"include_usage": True, "include_obfuscation": False}),
        chat(response_format={"type": "text"}),
        chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": True}}),
        chat(min_p=0.1, min_tokens=3, top_k=5, repetition_penalty=1.1, ignore_eos=True),
    ],
)
def test_neutral_values_are_accepted(body):
    assert isinstance(parse(body, True), ChatRequest)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(response_format={"type": "xml"}), "response_format.type"),
        (chat(response_format={"type": "json_schema"}), "response_format"),
        (
            chat(response_format={"type": "json_schema", "json_schema": {"name": "a b"}}),
            "response_format.json_schema.name",
        ),
        (
            chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": []}}),
            "response_format.json_schema.schema",
        ),
    ],
)
def test_bad_response_formats_name_their_field(body, param):
    with pytest.raises(RequestError) as ei:
        parse(body, True)
    assert ei.value.param == param


def test_a_pipeline_without_logprobs_refuses_them_by_name():
    body = parse(chat(logprobs=True), True)
    support.check(body, support.PipelineSupport(structured_output=True, images=False, logprobs=True))
    with pytest.raises(ApiError) as ei:
        support.check(body, support.PipelineSupport(structured_output=True, images=False, logprobs=False))
    assert (ei.value.status, ei.value.param) == (400, "logprobs")
    assert generation_fields(body, 3)["logprobs"] == 1


def test_a_pipeline_without_structured_output_refuses_it_by_name():
    body = parse(chat(response_format={"type": "json_object"}), True)
    support.check(body, support.PipelineSupport(structured_output=True, images=False))
    with pytest.raises(ApiError) as ei:
        support.check(body, support.PipelineSupport(structured_output=False, images=True))
    assert (ei.value.status, ei.value.param) == (400, "response_format.type")
    support.check(parse(chat(response_format={"type": "text"}), True), support.PipelineSupport(False, True))


# --- generation parameters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (chat(), {"max_new_tokens": 7, "do_sample": False}),
        (chat(seed=3, top_k=4, min_p=0.2), {"max_new_tokens": 7, "do_sample": False}),  # greedy: no sampling knobs
        (
            chat(temperature=0.5, top_p=0.9, top_k=4, min_p=0.2, seed=3),
            {
                "max_new_tokens": 7,
                "do_sample": True,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 4,
                "min_p": 0.2,
                "rng_seed": 3,
            },
        ),
        (
            chat(presence_penalty=1, frequency_penalty=-1, repetition_penalty=1.2, stop=["a"], ignore_eos=True),
            {
                "max_new_tokens": 7,
                "do_sample": False,
                "presence_penalty": 1.0,
                "frequency_penalty": -1.0,
                "repetition_penalty": 1.2,
                "stop_strings": {"a"},
                "ignore_eos": True,
            },
        ),
        (chat(min_tokens=3), {"max_new_tokens": 7, "do_sample": False, "min_new_tokens": 3}),
        (chat(min_tokens=30), {"max_new_tokens": 7, "do_sample": False, "min_new_tokens": 7}),
    ],
)
def test_generation_fields(body, expected):
    assert generation_fields(parse(body, True), 7) == expected


# --- grammars --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0, 9), (0, 100), (1, 12), (-5, 5), (-123, -7), (7, 7), (0, 0), (99, 1000), (-1000, 1000), (13, 98765)],
)
def test_int_range_regex_matches_exactly_the_range(lo, hi):
    rx = re.compile(grammar.int_range_regex(lo, hi))
    for n in range(lo - 1500, hi + 1500):
        assert bool(rx.fullmatch(str(n))) == (lo <= n <= hi), (lo, hi, n)
    assert not rx.fullmatch("-0") and not rx.fullmatch("01") and not rx.fullmatch("+1")


SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green"]},
        "ok": {"type": "boolean"},
        "count": {"type": "integer", "minimum": 1, "maximum": 12},
        "name": {"type": "string", "maxLength": 4},
    },
    "required": ["color", "ok", "count", "name"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "fits"),
    [
        ('{"color":"red","ok":true,"count":12,"name":"abcd"}', True),
        ('{"color":"green","ok":false,"count":1,"name":""}', True),
        ('{"color":"red","ok":true,"count":13,"name":"a"}', False),  # over maximum
        ('{"color":"red","ok":true,"count":0,"name":"a"}', False),  # under minimum
        ('{"color":"red","ok":true,"count":2,"name":"abcde"}', False),  # over maxLength
        ('{"color":"blue","ok":true,"count":2,"name":"a"}', False),
        ('{"color": "red","ok":true,"count":2,"name":"a"}', False),  # compact: no whitespace
    ],
)
def test_schema_regex_is_compact_and_bounded(text, fits):
    assert bool(re.fullmatch(grammar.schema_regex(SCHEMA), text)) == fits


def test_invalid_schemas_are_grammar_errors():
    with pytest.raises(grammar.GrammarError):
        grammar.schema_regex({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})
    with pytest.raises(grammar.GrammarError):
        grammar.schema_regex({"type": "integer", "minimum": 5, "maximum": 1})


def test_constraint_per_format():
    assert grammar.constraint(None) is None
    assert grammar.constraint(ResponseFormat(type="text")) is None
    assert grammar.constraint(ResponseFormat(type="json_object")) == {"grammar": grammar.JSON_OBJECT_EBNF}
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}})
    job = grammar.constraint(fmt)  # a json_schema is built off the loop, in the grammar worker
    assert isinstance(job, grammar.GrammarJob) and job.param == "response_format"
    assert set(build_job(job, grammar.Limits())) == {"regex"}


# --- responses -------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_chat", [True, False])
def test_the_fast_text_chunk_is_the_built_one(is_chat):
    c = responses.Chunks("id1", is_chat, "m", 5, include_usage=True)
    for text in ["a", 'q"uote\\', "ünï\n", ""]:
        assert c.text(text) == c.delta(text)
        payload = json.loads(c.text(text)[len(b"data: ") :])
        assert payload["usage"] is None and payload["model"] == "m"
    assert json.loads(c.usage(responses.usage(3, 4))[6:])["usage"]["total_tokens"] == 7
    assert c.first() == (c.delta("", role=True) if is_chat else b"")


# --- the liveness watchdog -------------------------------------------------------------------------


class G:
    def __init__(self) -> None:
        self.generated = 0


def test_watchdog_fires_only_without_progress():
    w = Watchdog(stall_s=10)
    a, b = G(), G()
    assert w.check(0, [], None) is None
    assert w.check(1, [a], None) is None
    assert w.check(10.5, [a], None) is None  # 9.5 s without a token
    assert w.check(11.5, [a], None) is not None  # 10.5 s
    a.generated = 1
    assert w.check(12, [a], None) is None  # a token: progress
    assert w.check(21, [a, b], None) is None
    assert "2 generations" in w.check(23, [a, b], None)  # a new arrival is not progress
    assert w.check(24, [b], None) is None  # one ended: progress
    assert w.check(30, [b], step_s=1.0) is None  # 50 step times: the bound is 50 s
    assert w.check(80, [b], step_s=1.0) is not None
    assert w.check(81, [], None) is None


CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_a_tool_conversation_parses():
    body = parse(
        chat(
            messages=[
                *MSG,
                {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "hm"},
                {"role": "tool", "content": "r", "tool_call_id": "call_1"},
            ],
            tools=[TOOL],
            tool_choice={"type": "function", "function": {"name": "f"}},
            parallel_tool_calls=False,
        ),
        True,
    )
    assert body.tools[0].function.name == "f" and body.tool_choice.function.name == "f"
    assert body.messages[1].tool_calls[0].function.arguments == '{"a": 1}'
    assert body.messages[2].tool_call_id == "call_1"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            chat(messages=[*MSG, {"role": "assistant", "tool_calls": [{"id": "1"}]}]),
            "messages[1].tool_calls[0].function",
            "missing_required_parameter",
        ),
        (
            chat(messages=[*MSG, {"role": "user", "content": "x", "tool_calls": [CALL]}]),
            "messages[1].tool_calls",
            "invalid_value",
        ),
        (
            chat(messages=[{"role": "user", "content": "x", "tool_call_id": "1"}]),
            "messages[0].tool_call_id",
            "invalid_value",
        ),
        (chat(messages=[*MSG, {"role": "tool", "content": "r"}]), "messages[1].tool_call_id", "invalid_value"),
        (
            chat(messages=[{"role": "user", "content": "x", "reasoning_content": "r"}]),
            "messages[0].reasoning_content",
            "invalid_value",
        ),
        (chat(tools=[{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name", "invalid_value"),
        (chat(tools=[{"type": "retrieval"}]), "tools[0].type", "invalid_value"),
        (chat(tools=[TOOL, TOOL]), "tools", "invalid_value"),
        (chat(tool_choice="any"), "tool_choice", "invalid_value"),
    ],
)
def test_invalid_tool_fields_are_named(body, param, code):
    with pytest.raises(RequestError) as ei:
        parse(body, True)
    assert (ei.value.param, ei.value.code) == (param, code), ei.value.message


@pytest.mark.parametrize(
    ("fields", "structured", "param"),
    [
        ({"tools": [TOOL], "tool_choice": "required"}, False, "tool_choice"),  # a VLM: no constrained decoding
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}}, False, "tool_choice"),
        (
            {"tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}},
            True,
            "response_format",
        ),
        ({"tools": [TOOL], "tool_choice": "auto"}, False, None),
        ({"tools": [TOOL], "tool_choice": "required"}, True, None),
        ({"tools": [TOOL], "response_format": {"type": "json_object"}}, True, None),  # auto + JSON: no conflict
    ],
)
def test_forced_calls_need_constrained_decoding_and_no_other_constraint(fields, structured, param):
    body = parse(chat(**fields), True)
    pipeline = support.PipelineSupport(structured_output=structured, images=not structured)
    if param is None:
        support.check(body, pipeline)
        return
    with pytest.raises(ApiError) as ei:
        support.check(body, pipeline)
    assert (ei.value.status, ei.value.param) == (400, param)


def test_tool_turns_reach_the_template_input_and_a_failing_template_is_a_400():
    from ovserve_runtime.openai import prompt

    body = parse(
        chat(
            messages=[
                *MSG,
                {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "hm"},
                {"role": "tool", "content": [{"type": "text", "text": "r"}], "tool_call_id": "call_1"},
            ]
        ),
        True,
    )
    flat, _ = prompt.template_messages(body.messages, False, 0, lambda url, param: None)
    assert flat[1] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "hm",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
    }
    assert flat[2] == {"role": "tool", "content": "r", "tool_call_id": "call_1"}
    assert prompt.tool_turn(body.messages) == 1 and prompt.tool_turn(parse(chat(), True).messages) is None

    def broken(messages, add_generation_prompt, tools=None):
        raise RuntimeError("Jinja: unknown filter\nitems")

    assert prompt.render(broken, flat[:1]) == "user: hi\nassistant:"  # no template, no tools: a transcript
    for kw in ({"tools": [TOOL]}, {"with_tools": True}):
        with pytest.raises(ApiError) as ei:
            prompt.render(broken, flat, **kw)
        assert (ei.value.status, ei.value.param) == (400, "messages") and "items" in ei.value.message


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["hello wor", "ld"], ["wor"], "hello "),
        (["ab", "cd", "ef"], ["de"], "abc"),
        (["ab", "cd", "ef"], ["x"], "abcdef"),
        (["a question", " more"], ["sti"], "a que"),  # inside one token's text
        (["xy", "z"], ["yz", "zz", "q"], "x"),
        (["", "abc"], ["c"], "ab"),
    ],
)
def test_stop_cut_streams_the_text_before_the_first_stop(pieces, stops, expected):
    from ovserve_runtime.openai.stops import StopCut, cut

    c = StopCut(stops)
    out = "".join(c.feed(p) for p in pieces) + c.flush()
    assert out == expected == cut("".join(pieces), stops)
