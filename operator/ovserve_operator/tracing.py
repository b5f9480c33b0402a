"""OpenTelemetry traces of the operator's sync passes (off unless OVSERVE_OTLP_TRACES_ENDPOINT; docs/observability.md).

One span `reconcile <namespace>/<name>` per sync pass of an LLMServing, with the children `observe` (the pods'
reports, their Events, KEDA), `decide` (the pure status and children plan) and `act` (apply, patch, post), and the
object's key, uid and generation as attributes. Spans go to an OTLP/HTTP collector through a BatchSpanProcessor
(its own thread). The SDK is imported only when tracing is on; `NO_TRACE` stands in otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from ovserve_runtime.tracing import SHUTDOWN_TIMEOUT_MS, traces_url

SERVICE_NAME = "ovserve-operator"
OBSERVE, DECIDE, ACT = "observe", "decide", "act"


def object_attributes(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The reconcile span's attributes of an LLMServing's metadata (pure)."""
    out: dict[str, Any] = {
        "k8s.namespace.name": meta.get("namespace", ""),
        "ovserve.llmserving": meta.get("name", ""),
    }
    if meta.get("uid"):
        out["ovserve.llmserving.uid"] = meta["uid"]
    if meta.get("generation") is not None:
        out["ovserve.llmserving.generation"] = int(meta["generation"])
    return out


class NoTrace:
    """Tracing off: every span is a no-op."""

    @contextlib.contextmanager
    def reconcile(self, meta: Mapping[str, Any]) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


NO_TRACE = NoTrace()


class ReconcileTracer(NoTrace):
    """The operator's tracer provider (OTLP/HTTP, batched) and the spans of its sync passes."""

    def __init__(self, endpoint: str, ratio: float, identity: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create({"service.name": SERVICE_NAME, "service.instance.id": identity})
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(ratio)))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
        self.tracer = self.provider.get_tracer("ovserve_operator")

    @contextlib.contextmanager
    def reconcile(self, meta: Mapping[str, Any]) -> Iterator[None]:
        name = f"reconcile {meta.get('namespace', '')}/{meta.get('name', '')}"
        with self.tracer.start_as_current_span(name, attributes=object_attributes(meta)):
            yield

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        with self.tracer.start_as_current_span(name):  # a child of the current pass (contextvars: per task)
            yield

    def close(self) -> None:
        self.provider.force_flush(SHUTDOWN_TIMEOUT_MS)
        self.provider.shutdown()
