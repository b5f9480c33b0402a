"""The Responses API's pure parts (issue 37): the request (every field honoured, accepted or refused by name),
its chat form, the response object and the stream's events checked against the openai SDK's own types, and the
bounded per-pod store."""

from __future__ import annotations

import base64
import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from ovserve_runtime.openai.errors import ApiError
from ovserve_runtime.openai.request import RequestError
from ovserve_runtime.openai.responses_output import Events, Output, response, usage
from ovserve_runtime.openai.responses_request import parse_responses, to_chat
from ovserve_runtime.responsestore import ResponseStore
from pydantic import TypeAdapter

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def req(**fields):
    return parse_responses(json.dumps({"input": "hi", **fields}).encode())


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"bogus": 1}, "bogus", "unknown_parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools", "unsupported_value"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools", "unsupported_value"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice", "unsupported_value"),
        ({"conversation": "conv_1"}, "conversation", "unsupported_value"),
        ({"background": True}, "background", "unsupported_value"),
        ({"truncation": "auto"}, "truncation", "unsupported_value"),
        ({"include": ["message.output_text.logprobs"]}, "include", "unsupported_value"),
        ({"text": {"verbosity": "high"}}, "text.verbosity", "unsupported_value"),
        ({"max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
        ({"temperature": 3}, "temperature", "invalid_value"),
        ({"stream_options": {"include_obfuscation": False}}, "stream_options", "stream_options"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "unsupported_value"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input", "unsupported_value"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content", None),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text", None),
        ({"input": []}, "input", None),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", None),
    ],
)
def test_refusals_name_the_field(fields, param, code):
    with pytest.raises(RequestError) as exc:
        req(**fields)
    assert exc.value.param == param, exc.value.message
    if code not in (None, "stream_options"):
        assert exc.value.code == code


def test_accepted_without_effect():
    r = req(
        metadata={"k": "v"},
        store=False,
        service_tier="auto",
        user="u",
        safety_identifier="s",
        prompt_cache_key="p",
        include=["reasoning.encrypted_content", "file_search_call.results"],
        reasoning={"effort": "low", "summary": "auto"},
        stream=True,
        stream_options={"include_obfuscation": True},
        truncation="disabled",
    )
    assert not r.stores and r.encrypted_reasoning


def test_the_chat_form_of_a_tool_round_trip():
    r = req(
        instructions="be brief",
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        tools=[TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=9,
        text={"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}},
    )
    chat = to_chat(r)
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "tool"]
    turn = chat.messages[2]
    assert turn.reasoning_content == "hmm" and turn.tool_calls[0].id == "c1"
    assert chat.messages[3].tool_call_id == "c1"
    assert chat.tools[0].function.name == "get_weather" and chat.tool_choice.function.name == "get_weather"
    assert (chat.parallel_tool_calls, chat.max_completion_tokens) == (False, 9)
    assert chat.response_format.json_schema.schema_ == {"type": "object"}


def test_ignore_eos_is_a_vendor_field_passed_to_the_chat_request():
    # vLLM's name, as chat and completions take it: a benchmark generates exactly max_output_tokens
    chat = to_chat(req(max_output_tokens=64, ignore_eos=True, stream=True))
    assert (chat.ignore_eos, chat.max_completion_tokens, chat.stream) == (True, 64, True)
    assert to_chat(req()).ignore_eos is None
    with pytest.raises(RequestError) as exc:
        req(ignore_eos="yes")
    assert exc.value.param == "ignore_eos"


def test_a_developer_message_is_a_system_message_for_the_chat_template():
    # Codex sends its instructions as developer messages; Qwen's templates render system and drop developer
    chat = to_chat(req(input=[{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]))
    assert [m.role for m in chat.messages] == ["system", "user"]
    assert chat.messages[0].content[0].text == "be brief"


def test_history_comes_first():
    history = parse_responses(json.dumps({"input": "first"}).encode()).input
    chat = to_chat(req(input="second"), history)
    assert [m.content[0].text for m in chat.messages] == ["first", "second"]


def test_encrypted_reasoning_round_trips():
    out = Output(encrypted_reasoning=True)
    out.add_message({"reasoning_content": "thought", "content": "answer"})
    item = out.items[0]
    assert base64.b64decode(item["encrypted_content"]).decode() == "thought"
    back = req(
        input=[
            {"role": "user", "content": "q"},
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": item["encrypted_content"]},
        ]
    )
    assert to_chat(back).messages[1].reasoning_content == "thought"


@pytest.mark.parametrize(
    ("message", "finish", "types", "status"),
    [
        ({"content": "hello"}, "stop", ["message"], "completed"),
        ({"content": "hel"}, "length", ["message"], "incomplete"),
        ({"reasoning_content": "r", "content": "a"}, "stop", ["reasoning", "message"], "completed"),
        (
            {
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            "tool_calls",
            ["function_call"],
            "completed",
        ),
    ],
)
def test_the_response_object_is_what_the_sdk_reads(message, finish, types, status):
    out = Output()
    out.add_message(message, "incomplete" if finish == "length" else "completed")
    obj = response("resp_1", 7, "m", req(tools=[TOOL]), out, status=status, usage_=usage(3, 4, 1))
    r = Response.model_validate(obj)
    assert [o.type for o in r.output] == types and r.status == status
    assert r.output_text == (message.get("content") or "")
    if status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"


def _events(data: bytes) -> list:
    ta = TypeAdapter(ResponseStreamEvent)
    out = []
    for block in data.decode().strip().split("\n\n"):
        head, body = block.split("\n")
        e = ta.validate_python(json.loads(body.removeprefix("data: ")))
        assert head == f"event: {e.type}"
        out.append(e)
    return out


def test_a_stream_is_typed_ordered_and_its_deltas_make_the_final_object():
    ev = Events("resp_1", 5, "m", req(tools=[TOOL]), lambda o: usage(3, 7, 2))
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"P"}'},
    }
    data = b"".join(
        [
            ev.first(),
            ev.fields({"reasoning_content": "thin"}),
            ev.fields({"reasoning_content": "king"}),
            ev.text("Hel"),
            ev.delta("lo"),
            ev.fields({"tool_calls": [call]}),
            ev.finish("tool_calls"),
            ev.usage({}),
            ev.done(),
        ]
    )
    events = _events(data)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    final = events[-1].response
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text == "Hello"
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "thinking"
    args = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args[0].arguments == final.output[2].arguments == '{"city":"P"}'
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3


def test_a_cut_stream_is_incomplete_and_a_failed_one_ends_with_failed():
    ev = Events("resp_1", 5, "m", req(), lambda o: usage(1, 2))
    events = _events(ev.first() + ev.text("ab") + ev.finish("length") + ev.usage({}))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    ev = Events("resp_2", 5, "m", req(), lambda o: usage(1, 2))
    err = ApiError(503, "the pipeline failed", "server_error", code="pipeline_failed")
    events = _events(ev.first() + ev.text("ab") + ev.error(err) + ev.usage({}))
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "server_error"
    assert events[-1].response.error.message.startswith("pipeline_failed: ")


def test_the_store_is_bounded_in_entries_bytes_and_age():
    now = [0.0]
    store = ResponseStore(max_entries=2, max_bytes=10_000, ttl_s=60, clock=lambda: now[0])
    for rid in ("a", "b", "c"):
        assert store.put(rid, {"id": rid}, [{"role": "user", "content": rid}])
    assert store.get("a") is None and store.get("b") and store.get("c")  # oldest dropped
    now[0] = 61
    assert store.get("b") is None and len(store) == 0 and store.bytes == 0  # expired
    assert not store.put("big", {"id": "big", "text": "x" * 20_000}, [])  # larger than the store: not kept
    assert store.put("d", {"id": "d"}, []) and store.delete("d") and not store.delete("d")
    small = ResponseStore(max_entries=100, max_bytes=200, ttl_s=60, clock=lambda: now[0])
    for i in range(10):
        small.put(str(i), {"id": str(i), "t": "x" * 40}, [])
    assert small.bytes <= 200 and small.get("9") and small.get("0") is None


def test_every_responses_field_is_in_the_support_table_and_the_docs_are_generated():
    from pathlib import Path

    from ovserve_runtime.openai import responses_support

    assert responses_support.request_fields() - responses_support.covered() == set()
    assert responses_support.covered() - responses_support.request_fields() == set()
    doc = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"
    text = doc.read_text()
    assert responses_support.DOCS.render_into(text) == text, (
        "docs/runtime.md drifted: python -m ovserve_runtime.openai.responses_support --write docs/runtime.md"
    )


@pytest.mark.parametrize("blob", ["®@~", base64.b64encode(b"\xff\xfe").decode(), "not base64!"])
def test_another_servers_encrypted_reasoning_is_opaque_not_a_500(blob):
    """The fuzzer sent "®@~": b64decode raised ValueError on non-ASCII text, a 500 (issue 38)."""
    r = req(
        input=[
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": blob},
            {"role": "user", "content": "q"},
        ]
    )
    assert [m.role for m in to_chat(r).messages] == ["user"]
