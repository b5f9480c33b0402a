"""The pure parts of tracing.py: the OTLP URL, a finished request's span attributes (never text; cached tokens
absent), the pipeline's."""

from __future__ import annotations

import pytest
from ovserve_operator.tracing import object_attributes
from ovserve_runtime.report import PipelineReport, PipelineType, Reason, RuntimeReport, State
from ovserve_runtime.tracing import Finished, pipeline_attributes, request_attributes, traces_url


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://jaeger:4318", "http://jaeger:4318/v1/traces"),
        ("http://jaeger:4318/", "http://jaeger:4318/v1/traces"),
        ("https://otel.example/v1/traces", "https://otel.example/v1/traces"),
        ("http://collector:4318/custom/path", "http://collector:4318/custom/path"),
    ],
)
def test_traces_url(endpoint, url):
    assert traces_url(endpoint) == url


def finished(**kw) -> Finished:
    base = {"endpoint": "chat", "method": "POST", "path": "/v3/chat/completions", "arrived": 10.0, "ended": 11.0}
    return Finished(**{**base, "status": "200", **kw})


@pytest.mark.parametrize(
    ("done", "expected", "absent"),
    [
        (
            finished(
                queued_at=10.1, started_at=10.25, first_token_at=10.5, attributes={"gen_ai.usage.input_tokens": 7}
            ),
            {
                "gen_ai.operation.name": "chat",
                "http.response.status_code": 200,
                "ovserve.time_to_first_token_seconds": 0.5,
                "ovserve.queue_seconds": 0.15,
                "gen_ai.usage.input_tokens": 7,
            },
            {"error.type", "gen_ai.usage.cache_read.input_tokens"},
        ),
        (
            finished(endpoint="completions", status="429", error_code="queue_full"),
            {"gen_ai.operation.name": "text_completion", "error.type": "queue_full", "http.response.status_code": 429},
            {"ovserve.time_to_first_token_seconds", "ovserve.queue_seconds"},
        ),
        (finished(endpoint="rerank", status="499"), {"gen_ai.operation.name": "rerank"}, {"error.type"}),
    ],
    ids=["answered", "refused", "gone"],
)
def test_request_attributes(done, expected, absent):
    got = request_attributes(done, "m")
    assert got["gen_ai.request.model"] == got["gen_ai.response.model"] == "m"
    for key, value in expected.items():
        assert got[key] == pytest.approx(value) if isinstance(value, float) else got[key] == value, key
    assert not absent & set(got)


def test_pipeline_attributes_name_the_fallback_only_when_it_happened():
    cb = RuntimeReport(
        model="m",
        state=State.READY,
        pipeline=PipelineReport(
            resolved=PipelineType.LM_CB, continuousBatching=True, reason=Reason.CONTINUOUS_BATCHING
        ),
    )
    got = pipeline_attributes(cb)
    assert got["ovserve.pipeline.resolved"] == "LM_CB" and got["ovserve.pipeline.fallback"] is False
    assert "ovserve.pipeline.fallback_reason" not in got
    legacy = cb.model_copy(
        update={
            "pipeline": PipelineReport(
                resolved=PipelineType.LM, fallback=True, reason=Reason.PAGED_ATTENTION_NOT_SUPPORTED
            )
        }
    )
    got = pipeline_attributes(legacy)
    assert got["ovserve.pipeline.fallback_reason"] == "PagedAttentionNotSupported"


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (
            {"namespace": "team", "name": "chat", "uid": "u-1", "generation": 3},
            {
                "k8s.namespace.name": "team",
                "ovserve.llmserving": "chat",
                "ovserve.llmserving.uid": "u-1",
                "ovserve.llmserving.generation": 3,
            },
        ),
        ({"namespace": "team", "name": "chat"}, {"k8s.namespace.name": "team", "ovserve.llmserving": "chat"}),
    ],
    ids=["full", "no-uid"],
)
def test_operator_reconcile_attributes(meta, expected):
    assert object_attributes(meta) == expected


def test_operator_tracing_is_off_unless_an_endpoint_is_set():
    from ovserve_operator.settings import Settings

    assert Settings().otlp_traces_endpoint is None
    on = Settings(otlp_traces_endpoint="http://jaeger:4318", trace_sample_ratio=0.5)
    assert (on.otlp_traces_endpoint, on.trace_sample_ratio) == ("http://jaeger:4318", 0.5)
    with pytest.raises(ValueError):
        Settings(otlp_traces_endpoint="jaeger:4318")
