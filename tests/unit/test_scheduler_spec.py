"""scheduler.kvCachePrecision (AUTO), cacheEviction and sparseAttention: validation (CEL mirrored by the typed
model and by the runtime's flags) and the flags they render."""

from __future__ import annotations

import pytest
from ovserve_operator import crd, render
from ovserve_operator import spec as api
from ovserve_runtime.cli import build_parser
from ovserve_runtime.engine import SchedulerOptions
from ovserve_runtime.flags import RuntimeFlags, from_sources
from ovserve_runtime.sources import ConfigError, validate
from pydantic import ValidationError

HOST = {"hostPath": {"path": "/models/tiny-llm"}}


def spec(scheduler: dict) -> api.LLMServingSpec:
    return api.parse_spec({"model": HOST, "scheduler": scheduler})


# (id, scheduler, error substring or None, args expected)
CASES = [
    ("auto", {"kvCachePrecision": "AUTO"}, None, ["--kv-cache-precision", "AUTO"]),
    ("u4-fixed", {"kvCachePrecision": "u4", "cacheSizeGB": 2}, None, ["--kv-cache-precision", "u4"]),
    ("u4-dynamic", {"kvCachePrecision": "u4"}, "u4 needs a fixed cacheSizeGB", None),
    ("eviction", {"cacheEviction": {"maxTokens": 512}}, None, ["--cache-eviction-max-tokens", "512"]),
    (
        "eviction-sized",
        {"cacheEviction": {"maxTokens": 100, "startTokens": 8, "recentTokens": 64, "aggregation": "SUM"}},
        None,
        [
            "--cache-eviction-start-tokens",
            "8",
            "--cache-eviction-recent-tokens",
            "64",
            "--cache-eviction-aggregation",
            "SUM",
        ],
    ),
    ("eviction-too-small", {"cacheEviction": {"maxTokens": 160}}, "larger than startTokens \\+ recentTokens", None),
    ("sparse", {"sparseAttention": "XATTENTION"}, None, ["--sparse-attention", "XATTENTION"]),
]


@pytest.mark.parametrize("sched,error,args", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_scheduler_fields(sched, error, args):
    if error is not None:
        with pytest.raises(ValidationError, match=error):
            spec(sched)
        return
    got = render.runtime_args("llm", spec(sched), 30)
    joined = " ".join(got)
    assert " ".join(args) in joined, got
    from_sources(vars(build_parser().parse_args(got)), {})  # the rendered flags validate in the runtime too


def test_crd_carries_the_rules():
    sched = crd.openapi_schema()["properties"]["spec"]["properties"]["scheduler"]
    assert "u4" in sched["x-kubernetes-validations"][0]["rule"]
    assert sched["properties"]["cacheEviction"]["x-kubernetes-validations"]
    assert "AUTO" in sched["properties"]["kvCachePrecision"]["enum"]


def test_runtime_refuses_a_too_small_eviction():
    with pytest.raises(ConfigError, match="--cache-eviction-max-tokens must be larger"):
        validate(RuntimeFlags, {"cache_eviction_max_tokens": "100"}, {})


def test_scheduler_options_build_the_genai_config():
    s = SchedulerOptions(cache_eviction_max_tokens=300, sparse_attention="TRISHAPE").scheduler_config()
    assert s.use_cache_eviction and s.cache_eviction_config.get_max_cache_size() == 300
    assert s.use_sparse_attention and str(s.sparse_attention_config.mode).endswith("TRISHAPE")
    assert SchedulerOptions(cache_eviction_max_tokens=300).eviction_text() == (
        "start 32, recent 128, max 300 tokens, NORM_SUM"
    )
    assert SchedulerOptions(kv_cache_precision="AUTO").properties() == {}


@pytest.mark.parametrize(
    "value,args", [(None, []), ("f32", ["--inference-precision", "f32"]), ("AUTO", ["--inference-precision", "AUTO"])]
)
def test_inference_precision(value, args):
    extra = {"inferencePrecision": value} if value else {}
    got = render.runtime_args("llm", api.parse_spec({"model": HOST, **extra}), 30)
    assert (" ".join(args) in " ".join(got)) if args else "--inference-precision" not in got
    from_sources(vars(build_parser().parse_args(got)), {})


@pytest.mark.parametrize(
    "value,args,error",
    [
        (None, [], None),  # unset: the runtime chooses for the CPU (tuning.py)
        (0, ["--dynamic-quantization-group-size", "0"], None),  # off, asked: it wins
        (64, ["--dynamic-quantization-group-size", "64"], None),
        (-1, None, "greater than or equal to 0"),
    ],
)
def test_dynamic_quantization_group_size(value, args, error):
    extra = {"dynamicQuantizationGroupSize": value} if value is not None else {}
    if error:
        with pytest.raises(ValueError, match=error):
            api.parse_spec({"model": HOST, **extra})
        return
    got = render.runtime_args("llm", api.parse_spec({"model": HOST, **extra}), 30)
    assert (" ".join(args) in " ".join(got)) if args else "--dynamic-quantization-group-size" not in got
    flags = from_sources(vars(build_parser().parse_args(got)), {})
    assert flags.dynamic_quantization_group_size == value
