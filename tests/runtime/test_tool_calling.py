"""Tool calling and reasoning through the real runtime, with the openai client, on tiny models whose chat
templates are real ones (hack/models/chat): the full tool loop streamed and not, forced calls whose arguments
are valid JSON fitting the schema from random weights, reasoning that never reaches content, and refusals."""

from __future__ import annotations

import json

import openai
import pytest

pytestmark = pytest.mark.runtime

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 5},
                "alerts": {"type": "boolean"},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
NOW = {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object"}}}
TOOLS = [WEATHER, NOW]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_call(call) -> dict:
    """A tool call of the OpenAI shape whose arguments are valid JSON fitting its function's schema."""
    assert call.type == "function" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict)
    if call.function.name == "get_weather":
        assert set(args) <= {"city", "unit", "days", "alerts"} and {"city", "unit"} <= set(args)
        assert args["unit"] in ("celsius", "fahrenheit")
        assert len(args["city"]) <= 10 or "\ufffd" in args["city"]  # see test_chat_models: overlong UTF-8
        assert 1 <= args.get("days", 1) <= 5 and isinstance(args.get("alerts", True), bool)
    else:
        assert call.function.name == "now"
    return args


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def stream_turn(c: openai.OpenAI, **kw):
    """One streamed request, gathered: (content, reasoning, {index: call dict}, finish_reason, deltas)."""
    content, reasoning, calls, finish, deltas = "", "", {}, None, []
    for chunk in c.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        deltas.append(ch.delta)
        content += ch.delta.content or ""
        reasoning += getattr(ch.delta, "reasoning_content", None) or ""
        for tc in ch.delta.tool_calls or ():
            got = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            got["id"] = got["id"] or tc.id
            got["name"] += tc.function.name or ""
            got["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    return content, reasoning, calls, finish, deltas


@pytest.fixture(scope="module")
def qwen(chat_models, server_factory):
    return server_factory(chat_models / "tiny-qwen25", "--served-name", "qwen")


@pytest.fixture(scope="module")
def llama(chat_models, server_factory):
    return server_factory(chat_models / "tiny-llama31", "--served-name", "llama")


@pytest.fixture(scope="module")
def pythonic(chat_models, server_factory):
    return server_factory(chat_models / "tiny-llama32", "--served-name", "pythonic")


@pytest.fixture(scope="module")
def legacy(chat_models, server_factory):
    """The legacy stateful pipeline (LM pinned) on the Qwen2.5 template."""
    return server_factory(chat_models / "tiny-qwen25", "--served-name", "legacy", "--pipeline-type", "LM")


@pytest.fixture(scope="module")
def thinker(chat_models, server_factory):
    return server_factory(chat_models / "tiny-qwen3", "--served-name", "thinker")


@pytest.mark.parametrize("fixture", ["qwen", "llama", "pythonic", "legacy"])
def test_the_full_tool_loop(request, fixture):
    """call (forced), tool result, answer: each turn goes through the model's chat template."""
    server = request.getfixturevalue(fixture)
    c = client(server)
    first = c.chat.completions.create(
        model=fixture, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=300
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    check_call(call)
    messages = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
    ]
    answer = c.chat.completions.create(model=fixture, messages=messages, tools=TOOLS, max_tokens=12)
    # the call and its result are in the prompt now
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens + len(call.function.arguments) // 4
    a = answer.choices[0]
    assert a.finish_reason in ("stop", "length", "tool_calls")
    assert a.message.content is not None or a.message.tool_calls


@pytest.mark.parametrize("fixture", ["qwen", "llama", "pythonic", "legacy"])
def test_the_full_tool_loop_streamed(request, fixture):
    server = request.getfixturevalue(fixture)
    c = client(server)
    content, _, calls, finish, deltas = stream_turn(
        c, model=fixture, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=300
    )
    assert finish == "tool_calls" and content == "" and list(calls) == [0]
    call = calls[0]
    # a call arrives whole: its arguments are never split over deltas, so they are JSON in every prefix sum
    assert sum(1 for d in deltas if d.tool_calls) == 1
    args = json.loads(call["arguments"])
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "21 degrees"},
    ]
    content, _, calls2, finish, _ = stream_turn(c, model=fixture, messages=messages, tools=TOOLS, max_tokens=12)
    assert finish in ("stop", "length", "tool_calls") and (content or calls2)
    assert isinstance(args, dict)


def test_a_named_function_is_called_with_arguments_fitting_its_schema(qwen):
    c = client(qwen)
    for seed in range(6):
        r = c.chat.completions.create(
            model="qwen",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=1.0,
            seed=seed,
            max_tokens=300,
        )
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and [t.function.name for t in ch.message.tool_calls] == ["get_weather"]
        check_call(ch.message.tool_calls[0])


def test_parallel_calls_are_each_valid(qwen):
    c = client(qwen)
    r = c.chat.completions.create(
        model="qwen", messages=ASK, tools=TOOLS, tool_choice="required", temperature=1.0, seed=7, max_tokens=1500
    )
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and 1 <= len(ch.message.tool_calls) <= 8
    for call in ch.message.tool_calls:
        check_call(call)
    assert len({t.id for t in ch.message.tool_calls}) == len(ch.message.tool_calls)


def test_a_forced_call_cut_at_max_tokens_says_length(qwen):
    r = client(qwen).chat.completions.create(
        model="qwen",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=5,
    )
    ch = r.choices[0]
    assert ch.finish_reason == "length" and not ch.message.tool_calls
    assert not ch.message.content  # no raw call markup (an agent would send it back to the model: issue 37)


def test_tool_choice_none_renders_no_tools_and_parses_none(qwen):
    c = client(qwen)
    with_tools = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, max_tokens=1)
    none = c.chat.completions.create(model="qwen", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=1)
    plain = c.chat.completions.create(model="qwen", messages=ASK, max_tokens=1)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens < with_tools.usage.prompt_tokens


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_impossible_tool_requests_are_refused_by_field(qwen, kw, param):
    with pytest.raises(openai.BadRequestError) as exc:
        client(qwen).chat.completions.create(model="qwen", messages=ASK, max_tokens=4, **kw)
    assert exc.value.body["param"] == param


def _tree(levels: int, width: int) -> dict:
    defs: dict = {"L0": {"type": "string"}}
    for i in range(1, levels + 1):
        defs[f"L{i}"] = {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/L{i - 1}"} for j in range(width)}}
    return {"$defs": defs, "$ref": f"#/$defs/L{levels}"}


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "tree"}}], ids=["required", "named"]
)
def test_a_forced_call_with_a_hostile_schema_is_400_naming_tools(qwen, choice):
    """The schema that expanded to 25 MB of regex on the event loop, through a forced call (issue 38)."""
    tools = [{"type": "function", "function": {"name": "tree", "parameters": _tree(3, 12)}}]
    with pytest.raises(openai.BadRequestError) as exc:
        client(qwen).chat.completions.create(model="qwen", messages=ASK, max_tokens=4, tools=tools, tool_choice=choice)
    assert exc.value.body["param"] == "tools" and "bytes, more than the limit" in exc.value.body["message"]
    ok = client(qwen).chat.completions.create(model="qwen", messages=ASK, max_tokens=4, tools=TOOLS)
    assert ok.choices[0].finish_reason  # the server serves on


def test_a_model_whose_template_renders_no_tools_refuses_them(cb_server):
    c = openai.OpenAI(base_url=cb_server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="tiny-llm", messages=ASK, tools=TOOLS, max_tokens=4)
    assert exc.value.body["param"] == "tools" and "does not render tools" in exc.value.body["message"]
    # nor tool turns: they would be dropped by a template that does not know them
    turn = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
    ]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="tiny-llm", messages=turn, max_tokens=4)
    assert exc.value.body["param"] == "messages[1]"
    # tool_choice none asks nothing of the template
    r = c.chat.completions.create(model="tiny-llm", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=2)
    assert r.choices[0].message.tool_calls is None


def test_reasoning_never_leaks_into_content(thinker):
    """The template opens <think>: what the model writes until </think> is reasoning_content."""
    c = client(thinker)
    r = c.chat.completions.create(model="thinker", messages=ASK, max_tokens=40)
    m = r.choices[0].message
    assert m.reasoning_content and "<think>" not in (m.content or "") and "</think>" not in (m.content or "")
    content, reasoning, _, _, deltas = stream_turn(c, model="thinker", messages=ASK, max_tokens=40)
    assert reasoning == m.reasoning_content and content == (m.content or "")
    assert all(not (d.content and getattr(d, "reasoning_content", None)) for d in deltas)


def test_a_forced_call_on_a_thinking_model_closes_the_reasoning(thinker):
    r = client(thinker).chat.completions.create(
        model="thinker", messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=300
    )
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    check_call(ch.message.tool_calls[0])


def test_the_status_reports_the_parsers(qwen, thinker, llama, cb_server):
    got = {}
    for name, s in (("qwen", qwen), ("thinker", thinker), ("llama", llama), ("tiny", cb_server)):
        caps = s.status()["capabilities"]
        got[name] = (caps["toolParser"], caps["reasoningParser"])
    assert got == {
        "qwen": ("hermes", None),
        "thinker": ("hermes", "qwen3"),
        "llama": ("llama3_json", None),
        "tiny": (None, None),
    }
    # and in the decision record: automatic, with how AUTO decided
    d = thinker.status()["decisions"]
    assert d["toolParser"] == {
        "value": "hermes",
        "source": "automatic",
        "requested": None,
        "detail": "detected from the chat template (hermes)",
    }
    assert d["reasoningParser"]["value"] == "qwen3" and d["reasoningParser"]["source"] == "automatic"
    assert cb_server.status()["decisions"]["toolParser"]["detail"] == "the chat template renders no tools"


def test_reasoning_parser_none_keeps_everything_in_content(chat_models, server_factory):
    s = server_factory(chat_models / "tiny-qwen3", "--served-name", "raw", "--reasoning-parser", "none")
    r = client(s).chat.completions.create(model="raw", messages=ASK, max_tokens=20)
    m = r.choices[0].message
    assert getattr(m, "reasoning_content", None) is None and m.content
    assert s.status()["capabilities"]["reasoningParser"] is None
    assert s.status()["decisions"]["reasoningParser"] == {
        "value": "none",
        "source": "requested",
        "requested": "none",
        "detail": "",
    }
