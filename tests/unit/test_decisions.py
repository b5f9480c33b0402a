"""Table tests of the decision record (ovserve_runtime.decisions) and the KV-cache measurement (observe)."""

from __future__ import annotations

import dataclasses

import pytest
from ovserve_runtime import decisions as dec
from ovserve_runtime.flags import RuntimeFlags
from ovserve_runtime.observe import measured_precision, type_name
from ovserve_runtime.report import Decisions, Source, SpeculativeMode, SpeculativeReason, SpeculativeReport, Versions
from ovserve_runtime.sources import ConfigError, validate

VERSIONS = Versions(openvino="2026.4.1", openvinoGenai="2026.4.1.0")
BLOCKS = {"f16": 8192, "bf16": 8192, "u8": 5632, "u4": 3584}
CB = dec.Observed(
    continuous_batching=True,
    execution_devices=("CPU",),
    device_name="Intel Xeon",
    inference_precision="bf16",
    num_streams=1,
    inference_threads=8,
    performance_hint="LATENCY",
    cache_size_gb=0.0,
    prefix_caching=False,
    dynamic_split_fuse=True,
    cache_bytes=8192,
    block_bytes=8192,
    kv_cache_precision="bf16",
    kv_cache_how="measured",
)


NOTHING_ASKED = dec.Asked()
NO_SPECULATION = SpeculativeReport()


def record(asked=NOTHING_ASKED, observed=CB, *, speculative=NO_SPECULATION):
    return dec.record(asked, observed, VERSIONS, max_position=512, speculative=speculative)


# (id, asked, observed changes, decision, value, source, requested)
CASES = [
    ("kv-auto", dec.Asked(), {}, "kvCachePrecision", "bf16", Source.AUTOMATIC, None),
    (
        "kv-asked",
        dec.Asked(kv_cache_precision="u8"),
        {"kv_cache_precision": "u8"},
        "kvCachePrecision",
        "u8",
        Source.REQUESTED,
        "u8",
    ),
    (
        "kv-overridden",
        dec.Asked(kv_cache_precision="f16"),
        {"kv_cache_precision": "u8"},
        "kvCachePrecision",
        "u8",
        Source.REQUESTED,
        "f16",
    ),
    ("precision-plugin", dec.Asked(), {}, "inferencePrecision", "bf16", Source.AUTOMATIC, None),
    ("threads-default", dec.Asked(), {}, "inferenceThreads", "8", Source.AUTOMATIC, None),
    (
        "threads-asked",
        dec.Asked(inference_threads=1),
        {"inference_threads": 1},
        "inferenceThreads",
        "1",
        Source.REQUESTED,
        "1",
    ),
    ("streams", dec.Asked(), {}, "numStreams", "1", Source.AUTOMATIC, None),
    ("cache-dynamic", dec.Asked(), {}, "kvCacheGB", "dynamic", Source.AUTOMATIC, None),
    (
        "cache-fixed",
        dec.Asked(cache_size_gb=2),
        {"cache_size_gb": 2.0, "cache_bytes": 2 * 1024**3 - 8192},
        "kvCacheGB",
        "2",
        Source.REQUESTED,
        "2",
    ),
    ("blocks", dec.Asked(), {"cache_bytes": 3 * 8192}, "kvCacheBlocks", "3", Source.AUTOMATIC, None),
    ("prefix-default", dec.Asked(), {}, "prefixCaching", "false", Source.AUTOMATIC, None),
    (
        "prefix-asked",
        dec.Asked(enable_prefix_caching=True),
        {"prefix_caching": True},
        "prefixCaching",
        "true",
        Source.REQUESTED,
        "true",
    ),
    (
        "split-fuse-off",
        dec.Asked(dynamic_split_fuse=False),
        {"dynamic_split_fuse": False},
        "dynamicSplitFuse",
        "false",
        Source.REQUESTED,
        "false",
    ),
    ("eviction-off", dec.Asked(), {}, "cacheEviction", "off", Source.AUTOMATIC, None),
    (
        "device-gpu",
        dec.Asked(device="GPU"),
        {"execution_devices": ("GPU.0",)},
        "device",
        "GPU.0",
        Source.REQUESTED,
        "GPU",
    ),
    ("max-context-model", dec.Asked(), {}, "maxContext", "512", Source.AUTOMATIC, None),
    ("max-context-asked", dec.Asked(max_prompt_tokens=128), {}, "maxContext", "128", Source.REQUESTED, "128"),
    ("max-context-capped", dec.Asked(max_prompt_tokens=4096), {}, "maxContext", "512", Source.REQUESTED, "4096"),
    ("versions", dec.Asked(), {}, "openvinoGenai", "2026.4.1.0", Source.AUTOMATIC, None),
]


@pytest.mark.parametrize("asked,changes,name,value,source,requested", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_record(asked, changes, name, value, source, requested):
    import dataclasses

    d = getattr(record(asked, dataclasses.replace(CB, **changes)), name)
    assert (d.value, d.source, d.requested) == (value, source, requested)


def test_overridden_says_so():
    d = record(dec.Asked(kv_cache_precision="f16"), dataclasses.replace(CB, kv_cache_precision="u8"))
    assert d.kvCachePrecision.detail == "asked f16, runs u8"


def test_legacy_has_no_scheduler_and_no_guessed_cache():
    d = record(dec.Asked(), dec.Observed(inference_precision="f32", kv_cache_precision="u8"))
    assert d.kvCachePrecision.value is None and "not measured" in d.kvCachePrecision.detail
    assert d.prefixCaching.value is None and d.kvCacheGB is None and d.kvCacheBlocks is None
    assert d.inferencePrecision.value == "f32"


def test_speculative_decision():
    sp = SpeculativeReport(
        requested=SpeculativeMode.DRAFT,
        resolved=SpeculativeMode.NONE,
        fallback=True,
        reason=SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE,
        message="tokenizers differ",
    )
    d = record(speculative=sp).speculative
    assert (d.value, d.source, d.requested) == ("none", Source.REQUESTED, "draft")
    assert "DraftModelIncompatible" in d.detail


# (id, cache bytes, asked, inference precision, precision, block bytes)
MEASURED = [
    ("one-16-bit-block-bf16", 8192, None, "bf16", "bf16", 8192),
    ("one-16-bit-block-f32-inference", 8192, None, "f32", "f16", 8192),
    ("asked-f16-on-bf16", 8192, "f16", "bf16", "f16", 8192),
    ("u8", 5632 * 9, "u8", "bf16", "u8", 5632),
    ("u4-fixed", 1073737728, "u4", "bf16", "u4", 3584),
    ("none-allocated", 0, None, "bf16", None, None),
    ("no-match", 1000, None, "bf16", None, None),
]


@pytest.mark.parametrize("cache,asked,inference,prec,block", [m[1:] for m in MEASURED], ids=[m[0] for m in MEASURED])
def test_measured_precision(cache, asked, inference, prec, block):
    got, b, _how = measured_precision(cache, BLOCKS, inference, asked)
    assert (got, b) == (prec, block)


def test_measured_ambiguity_is_said():
    got, _b, how = measured_precision(5632 * 8192, BLOCKS, "bf16", None)
    assert got in {"bf16", "u8"} and "also divisible" in how


@pytest.mark.parametrize("text,name", [("<Type: 'uint8_t'>", "u8"), ("bfloat16", "bf16"), ("u4", "u4"), (None, None)])
def test_type_name(text, name):
    assert type_name(text) == name


def test_changes_name_a_resolved_difference_with_the_same_ask():
    a = record()
    b = record(observed=dataclasses.replace(CB, inference_precision="f32"))
    assert dec.changes(a, b) == ["inferencePrecision: bf16 -> f32"]
    asked_other = record(dec.Asked(kv_cache_precision="u8"), dataclasses.replace(CB, kv_cache_precision="u8"))
    assert "kvCachePrecision" not in " ".join(dec.changes(a, asked_other))  # the ask changed: not a surprise
    assert dec.changes(a, Decisions.model_validate(a.model_dump(mode="json"))) == []


@pytest.mark.parametrize(
    "values,ok",
    [
        ({"kv_cache_precision": "u4"}, False),
        ({"kv_cache_precision": "u4", "cache_size_gb": "0"}, False),
        ({"kv_cache_precision": "u4", "cache_size_gb": "2"}, True),
        ({"kv_cache_precision": "AUTO"}, True),
    ],
)
def test_u4_needs_a_fixed_cache(values, ok):
    if ok:
        validate(RuntimeFlags, values, {})
    else:
        with pytest.raises(ConfigError, match="u4 needs a fixed --cache-size-gb"):
            validate(RuntimeFlags, values, {})
