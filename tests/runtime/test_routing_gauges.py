"""The model-server protocol on the real engine (issue 39, docs/routing.md): a continuous-batching pod exports its
KV-cache usage as a ratio (0-1, the percent gauge / 100 in the same scrape) and its cache configuration (block size
in tokens as the CPU plugin compiles PagedAttention, prefix caching); a legacy pod has no paged cache and exports
neither family (no zero that would attract traffic), while its queue and running gauges still count."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest
from ovserve_runtime.metrics import CACHE_CONFIG_INFO, KV_USAGE_RATIO, PAGED_BLOCK_TOKENS
from prometheus_client.parser import text_string_to_metric_families

from .conftest import wait_until

pytestmark = pytest.mark.runtime


def scrape(srv) -> dict:
    return {f.name: f for f in text_string_to_metric_families(srv.metrics())}


def chat(srv, tokens: int) -> None:
    """One chat completion of `tokens` tokens (a second or more on the tiny models, one thread)."""
    body = {
        "model": srv.status()["model"],
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        srv.url + "/v3/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def test_cb_pod_exports_usage_ratio_and_cache_config(cb_server):
    idle = scrape(cb_server)
    (info,) = idle[CACHE_CONFIG_INFO].samples
    assert info.labels["block_size"] == str(PAGED_BLOCK_TOKENS["CPU"])
    assert info.labels["num_blocks"] == ""  # the CPU default grows on demand: no fixed number of blocks
    assert info.labels["enable_prefix_caching"] in ("true", "false")
    assert idle[KV_USAGE_RATIO].samples[0].value == 0.0
    worker = threading.Thread(target=chat, args=(cb_server, 400))
    worker.start()
    seen: list[tuple[float, float]] = []

    def busy() -> bool:
        got = scrape(cb_server)
        pair = (got[KV_USAGE_RATIO].samples[0].value, got["ovserve_kv_cache_usage_percent"].samples[0].value)
        seen.append(pair)
        return pair[0] > 0

    assert wait_until(busy, timeout=30, interval=0.02), seen[-5:]
    worker.join()
    assert all(0 <= r <= 1 and r == pytest.approx(p / 100) for r, p in seen), seen


def test_legacy_pod_exports_no_paged_cache_families(legacy_server):
    worker = threading.Thread(target=chat, args=(legacy_server, 200))
    worker.start()
    assert wait_until(lambda: legacy_server.metric("ovserve_requests_running") == 1, timeout=30)
    got = scrape(legacy_server)
    worker.join()
    assert KV_USAGE_RATIO not in got and CACHE_CONFIG_INFO not in got


def test_block_size_is_what_the_cpu_plugin_compiles(tiny_models: Path):
    """PAGED_BLOCK_TOKENS['CPU'] is the token dimension of the value cache of PagedAttention as the CPU plugin
    compiles it, for every KV-cache precision it offers (the key cache appends its quantization scales there)."""
    import openvino as ov
    from ovserve_runtime.observe import CANDIDATES, _pa_probe

    model, _ = _pa_probe(tiny_models / "tiny-llm" / "openvino_model.xml")
    core, seen = ov.Core(), {}
    for prec in CANDIDATES:
        try:
            compiled = core.compile_model(model, "CPU", {"KV_CACHE_PRECISION": prec})
        except RuntimeError:
            continue  # a precision this CPU does not offer
        for port in compiled.inputs:
            if port.get_any_name().startswith("value_cache."):
                seen[prec] = port.get_partial_shape()[2].get_length()
    assert seen and set(seen.values()) == {PAGED_BLOCK_TOKENS["CPU"]}, seen
