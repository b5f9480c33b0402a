"""The model-server-protocol families of the runtime (issue 39): what a report says about its paged KV cache
(metrics.cache_config) and the two families exported only where one runs."""

from __future__ import annotations

import pytest
from ovserve_runtime.metrics import CACHE_CONFIG_INFO, KV_USAGE_RATIO, Metrics, cache_config
from ovserve_runtime.report import Decision, Decisions, PipelineReport, PipelineType, RuntimeReport, State
from prometheus_client.parser import text_string_to_metric_families


def report(
    *,
    cb: bool = True,
    state: State = State.READY,
    device: str = "CPU",
    gb: str = "dynamic",
    blocks: str | None = "12",
    prefix: str | None = "true",
    decisions: bool = True,
) -> RuntimeReport:
    d = Decisions(
        device=Decision(value=device),
        kvCacheGB=Decision(value=gb),
        kvCacheBlocks=Decision(value=blocks) if blocks is not None else None,
        prefixCaching=Decision(value=prefix) if prefix is not None else None,
    )
    return RuntimeReport(
        state=state,
        device=device,
        pipeline=PipelineReport(resolved=PipelineType.LM_CB if cb else PipelineType.LM, continuousBatching=cb),
        decisions=d if decisions else None,
    )


@pytest.mark.parametrize(
    ("rep", "want"),
    [
        pytest.param(report(), {"block_size": "32", "num_blocks": "", "enable_prefix_caching": "true"}, id="cpu-grows"),
        pytest.param(
            report(gb="2", blocks="4096"),
            {"block_size": "32", "num_blocks": "4096", "enable_prefix_caching": "true"},
            id="cpu-fixed-size",
        ),
        pytest.param(
            report(device="GPU.0", gb="1", blocks="100", prefix="false"),
            {"block_size": "16", "num_blocks": "100", "enable_prefix_caching": "false"},
            id="gpu",
        ),
        pytest.param(report(prefix=None), {"block_size": "32", "num_blocks": "", "enable_prefix_caching": "false"}),
        pytest.param(report(cb=False), None, id="legacy-no-paged-cache"),
        pytest.param(report(state=State.LOADING), None, id="loading"),
        pytest.param(report(decisions=False), None, id="no-decisions"),
        pytest.param(report(device="NPU"), None, id="unknown-block-size"),
    ],
)
def test_cache_config(rep, want):
    assert cache_config(rep) == want


class Engine:
    """The two methods Metrics.render reads of an engine."""

    def __init__(self, usage: float | None) -> None:
        self.usage = usage

    def cache_usage(self) -> float | None:
        return self.usage


def families(m: Metrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(m.render()[0].decode())}


@pytest.mark.parametrize(
    ("rep", "usage", "ratio"),
    [
        pytest.param(report(), 37.5, 0.375, id="cb-busy"),
        pytest.param(report(), 0.0, 0.0, id="cb-idle"),
        pytest.param(report(cb=False), None, None, id="legacy"),
        pytest.param(report(), None, None, id="cb-broken"),
    ],
)
def test_families_only_where_a_paged_cache_runs(rep, usage, ratio):
    m = Metrics()
    m.set_report(rep)
    m.attach(Engine(usage), lambda: (0, 0))
    got = families(m)
    if ratio is None:
        assert KV_USAGE_RATIO not in got and CACHE_CONFIG_INFO not in got
        assert got["ovserve_kv_cache_usage_percent"].samples[0].value == 0  # autoscaling's gauge is unchanged
        return
    assert got[KV_USAGE_RATIO].samples[0].value == ratio
    (info,) = got[CACHE_CONFIG_INFO].samples
    assert info.value == 1 and info.labels == cache_config(rep)


def test_not_attached_yet_exports_no_cache_families():
    m = Metrics()
    m.set_report(report())
    assert KV_USAGE_RATIO not in families(m)
