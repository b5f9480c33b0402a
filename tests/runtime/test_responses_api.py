"""The Responses API (issue 37) on a real ovserve-runtime through the real openai client: create, stream, parse
with a Pydantic model, a function tool round trip with function_call_output and previous_response_id, GET and
DELETE of stored responses, a missing previous_response_id as 404 naming it, built-in tools refused by name, and
the reasoning controls reaching the chat template (tiny-qwen3-hybrid: hermes tools, qwen3 reasoning, enable_thinking).
"""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from .test_http import client, post

pytestmark = pytest.mark.runtime

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


class Order(BaseModel):
    color: Literal["red", "green", "blue"]
    count: int = Field(ge=1, le=9)


@pytest.fixture(scope="module")
def thinker(chat_models, server_factory):
    return server_factory(chat_models / "tiny-qwen3-hybrid", "--served-name", "thinker")


def test_create_answers_a_response_object(thinker):
    r = client(thinker, "/v1").responses.create(model="thinker", input="hello", max_output_tokens=12)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete") and r.usage.output_tokens >= 1
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "".join(p.text for o in r.output if o.type == "message" for p in o.content)


def test_a_stream_ends_with_the_object_its_deltas_make(thinker):
    with client(thinker, "/v3").responses.stream(model="thinker", input="tell me", max_output_tokens=24) as stream:
        events = list(stream)
    final = events[-1].response  # completed, or incomplete when cut (get_final_response wants completed only)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    items = [o for o in final.output if o.type == "reasoning"]
    assert reasoning == "".join(p.text for o in items for p in o.content or ())


def test_parse_gives_a_pydantic_object(thinker):
    r = client(thinker, "/v1").responses.parse(
        model="thinker",
        input="an order",
        text_format=Order,
        max_output_tokens=48,
        reasoning={"effort": "none"},  # no thinking before the JSON
    )
    assert isinstance(r.output_parsed, Order), r.output_text


def test_a_function_tool_round_trip_through_previous_response_id(thinker):
    c = client(thinker, "/v1")
    first = c.responses.create(
        model="thinker",
        input="weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        reasoning={"effort": "none"},
        max_output_tokens=256,  # the tiny tokenizer's tokens are short: a call takes ~70
    )
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments)["city"] in ("Paris", "Oslo")
    second = c.responses.create(
        model="thinker",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}],
        tools=[WEATHER],
        max_output_tokens=8,
    )
    assert second.previous_response_id == first.id and second.status in ("completed", "incomplete")
    # the second turn's prompt holds the first turn and the call's output: more input tokens than the first
    assert second.usage.input_tokens > first.usage.input_tokens
    assert c.responses.retrieve(second.id).id == second.id
    c.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(second.id)


def test_a_missing_previous_response_is_404_never_a_fresh_start(thinker):
    with pytest.raises(openai.NotFoundError) as exc:
        client(thinker, "/v1").responses.create(model="thinker", input="go on", previous_response_id="resp_nope")
    assert exc.value.body["param"] == "previous_response_id"
    unstored = client(thinker, "/v1").responses.create(model="thinker", input="x", store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client(thinker, "/v1").responses.create(model="thinker", input="y", previous_response_id=unstored.id)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"truncation": "auto"}, "truncation"),
        ({"max_output_token": 5}, "max_output_token"),
        (
            {"text": {"format": {"type": "json_schema", "name": "h", "schema": {"type": "integer", "maximum": 1e400}}}},
            "text.format",
        ),
    ],
)
def test_refusals_name_the_field(thinker, fields, param):
    status, err = post(thinker, "/v1/responses", {"model": "thinker", "input": "x", **fields})
    assert (status, err["error"]["param"]) == (400, param), err


def test_every_refusal_is_logged_and_counted(thinker):
    """A platform team sees which field a client tripped on (issue 37): a log line and a metric per 4xx."""
    before = thinker.metric("ovserve_refusals_total", 'code="unknown_parameter",param="(unknown field)"')
    status, err = post(
        thinker, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_token": 3}
    )
    assert status == 400 and err["error"]["param"] == "max_token"
    status, _ = post(thinker, "/v1/responses", {"input": "x", "reasoning": {"effort": "loud"}})
    assert status == 400
    after = thinker.metric("ovserve_refusals_total", 'code="unknown_parameter",param="(unknown field)"')
    assert after == before + 1
    assert thinker.metric("ovserve_refusals_total", 'status="400",param="reasoning.effort"') >= 1
    log = thinker.log.read_text()
    assert "refused POST /v1/chat/completions: 400 code=unknown_parameter param=max_token" in log
    assert '"x"' not in log.split("refused POST /v1/chat/completions")[-1][:200]  # never the body


def test_reasoning_effort_switches_the_template(thinker, cb_server):
    c = client(thinker, "/v1")
    off = c.responses.create(model="thinker", input="hi", reasoning={"effort": "none"}, max_output_tokens=2)
    on = c.responses.create(model="thinker", input="hi", reasoning={"effort": "high"}, max_output_tokens=2)
    # Qwen3's template writes an empty <think></think> into the prompt when thinking is off
    assert off.usage.input_tokens > on.usage.input_tokens
    chat = client(thinker).chat.completions.create(
        model="thinker",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert chat.usage.prompt_tokens == off.usage.input_tokens
    assert thinker.status()["capabilities"]["thinkingSwitch"] == "enable_thinking"
    # a template without a thinking switch refuses an effort by name
    model = cb_server.status()["model"]
    status, err = post(
        cb_server,
        "/v3/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low"},
    )
    assert (status, err["error"]["param"]) == (400, "reasoning_effort"), err
    status, err = post(cb_server, "/v1/responses", {"model": model, "input": "x", "reasoning": {"effort": "low"}})
    assert (status, err["error"]["param"]) == (400, "reasoning.effort"), err


def test_a_developer_message_reaches_a_template_that_only_knows_system(thinker):
    """Qwen's templates render system, user, assistant and tool only: a developer message went missing silently."""
    c = client(thinker)
    asked = [
        c.chat.completions.create(
            model="thinker",
            messages=[{"role": role, "content": "be brief " * 20}, {"role": "user", "content": "x"}],
            max_tokens=1,
        ).usage.prompt_tokens
        for role in ("developer", "system")
    ]
    assert asked[0] == asked[1] > 40
