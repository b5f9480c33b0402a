"""The decision record on the real runtime: /v1/status `decisions` says what OpenVINO resolved, read back
from the pipeline (the KV cache measured from the bytes it allocated), asked for or chosen."""

from __future__ import annotations

import json
import urllib.request

import pytest
from ovserve_runtime import isa
from ovserve_runtime.report import RuntimeReport


def _decisions(server) -> dict:
    rep = RuntimeReport.model_validate(server.status())
    assert rep.decisions is not None
    return rep.decisions.model_dump(mode="json")


def test_cb_defaults_are_recorded_as_automatic(cb_server):
    d = _decisions(cb_server)
    assert d["device"]["value"] == "CPU" and d["device"]["source"] == "requested"
    # the KV cache of a whole model: measured, a known element type, never the plugin's lone-op default
    kv = d["kvCachePrecision"]
    assert kv["source"] == "automatic" and kv["value"] in {"bf16", "f16", "u8", "f32"}
    assert kv["detail"].startswith("measured:")
    assert d["inferencePrecision"]["value"] in {"bf16", "f16", "f32"}
    assert d["inferenceThreads"] == {"value": "1", "source": "requested", "requested": "1", "detail": "as asked"}
    assert d["numStreams"]["value"] == "1"
    assert d["kvCacheGB"]["value"] == "dynamic" and int(d["kvCacheBlocks"]["value"]) >= 1
    assert d["prefixCaching"]["value"] == "false" and d["prefixCaching"]["source"] == "automatic"
    assert d["dynamicSplitFuse"]["value"] == "true"
    assert d["maxContext"] == {
        "value": "256",
        "source": "requested",
        "requested": "256",
        "detail": "--max-prompt-tokens",
    }
    assert d["speculative"]["value"] == "none"
    assert d["openvino"]["value"] and d["openvinoGenai"]["value"]
    # the CPU's class, read from /proc/cpuinfo, and the dynamic quantization the plugin compiled with
    assert d["cpu"]["value"] == isa.detect().level.value and d["cpu"]["source"] == "automatic"
    assert int(d["dynamicQuantization"]["value"]) >= 0


def test_asked_dynamic_quantization_is_what_runs(tiny_models, server_factory):
    s = server_factory(tiny_models / "tiny-llm", "--dynamic-quantization-group-size", "0")
    try:
        d = _decisions(s)
    finally:
        s.stop()
    assert d["dynamicQuantization"] == {"value": "0", "source": "requested", "requested": "0", "detail": "as asked"}


@pytest.mark.parametrize(
    "args,precision,blocks",
    [
        (("--kv-cache-precision", "u8", "--enable-prefix-caching"), "u8", None),
        (("--kv-cache-precision", "u4", "--cache-size-gb", "1"), "u4", 299592),
    ],
    ids=["u8", "u4-fixed"],
)
def test_asked_precision_is_what_runs(tiny_models, server_factory, args, precision, blocks):
    s = server_factory(tiny_models / "tiny-llm", *args)
    try:
        d = _decisions(s)
    finally:
        s.stop()
    assert d["kvCachePrecision"]["value"] == precision and d["kvCachePrecision"]["source"] == "requested"
    if blocks is not None:  # 1 GB of tiny-llm's u4 blocks (3584 bytes: 2 layers, key 2x48x16 + value 2x32x32 u4)
        assert d["kvCacheGB"]["value"] == "1" and d["kvCacheBlocks"]["value"] == str(blocks)
    else:
        assert d["prefixCaching"] == {"value": "true", "source": "requested", "requested": "true", "detail": "as asked"}


def test_legacy_records_no_scheduler(legacy_server):
    d = _decisions(legacy_server)
    assert d["prefixCaching"]["value"] is None and "legacy" in d["prefixCaching"]["detail"]
    assert d["kvCachePrecision"]["value"] is None and "not measured" in d["kvCachePrecision"]["detail"]
    assert d["inferencePrecision"]["value"] in {"bf16", "f16", "f32"}
    assert d.get("kvCacheBlocks") is None


def test_eviction_and_sparse_attention_are_recorded_as_asked(tiny_models, server_factory):
    s = server_factory(tiny_models / "tiny-llm", "--cache-eviction-max-tokens", "256", "--sparse-attention", "TRISHAPE")
    try:
        d = _decisions(s)
        body = {"model": "tiny-llm", "prompt": "hello " * 40, "max_tokens": 300, "ignore_eos": True}
        req = urllib.request.Request(
            s.url + "/v3/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            code, out = r.status, json.loads(r.read())
    finally:
        s.stop()
    assert d["cacheEviction"]["value"] == "start 32, recent 128, max 256 tokens, NORM_SUM"
    assert d["cacheEviction"]["source"] == "requested" and d["cacheEviction"]["detail"] == "as asked"
    assert d["sparseAttention"] == {
        "value": "TRISHAPE",
        "source": "requested",
        "requested": "TRISHAPE",
        "detail": "as asked",
    }
    assert code == 200 and out["usage"]["completion_tokens"] == 300  # beyond the 256 kept: eviction ran
