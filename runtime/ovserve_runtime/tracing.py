"""OpenTelemetry tracing of the API requests (off unless --otlp-traces-endpoint; docs/observability.md).

Each request's spans are made once it has ended, from the times the request already records (arrival, handed to
the engine, taken into the pipeline, first token, end), so tracing adds nothing per token and nothing while a
request runs. The event loop only queues the finished request (a few microseconds): the SDK's span building
(~50-150 us of CPU per request) runs on the tracer's own thread, and the BatchSpanProcessor exports from its
thread. A W3C `traceparent` (and
`tracestate`) from the client or a gateway is continued, and its sampling decision followed; other requests are
sampled at --trace-sample-ratio.

Spans: `<operation> <served model>` (SERVER) with the children `prepare` (arrival -> handed to the engine: body,
validation, chat template, output grammar, tokenization), `queue` (handed to the engine -> taken into its
pipeline) and `generate` (taken into the pipeline -> end). Attributes follow OpenTelemetry's gen_ai and http
conventions where they exist, ovserve.* otherwise. Never prompt or completion text.

The OpenTelemetry SDK is imported only when tracing is on.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .report import RuntimeReport

SERVICE_NAME = "ovserve-runtime"
TRACES_PATH = "/v1/traces"  # OTLP/HTTP's traces path, added to an endpoint given without a path
SHUTDOWN_TIMEOUT_MS = 5000  # spans still queued at shutdown get this long to leave
MAX_PENDING = 10000  # finished requests waiting for the tracer thread; beyond it they are dropped (counted)

log = logging.getLogger("ovserve.tracing")
# gen_ai.operation.name of each endpoint label (metrics.py's ovserve_requests_total{endpoint})
OPERATIONS = {"chat": "chat", "completions": "text_completion", "responses": "chat", "embeddings": "embeddings"}

# the children's names
PREPARE, QUEUE, GENERATE = "prepare", "queue", "generate"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP URL spans are posted to: the endpoint as given when it names a path, else + /v1/traces."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path=TRACES_PATH))
    return endpoint


@dataclass
class Finished:
    """One request as it ended: what its spans are made of (monotonic times; None: never reached)."""

    endpoint: str
    method: str
    path: str
    arrived: float
    ended: float
    status: str
    error_code: str | None = None
    queued_at: float | None = None
    started_at: float | None = None
    first_token_at: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


def pipeline_attributes(report: RuntimeReport) -> dict[str, Any]:
    """What runs, as span attributes: the task, the requested and resolved pipeline and the fallback reason."""
    p = report.pipeline
    out: dict[str, Any] = {
        "ovserve.task": str(report.task.resolved or ""),
        "ovserve.pipeline.requested": str(p.requested),
        "ovserve.pipeline.resolved": str(p.resolved or ""),
        "ovserve.pipeline.continuous_batching": p.continuousBatching,
        "ovserve.pipeline.fallback": p.fallback,
    }
    if p.fallback:
        out["ovserve.pipeline.fallback_reason"] = str(p.reason)
    return out


def request_attributes(done: Finished, served_name: str) -> dict[str, Any]:
    """The root span's attributes (pure): the request, its outcome and its times; the sibling's (tokens, finish
    reason) and the pipeline's are in `done.attributes`."""
    out: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(done.endpoint, done.endpoint),
        "gen_ai.request.model": served_name,
        "gen_ai.response.model": served_name,
        "http.request.method": done.method,
        "url.path": done.path,
        "ovserve.endpoint": done.endpoint,
    }
    if done.status.isdigit():
        out["http.response.status_code"] = int(done.status)
    if done.error_code:
        out["error.type"] = done.error_code
        out["ovserve.error.code"] = done.error_code
    if done.first_token_at is not None:
        out["ovserve.time_to_first_token_seconds"] = round(done.first_token_at - done.arrived, 6)
    if done.queued_at is not None and done.started_at is not None:
        out["ovserve.queue_seconds"] = round(max(0.0, done.started_at - done.queued_at), 6)
    out.update(done.attributes)
    return out


class RequestTracer:
    """The runtime's tracer provider (OTLP/HTTP, batched) and the spans of one finished request."""

    def __init__(self, endpoint: str, ratio: float, served_name: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = {"service.name": SERVICE_NAME, "ovserve.served_model": served_name}
        if pod := os.environ.get("HOSTNAME"):  # the pod's name in Kubernetes
            resource["service.instance.id"] = pod
        self.provider = TracerProvider(
            resource=Resource.create(resource), sampler=ParentBased(TraceIdRatioBased(ratio))
        )
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
        self.tracer = self.provider.get_tracer("ovserve_runtime")
        self.propagator = TraceContextTextMapPropagator()
        self.served_name = served_name
        self._kind, self._status, self._code, self._child = SpanKind, Status, StatusCode, set_span_in_context
        self._pending: queue.Queue = queue.Queue(MAX_PENDING)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="ovserve-tracing", daemon=True)
        self._thread.start()

    def record(self, headers: Mapping[str, str], done: Finished, report: RuntimeReport) -> None:
        """Queue one finished request for its spans (on the event loop: the W3C headers copied, one put)."""
        carrier = {k: v for k in ("traceparent", "tracestate") if (v := headers.get(k)) is not None}
        try:
            self._pending.put_nowait((carrier, done, report, time.monotonic(), time.time_ns()))
        except queue.Full:  # the tracer thread is behind: this request goes untraced, serving is not slowed
            self.dropped += 1
            if self.dropped == 1:
                log.warning("tracing: %d finished requests wait for their spans; dropping the rest", MAX_PENDING)

    def _run(self) -> None:
        while (item := self._pending.get()) is not None:
            try:
                self._spans(*item)
            except Exception:  # a bad attribute must not end tracing
                log.exception("building a request's spans failed")

    def _spans(self, carrier: dict[str, str], done: Finished, report: RuntimeReport, mono: float, wall: int) -> None:
        """The spans of one finished request, on the tracer thread (times as of when it was queued)."""
        parent = self.propagator.extract(carrier)

        def ns(t: float) -> int:  # a monotonic time as the Unix nanoseconds spans carry
            return wall - int((mono - t) * 1e9)

        root = self.tracer.start_span(
            f"{OPERATIONS.get(done.endpoint, done.endpoint)} {self.served_name}",
            context=parent,
            kind=self._kind.SERVER,
            start_time=ns(done.arrived),
        )
        if not root.is_recording():  # sampled out
            return
        root.set_attributes({**request_attributes(done, self.served_name), **pipeline_attributes(report)})
        if done.error_code or (done.status.isdigit() and int(done.status) >= 500):
            root.set_status(self._status(self._code.ERROR, done.error_code or done.status))
        inside = self._child(root)
        steps = [
            (PREPARE, done.arrived, done.queued_at),
            (QUEUE, done.queued_at, done.started_at),
            (GENERATE, done.started_at, done.ended if done.started_at is not None else None),
        ]
        for name, start, end in steps:
            if start is not None and end is not None:
                span = self.tracer.start_span(name, context=inside, start_time=ns(start))
                if name == GENERATE and done.first_token_at is not None:
                    span.add_event("first_token", timestamp=ns(done.first_token_at))
                span.end(end_time=ns(max(start, end)))
        root.end(end_time=ns(done.ended))

    def close(self) -> None:
        """Build and export what is queued (bounded), then stop the threads."""
        try:
            self._pending.put(None, timeout=SHUTDOWN_TIMEOUT_MS / 1000)
        except queue.Full:
            pass
        self._thread.join(SHUTDOWN_TIMEOUT_MS / 1000)
        self.provider.force_flush(SHUTDOWN_TIMEOUT_MS)
        self.provider.shutdown()
