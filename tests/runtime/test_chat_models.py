"""The tiny models with real chat templates (hack/models/chat): openvino-genai reads their templates, renders
tools and tool turns with them, the family and the reasoning parser are detected from them, a tool prompt
longer than tiny-llm's 512 positions generates, and a forced call from their random weights is valid JSON."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.runtime

g = pytest.importorskip("openvino_genai")
from ovserve_runtime.openai import forced, reasoning, tools  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"enum": ["c", "f"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {"type": "function", "function": {"name": "now", "description": "The time"}},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
]


@pytest.mark.parametrize(
    ("name", "tool_parser", "reasoning_parser", "opens_think"),
    [
        ("tiny-qwen25", "hermes", None, False),
        ("tiny-qwen3", "hermes", "qwen3", True),
        ("tiny-llama31", "llama3_json", None, False),
        ("tiny-llama32", "llama3_pythonic", None, False),
    ],
)
def test_templates_render_tools_and_are_detected(chat_models, name, tool_parser, reasoning_parser, opens_think):
    tok = g.Tokenizer(str(chat_models / name))
    template = tok.chat_template
    assert template == (chat_models / name / "chat_template.jinja").read_text()
    assert tools.detect(template) == tool_parser and tools.renders_tools(template)
    assert reasoning.detect(template) == reasoning_parser
    prompt = tok.apply_chat_template(HISTORY, add_generation_prompt=True, tools=TOOLS)
    assert '"get_weather"' in prompt and "Paris" in prompt and "21" in prompt
    assert prompt.rstrip().endswith("<think>") is opens_think
    plain = tok.apply_chat_template(HISTORY[:1], add_generation_prompt=True)
    assert "get_weather" not in plain


def test_tiny_llm_template_is_not_a_tool_template(chat_models):
    template = g.Tokenizer(str(chat_models / "tiny-llm")).chat_template
    assert tools.detect(template) is None and not tools.renders_tools(template)
    assert reasoning.detect(template) is None


@pytest.mark.parametrize(("name", "parallel"), [("tiny-qwen25", False), ("tiny-qwen25", True), ("tiny-llama31", True)])
def test_forced_calls_from_random_weights_are_valid(chat_models, name, parallel):
    """Through openvino-genai's StructuredOutputConfig (XGrammar), on a prompt past 512 positions."""
    tok = g.Tokenizer(str(chat_models / name))
    pipe = g.ContinuousBatchingPipeline(str(chat_models / name), g.SchedulerConfig(), "CPU")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "weather " * 200}], add_generation_prompt=True, tools=TOOLS
    )
    assert len(tok.encode(prompt).input_ids.data[0]) > 512
    functions = [tools.Function(name=t["function"]["name"], parameters=t["function"].get("parameters")) for t in TOOLS]
    calls = forced.forced_calls(tools.detect(tok.chat_template), functions, parallel=parallel)
    schema = TOOLS[0]["function"]["parameters"]
    for seed in range(8):
        cfg = g.GenerationConfig(max_new_tokens=1000, do_sample=True, temperature=1.0, rng_seed=seed)
        cfg.structured_output_config = g.StructuredOutputConfig(regex=calls.regex)
        text = pipe.generate([prompt], [cfg])[0].m_generation_ids[0]  # text, for a text prompt
        # XGrammar admits overlong UTF-8 leads (0xC0, 0xC1), which random weights sometimes pick; the
        # detokenizer makes them U+FFFD: the JSON stays valid, a string may count more characters than its
        # maxLength. Trained models do not write such bytes.
        assert re.fullmatch(calls.regex, text) or "\ufffd" in text, text
        parsed = tools.parse(calls.parser, text, {"get_weather", "now"})
        assert parsed.content is None and parsed.tool_calls
        assert parallel or len(parsed.tool_calls) == 1
        for call in parsed.tool_calls:
            args = json.loads(call.function.arguments)
            if call.function.name == "now":
                assert args == {}
            else:
                assert set(args) <= set(schema["properties"]) and {"city", "unit"} <= set(args)
                assert len(args["city"]) <= 12 or "\ufffd" in args["city"]
                assert args["unit"] in ("c", "f") and 1 <= args.get("days", 1) <= 7
