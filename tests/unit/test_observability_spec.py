"""spec.observability.tracing -> the runtime's tracing flags (render.runtime_flags, pure): unset renders nothing (an
unchanged pod template), the endpoint and ratio become --otlp-traces-endpoint and --trace-sample-ratio, and what
the runtime would refuse the spec refuses."""

from __future__ import annotations

import pydantic
import pytest
from ovserve_operator import render
from ovserve_operator import spec as api

MODEL = {"hostPath": {"path": "/m"}}


@pytest.mark.parametrize(
    ("observability", "args"),
    [
        (None, []),
        ({}, []),
        ({"tracing": {"endpoint": "http://jaeger:4318"}}, ["--otlp-traces-endpoint", "http://jaeger:4318"]),
        (
            {"tracing": {"endpoint": "https://otel.example/v1/traces", "sampleRatio": 0.25}},
            ["--otlp-traces-endpoint", "https://otel.example/v1/traces", "--trace-sample-ratio", "0.25"],
        ),
    ],
    ids=["unset", "empty", "endpoint", "endpoint-and-ratio"],
)
def test_tracing_flags(observability, args):
    body = {"model": MODEL} if observability is None else {"model": MODEL, "observability": observability}
    rendered = render.runtime_flags("x", api.LLMServingSpec.model_validate(body), 30).to_args()
    got = [a for i, a in enumerate(rendered) if a in args or (i and rendered[i - 1] in args[::2])]
    assert got == args
    if not args:
        assert not any("trac" in a for a in rendered)


@pytest.mark.parametrize(
    "tracing",
    [{"endpoint": "jaeger:4318"}, {"endpoint": "http://j:4318", "sampleRatio": 1.5}, {"sampleRatio": 0.5}],
    ids=["no-scheme", "ratio-above-1", "no-endpoint"],
)
def test_tracing_refused(tracing):
    with pytest.raises(pydantic.ValidationError):
        api.LLMServingSpec.model_validate({"model": MODEL, "observability": {"tracing": tracing}})
