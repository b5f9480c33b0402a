"""Serving: the one request wrapper every endpoint shares (in the manner of vLLM's OpenAIServing), and the body
reader.

`Serving.handle(request)` is the whole life of a request, the same for every task:

    the task check (404) -> read the body (413, 408) -> admit or 429 -> prepare (the sibling's; it checks
    readiness, 503, where its protocol wants it) -> submit to the engine or 503 -> track (drain, watchdog) ->
    respond (the sibling's) -> finally: untrack, cancel (frees the engine's slot when the handler ended early),
    release the admission place, count the request by endpoint and status, observe.

A sibling (generate.py: chat and completions; task.py: embeddings and rerank) sets `task` and `endpoint` (the
metrics label) and implements `prepare(raw) -> (engine request, context)` and
`respond(request, engine request, context) -> (response, status)`; `finish` and `observe` are optional.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from ..engine import Events
from ..openai.errors import ApiError, too_large
from ..report import Task
from ..tracing import Finished, RequestTracer
from .state import ServingState

STREAMING = "ovserve.streaming"  # request key: set once an SSE response has been sent its headers
log = logging.getLogger("ovserve.server")
INLINE_BODY_BYTES = 16 * 1024  # a body this small is validated on the event loop (no pool round trip)


REFUSAL = "ovserve.error"  # response key: the ApiError an error response answers (refusals.py logs and counts it)
# request keys, kept for the request's trace (tracing.py) when tracing is on: (status, ApiError | None) as counted,
# and (the engine request, the sibling's context) once prepared
OUTCOME = "ovserve.outcome"
PREPARED = "ovserve.prepared"


def error_response(err: ApiError) -> web.Response:
    resp = web.json_response(err.body(), status=err.status, headers=err.headers)
    resp[REFUSAL] = err
    return resp


def wrong_task(served: Task | None, path: str, wanted: Task) -> ApiError:
    return ApiError(
        404,
        f"{path} is served by {wanted} servings; this serving's task is {served or 'not resolved yet'}",
        code="task_not_served",
    )


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The raw body, refused with 413 before it is read when it declares (or turns out) larger than `limit`, and
    with 408 when it does not arrive within `timeout_s` (--body-timeout-seconds)."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(request.content_length, limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:  # chunked: aiohttp stops reading at the limit
        raise too_large(None, limit) from exc
    except (HttpProcessingError, RequestPayloadError) as exc:  # e.g. not decoding as its Content-Encoding says
        why = " ".join(str(exc).split())[:200]  # (was a 500)
        # the rest is not read: aiohttp would drain it after the answer, hit the same error and log it as an
        # unhandled server exception; the connection closes instead
        request.content.feed_eof()
        raise ApiError(
            400, f"the request body cannot be read: {why}", code="invalid_body", headers={"Connection": "close"}
        ) from None
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {timeout_s:g}s",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None


class Serving:
    """One endpoint's serving over the shared state. Subclasses implement `prepare` and `respond`."""

    task: Task = Task.TEXT_GENERATION  # the task of the servings this endpoint belongs to
    endpoint: str = ""  # the metrics label (ovserve_requests_total{endpoint})

    def __init__(self, state: ServingState) -> None:
        self.state = state

    # --- the sibling's part --------------------------------------------------------------------
    async def prepare(self, raw: bytes) -> tuple[Any, Any]:
        """(the engine request, what `respond` needs) of a valid body, or ApiError (readiness included)."""
        raise NotImplementedError

    async def respond(self, request: web.Request, work: Any, context: Any) -> tuple[web.StreamResponse, str]:
        """The answer of a submitted request and the status to count it under; raises ApiError."""
        raise NotImplementedError

    def finish(self, work: Any) -> None:
        """The handler is ending: before the request leaves the drain and the engine."""

    def observe(self, work: Any, context: Any) -> None:
        """After the request is counted: its metrics (tokens, latencies)."""

    def trace_attributes(self, work: Any, context: Any) -> dict[str, Any]:
        """The span attributes of a finished request's own (tokens, finish reason); never prompt or output text."""
        return {}

    # --- the wrapper ---------------------------------------------------------------------------
    def count(self, status: str | int, err: ApiError | None = None, request: web.Request | None = None) -> None:
        m = self.state.metrics
        m.requests.labels(self.endpoint, str(status)).inc()
        if err is not None:
            m.errors.labels(self.endpoint, str(err.status), err.code or err.type).inc()
        if request is not None:
            request[OUTCOME] = (str(status), err)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        tracer = self.state.tracer
        if tracer is None:
            return await self._handle(request, arrived)
        try:
            return await self._handle(request, arrived)
        finally:
            self._trace(tracer, request, arrived)

    def _trace(self, tracer: RequestTracer, request: web.Request, arrived: float) -> None:
        """The spans of this request (tracing.py); a failure here is logged, never the request's."""
        try:
            status, err = request.get(OUTCOME, ("499", None))  # not counted: cancelled before an answer
            work, context = request.get(PREPARED, (None, None))
            done = Finished(
                endpoint=self.endpoint,
                method=request.method,
                path=request.path,
                arrived=arrived,
                ended=time.monotonic(),
                status=status,
                error_code=(err.code or err.type) if err is not None else None,
                queued_at=getattr(work, "queued_at", None),
                started_at=getattr(work, "started_at", None),
                first_token_at=getattr(work, "first_token_at", None),
                attributes=self.trace_attributes(work, context) if work is not None else {},
            )
            tracer.record(request.headers, done, self.state.report)
        except Exception:
            log.exception("recording a request's trace failed")

    async def _handle(self, request: web.Request, arrived: float) -> web.StreamResponse:
        state = self.state
        served = state.report.task.resolved
        if served is not None and served != self.task:  # e.g. /v3/embeddings on a text-generation serving
            err = wrong_task(served, request.path, self.task)
            request[OUTCOME] = (str(err.status), err)
            return error_response(err)
        try:  # before admission: an upload in progress holds no place
            raw = await read_body(request, state.cfg.max_body_bytes, state.cfg.body_timeout_seconds)
        except ApiError as err:
            self.count(err.status, err, request)
            return error_response(err)
        if not state.admission.try_admit():
            err = state.queue_full()
            self.count(429, err, request)
            return error_response(err)
        try:
            return await self._admitted(request, raw, arrived)
        finally:
            state.admission.release()

    async def _admitted(self, request: web.Request, raw: bytes, arrived: float) -> web.StreamResponse:
        state = self.state
        try:
            work, context = await self.prepare(raw)
        except ApiError as err:
            self.count(err.status, err, request)
            return error_response(err)
        request[PREPARED] = (work, context)
        engine = state.engine
        work.loop = asyncio.get_running_loop()
        work.events = Events()
        work.submitted_at = arrived
        work.queued_at = time.monotonic()
        try:
            engine.submit(work)
        except Exception as exc:
            err = ApiError(503, str(exc), "server_error", code="pipeline_failed")
            self.count(503, err, request)
            return error_response(err)
        state.drain.track(work)
        status, refused = "200", None
        try:
            response, status = await self.respond(request, work, context)
            return response
        except ApiError as err:
            status, refused = str(err.status), err
            return error_response(err)
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"  # client closed the request
            raise
        finally:
            self.finish(work)
            state.drain.untrack(work)
            engine.cancel(work)  # no-op when finished; frees the slot otherwise
            self.count(status, refused, request)
            self.observe(work, context)
