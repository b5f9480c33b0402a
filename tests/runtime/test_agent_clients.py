"""The agent clients of issue 37, unchanged, against a real ovserve-runtime (one server on tiny-qwen3-hybrid: hermes
tools, qwen3 reasoning, Qwen3's enable_thinking switch). Each is a test dependency only (the `dev` extra, pinned in
constraints.txt; Codex from npm through hack/build-codex.sh), never in the runtime image.

Versions (exact):
- openai-agents 0.24.0: its default model path, OpenAIProvider -> OpenAIResponsesModel (POST /v1/responses), runs
  an Agent with one function tool, forced (tool_choice required, stop_on_first_tool) so that the random model calls it.
- langchain-openai 1.7.4 (langchain-core 1.8.3): ChatOpenAI(use_responses_api=True) with bind_tools (a forced call),
  with_structured_output (a Pydantic model with bounded fields: text.format json_schema) and stream.
- litellm 1.83.0: litellm.responses, plain, streamed (the model registered with supports_native_streaming: litellm
  fakes the stream of a model it does not know) and with a forced function tool. Not the newest release:
  litellm >= 1.108 requires boto3, whose botocore wants python-dateutil < 3 while this project pins 4.0.0 (the
  kubernetes client's, shared with the image), and 1.83.14 to 1.106 require openai < 3 (we pin 3.57.0). 1.83.0 is
  the newest that installs beside the project's pins.
- openai 3.57.0 under all three.
- Codex CLI 0.171.0 (@openai/codex): one `codex exec --json` turn through a custom model provider
  (wire_api "responses", env_key), which sends a streamed request with 4 function tools, tool_choice auto,
  reasoning.summary, store false, include reasoning.encrypted_content, prompt_cache_key and client_metadata.
  What it needs here: the tiny model has 4096 positions and Codex's own prompt is ~17,500 tokens here (~13,900
  without the tools' schemas), refused as 400 context_length_exceeded (a test below: Codex reads the code and says it
  "ran out of room in the model's context window"). So the turn runs with a one-line `model_instructions_file` and
  without the skills, permissions and environment blocks (`skills.include_instructions`,
  `include_permissions_instructions`, `include_environment_context` false): ~3,650 tokens, most of them the tools'
  schemas. And `--output-schema` (text.format json_schema): greedy, the random model loops until the context is
  full (12 prompts of 12 tried), and Codex fails a turn that ends `incomplete`; the schema's grammar ends the
  answer, so the turn completes. Codex sends its instructions as `developer` messages, which Qwen's templates drop
  without a word: the runtime renders them as `system` (tests/unit/test_responses_api.py).

Outputs are random (random weights): the tests assert protocol behaviour, never content.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from .conftest import ROOT

pytestmark = pytest.mark.runtime

MODEL = "tiny"
CITIES = ("Paris", "Oslo")


class Order(BaseModel):
    color: Literal["red", "green", "blue"]
    count: int = Field(ge=1, le=9)


@pytest.fixture(scope="module")
def server(chat_models, server_factory):
    s = server_factory(chat_models / "tiny-qwen3-hybrid", "--served-name", MODEL)
    yield s
    s.stop()


def refusals(server) -> float:
    return sum(server.metric("ovserve_requests_total", f'endpoint="responses",status="{c}"') for c in (400, 404, 422))


def test_agents_sdk_runs_a_function_tool(server):
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    provider = OpenAIProvider(openai_client=AsyncOpenAI(base_url=server.url + "/v1", api_key="unused"))
    assert isinstance(provider.get_model(MODEL), OpenAIResponsesModel)  # the default: the Responses API
    agent = Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        model=MODEL,
        tools=[get_weather],
        tool_use_behavior="stop_on_first_tool",
        model_settings=ModelSettings(
            tool_choice="required",
            max_tokens=256,  # the tiny tokenizer's tokens are short: a call takes ~70
            reasoning=Reasoning(effort="none"),
        ),
    )
    before = refusals(server)
    result = asyncio.run(Runner.run(agent, "weather in Paris?", run_config=RunConfig(model_provider=provider)))
    assert len(ran) == 1 and ran[0] in CITIES
    assert result.final_output == f"sunny in {ran[0]}"  # stop_on_first_tool: the tool's output ends the run
    assert [r.response_id.startswith("resp_") for r in result.raw_responses] == [True]
    assert refusals(server) == before


def test_langchain_responses_api_tools_structured_output_and_stream(server):
    from langchain_core.messages import AIMessageChunk
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def llm(max_tokens: int) -> ChatOpenAI:
        return ChatOpenAI(
            model=MODEL,
            base_url=server.url + "/v1",
            api_key="unused",
            use_responses_api=True,
            max_tokens=max_tokens,
            reasoning={"effort": "none"},
            max_retries=0,
        )

    before = refusals(server)
    msg = llm(256).bind_tools([get_weather], tool_choice="get_weather").invoke("weather in Paris?")
    assert msg.response_metadata["id"].startswith("resp_")
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    assert msg.tool_calls[0]["args"]["city"] in CITIES and msg.tool_calls[0]["id"]

    order = llm(64).with_structured_output(Order).invoke("an order")
    assert isinstance(order, Order)

    chunks = list(llm(16).stream("tell me"))
    assert chunks and all(isinstance(c, AIMessageChunk) for c in chunks)
    whole = sum(chunks[1:], chunks[0])
    assert whole.usage_metadata["output_tokens"] >= 1
    assert refusals(server) == before


# litellm's own usage model, serialized from its stream iterator, warns about a dict it built itself
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_litellm_responses_plain_streamed_and_a_forced_tool(server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list at import
    import litellm

    litellm.telemetry = False
    # a model litellm does not know gets a stream faked from a whole answer (5-character deltas, no
    # response.created, `completed` whatever the status): registering it is how its native stream is asked for
    litellm.register_model(
        {
            f"openai/{MODEL}": {
                "litellm_provider": "openai",
                "mode": "responses",
                "supports_native_streaming": True,
                "max_input_tokens": 4096,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
            }
        }
    )
    kw = {"model": f"openai/{MODEL}", "api_base": server.url + "/v1", "api_key": "unused"}
    before = refusals(server)

    r = litellm.responses(input="hello", max_output_tokens=16, **kw)
    assert r.id.startswith("resp_") and r.status in ("completed", "incomplete")
    assert r.usage.output_tokens >= 1

    events = list(litellm.responses(input="tell me", max_output_tokens=16, stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [p.text for o in final.output if o.type == "message" for p in o.content]
    assert text == "".join(done)

    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": list(CITIES)}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }
    r = litellm.responses(
        input="weather in Paris?",
        tools=[weather],
        tool_choice="required",
        reasoning={"effort": "none"},
        max_output_tokens=256,
        **kw,
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments)["city"] in CITIES
    assert refusals(server) == before


# --- Codex CLI


@pytest.fixture(scope="module")
def codex() -> str:
    """The codex binary of hack/build-codex.sh (npm, cached outside git)."""
    proc = subprocess.run(["bash", str(ROOT / "hack" / "build-codex.sh")], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"hack/build-codex.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc.stdout.strip().splitlines()[-1]


SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def codex_exec(codex: str, server, tmp: Path, *config: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """One `codex exec --json` turn against the runtime through a custom provider; (process, its JSONL events)."""
    home, work = tmp / "codex-home", tmp / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    (tmp / "schema.json").write_text(json.dumps(SCHEMA))
    provider = f'{{name="ovserve", base_url="{server.url}/v1", wire_api="responses", env_key="OVSERVE_KEY"}}'
    cmd = [
        codex,
        "exec",
        "--json",
        "--ephemeral",
        "--skip-git-repo-check",
        "--disable",
        "multi_agent",
        "--disable",
        "goals",
        "-c",
        "web_search=disabled",
        "-c",
        "model_provider=ovserve",
        "-c",
        f"model_providers.ovserve={provider}",
        "-c",
        "model_reasoning_effort=none",
        *config,
        "--output-schema",
        str(tmp / "schema.json"),
        "-C",
        str(work),
        "-m",
        MODEL,
        "say hi",
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home)}
    env["OVSERVE_KEY"] = "unused"
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, events


def test_codex_exec_completes_a_turn(codex, server, tmp_path):
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You are a coding agent. Answer in one short sentence.\n")
    ok = server.metric("ovserve_requests_total", 'endpoint="responses",status="200"')
    before = refusals(server)
    proc, events = codex_exec(
        codex,
        server,
        tmp_path,
        "-c",
        f"model_instructions_file={json.dumps(str(instructions))}",
        "-c",
        "skills.include_instructions=false",
        "-c",
        "include_permissions_instructions=false",
        "-c",
        "include_environment_context=false",
    )
    detail = f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, detail
    kinds = [e["type"] for e in events]
    assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed", detail
    assert "turn.failed" not in kinds and "error" not in kinds, detail
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    messages = [i["text"] for i in items if i["type"] == "agent_message"]
    assert len(messages) == 1 and isinstance(json.loads(messages[0])["ok"], bool), detail
    usage = events[-1]["usage"]
    assert 3000 < usage["input_tokens"] < 4096 and usage["output_tokens"] >= 1, usage
    assert server.metric("ovserve_requests_total", 'endpoint="responses",status="200"') == ok + 1
    assert refusals(server) == before


def test_codex_reports_a_prompt_over_the_context_by_name(codex, server, tmp_path):
    # Codex's own instructions do not fit the tiny model's 4096 positions: the runtime refuses with the code
    # context_length_exceeded, which Codex reads as such (not a protocol error, not a silently cut prompt)
    before = server.metric("ovserve_requests_total", 'endpoint="responses",status="400"')
    proc, events = codex_exec(codex, server, tmp_path)
    assert proc.returncode != 0
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert failed and "ran out of room in the model's context window" in failed[0]["error"]["message"], proc.stdout
    assert server.metric("ovserve_requests_total", 'endpoint="responses",status="400"') == before + 1
