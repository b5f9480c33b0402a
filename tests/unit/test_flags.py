"""The runtime's flags (ovserve_runtime.flags): parsed by the runtime's own parser, rendered by the operator,
bounded alike in the CRD, documented from the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
from ovserve_operator import crd, render
from ovserve_operator import spec as api
from ovserve_runtime import flags
from ovserve_runtime.cli import build_parser, parse_flags
from ovserve_runtime.flags import RuntimeFlags
from ovserve_runtime.report import PipelineType

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"
HOST = {"hostPath": {"path": "/models/x"}}


def test_docs_table_is_generated_from_the_model():
    text = DOC.read_text()
    assert flags.render_into(text) == text, (
        "docs/runtime.md drifted: python -m ovserve_runtime.flags --write docs/runtime.md"
    )


def test_help_names_every_flag_and_its_environment_twin():
    out = build_parser().format_help()
    for name in RuntimeFlags.model_fields:
        assert flags.flag_name(name) in out and flags.env_name(name) in out, name
    assert "--no-dynamic-split-fuse" in out and "never downgraded" in out


@pytest.mark.parametrize(
    "spec",
    [
        {"model": HOST},
        {"model": {**HOST, "servedName": "chat"}, "pipelineType": "LM_CB", "device": "GPU"},
        {
            "model": {"pvc": {"claimName": "m", "path": "a/b"}},
            "pipelineType": "VLM_CB",
            "scheduler": {"cacheSizeGB": 0, "maxNumSeqs": 1, "maxNumBatchedTokens": 64, "kvCachePrecision": "f16"},
            "serving": {"maxQueuedRequests": 1_000_000, "streamIntervalMs": 0.125},
        },
        {"model": HOST, "scheduler": {"enablePrefixCaching": True, "dynamicSplitFuse": False}},
        {
            "model": HOST,
            "scheduler": {"enablePrefixCaching": False, "dynamicSplitFuse": True},
            "serving": {"streamIntervalMs": 1000},
        },
        {"model": HOST, "serving": {"toolParser": "llama3_pythonic", "reasoningParser": "none"}},
        {"model": HOST, "serving": {"toolParser": "AUTO", "reasoningParser": "deepseek_r1"}},
    ],
)
def test_what_the_operator_renders_the_runtime_parses_back(spec):
    """The pod's command line, through the runtime's parser (no environment), is the same typed flags."""
    typed = api.parse_spec(spec)
    want = render.runtime_flags("llm", typed, 30)
    args = render.runtime_args("llm", typed, 30)
    assert parse_flags(args, environ={}) == want
    assert want.model_path == "/models/llm" and want.pipeline_type == typed.pipelineType


@pytest.mark.parametrize(
    "argv,env,field,value",
    [
        ((), {}, "max_queued_requests", 256),
        ((), {"OVSERVE_MAX_QUEUED_REQUESTS": "7"}, "max_queued_requests", 7),
        (("--max-queued-requests", "3"), {"OVSERVE_MAX_QUEUED_REQUESTS": "7"}, "max_queued_requests", 3),
        ((), {"OVSERVE_MAX_QUEUED_REQUESTS": ""}, "max_queued_requests", 256),  # empty = unset
        ((), {"OVSERVE_PIPELINE_TYPE": "lm_cb"}, "pipeline_type", PipelineType.LM_CB),
        (("--device", "gpu"), {}, "device", "GPU"),
        ((), {"OVSERVE_ENGINE_PROCESS": "off"}, "engine_process", False),
        (("--engine-process",), {"OVSERVE_ENGINE_PROCESS": "false"}, "engine_process", True),
        (("--no-dynamic-split-fuse",), {}, "dynamic_split_fuse", False),
        ((), {"OVSERVE_DYNAMIC_SPLIT_FUSE": "yes"}, "dynamic_split_fuse", True),
        ((), {}, "dynamic_split_fuse", None),  # openvino-genai decides
        ((), {"OVSERVE_STREAM_INTERVAL_MS": " 2.5 "}, "stream_interval_ms", 2.5),
        (("--drain-timeout-seconds", "0.2"), {}, "drain_timeout_seconds", 0.2),
        (("--log-level", "debug"), {}, "log_level", "DEBUG"),
        ((), {}, "tool_parser", flags.ToolParser.AUTO),
        (("--tool-parser", "auto"), {}, "tool_parser", flags.ToolParser.AUTO),
        ((), {"OVSERVE_TOOL_PARSER": "Hermes"}, "tool_parser", flags.ToolParser.HERMES),
        (("--reasoning-parser", "NONE"), {}, "reasoning_parser", flags.ReasoningParser.NONE),
        ((), {"OVSERVE_REASONING_PARSER": " qwen3 "}, "reasoning_parser", flags.ReasoningParser.QWEN3),
    ],
)
def test_a_flag_wins_over_its_environment_twin(argv, env, field, value):
    got = getattr(parse_flags(["--model-path", "/m", *argv], environ=env), field)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "argv,env,message",
    [
        (
            ("--max-queued-requests", "-1"),
            {},
            "argument --max-queued-requests: input should be greater than or equal to 0",
        ),
        ((), {"OVSERVE_MAX_QUEUED_REQUESTS": "-2"}, "OVSERVE_MAX_QUEUED_REQUESTS='-2': input should be greater than"),
        ((), {"OVSERVE_PORT": "eighty"}, "OVSERVE_PORT='eighty': input should be a valid integer"),
        (("--port", "70000"), {}, "argument --port: input should be less than or equal to 65535, got '70000'"),
        (
            ("--stream-interval-ms", "-1"),
            {},
            "argument --stream-interval-ms: input should be greater than or equal to 0",
        ),
        (
            ("--stream-interval-ms", "1001"),
            {},
            "argument --stream-interval-ms: input should be less than or equal to 1000",
        ),
        (
            (),
            {"OVSERVE_STREAM_INTERVAL_MS": "nan"},
            "OVSERVE_STREAM_INTERVAL_MS='nan': input should be a finite number",
        ),
        (("--max-num-seqs", "0"), {}, "argument --max-num-seqs: input should be greater than or equal to 1, got '0'"),
        (("--max-num-batched-tokens", "1.5"), {}, "argument --max-num-batched-tokens: input should be a valid integer"),
        ((), {"OVSERVE_ENGINE_PROCESS": "maybe"}, "OVSERVE_ENGINE_PROCESS='maybe': input should be a valid boolean"),
        (("--pipeline-type", "CB"), {}, "argument --pipeline-type: input should be 'AUTO', 'LM', 'LM_CB', 'VLM' or"),
        (("--log-level", "loud"), {}, "argument --log-level: input should be 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        (("--drain-timeout-seconds", "inf"), {}, "argument --drain-timeout-seconds: input should be a finite number"),
        (("--tool-parser", "mistral"), {}, "argument --tool-parser: input should be 'AUTO', 'hermes', 'llama3_json',"),
        ((), {"OVSERVE_REASONING_PARSER": "hermes"}, "OVSERVE_REASONING_PARSER='hermes': input should be 'AUTO',"),
    ],
)
def test_refused_values_are_usage_errors_naming_flag_or_variable(argv, env, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_flags(["--model-path", "/m", *argv], environ=env)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_two_refused_values_are_both_named(capsys):
    with pytest.raises(SystemExit):
        parse_flags(["--port", "x"], environ={"OVSERVE_MAX_IMAGES": "-1"})
    err = capsys.readouterr().err
    assert "argument --port:" in err and "OVSERVE_MAX_IMAGES='-1':" in err


@pytest.mark.parametrize(
    "path,field",
    [
        (("scheduler", "cacheSizeGB"), "cache_size_gb"),
        (("scheduler", "maxNumSeqs"), "max_num_seqs"),
        (("scheduler", "maxNumBatchedTokens"), "max_num_batched_tokens"),
        (("serving", "maxQueuedRequests"), "max_queued_requests"),
        (("serving", "streamIntervalMs"), "stream_interval_ms"),
    ],
)
def test_the_crd_bounds_a_field_as_the_runtime_bounds_its_flag(path, field):
    """The apiserver refuses what the runtime would refuse, and nothing the runtime accepts."""
    schema = crd.crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for key in path:
        schema = schema["properties"][key]
    want = flags.bounds(field)
    assert "ge" in want
    assert (schema.get("minimum"), schema.get("maximum")) == (want.get("ge"), want.get("le"))


def test_to_args_writes_only_what_was_set():
    assert RuntimeFlags().to_args() == []
    f = RuntimeFlags(model_path="/m", enable_prefix_caching=False, drain_timeout_seconds=30, stream_interval_ms=0.25)
    assert f.to_args() == [
        "--model-path",
        "/m",
        "--drain-timeout-seconds",
        "30",
        "--no-enable-prefix-caching",
        "--stream-interval-ms",
        "0.25",
    ]


def test_the_server_and_the_scheduler_take_every_value_of_their_flags():
    """ServerConfig and SchedulerOptions mirror flags by name: none is dropped on the way, none has a default
    of its own."""
    import dataclasses

    from ovserve_runtime.engine import SchedulerOptions
    from ovserve_runtime.http import ServerConfig

    for f in dataclasses.fields(SchedulerOptions):
        assert f.name in RuntimeFlags.model_fields, f.name
    f = parse_flags(
        ["--max-images", "3", "--stream-interval-ms", "20", "--drain-timeout-seconds", "5", "--prepare-threads", "2"],
        environ={},
    )
    cfg = ServerConfig.from_flags(f, "m")
    assert (cfg.served_name, cfg.max_images, cfg.prepare_threads) == ("m", 3, 2)
    assert (cfg.stream_interval_s, cfg.drain_timeout_s) == (0.02, 5.0)
    assert ServerConfig.from_flags(RuntimeFlags(), "m") == ServerConfig(served_name="m")


def test_the_parser_flags_name_exactly_the_parsers_the_runtime_has():
    from ovserve_runtime.openai import reasoning, tools

    assert {p.value for p in flags.ToolParser} - {"AUTO", "none"} == set(tools.PARSERS)
    assert {p.value for p in flags.ReasoningParser} - {"AUTO", "none"} == set(reasoning.PARSERS)
