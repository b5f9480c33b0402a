"""The HTTP path shared by the embeddings and rerank endpoints: admission (429 beyond the bound), body limit,
readiness, the job's trip through the task engine, the drain and the fatal path, metrics. A task module
supplies `prepare(raw) -> (job, context)` (validation and tokenization, run off the event loop) and
`respond(job, result, context) -> dict`. Everything else is the generation path's own machinery (http.App:
its Admission, Drain, Metrics), so the guarantees of docs/runtime.md hold for every task."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..engine import EngineError, Events
from ..http.app import INLINE_BODY_BYTES
from ..openai.errors import ApiError, event_error
from ..openai.request import RequestError
from ..report import State, Task
from .worker import Job

log = logging.getLogger("ovserve.tasks")

Prepare = Callable[[bytes], tuple[Job, Any]]
Respond = Callable[[Job, Any, Any], dict]


def wrong_task(served: Task | None, path: str, wanted: Task) -> ApiError:
    return ApiError(
        404,
        f"{path} is served by {wanted} servings; this serving's task is {served or 'not resolved yet'}",
        code="task_not_served",
    )


class TaskHandler:
    """One task's endpoint on the server `app` (http.App)."""

    def __init__(self, app: Any, task: Task, endpoint: str, inline: bool = False) -> None:
        self.app = app
        self.inline = inline  # prepare() is cheap (no tokenization): a small body is prepared on the loop
        self.task = task
        self.endpoint = endpoint  # the metrics label
        self.prepare: Prepare | None = None  # set by the task's loader once the pipeline runs
        self.respond: Respond | None = None

    async def handle(self, request: web.Request) -> web.Response:
        app = self.app
        arrived = time.monotonic()
        served = app.report.task.resolved
        if served is not None and served != self.task:
            raise wrong_task(served, request.path, self.task)
        try:
            raw = await app._read_body(request)  # before admission: an upload in progress holds no place
        except ApiError as err:
            app.metrics.requests.labels(self.endpoint, str(err.status)).inc()
            return web.json_response(err.body(), status=err.status, headers=err.headers)
        if not app.admission.try_admit():
            app.metrics.requests.labels(self.endpoint, "429").inc()
            return app._queue_full()
        status = "200"
        job: Job | None = None
        try:
            engine = app.engine
            if engine is None or self.prepare is None or app.report.state != State.READY:
                raise ApiError(
                    503, f"the model is not ready (state {app.report.state})", "server_error", code="model_not_ready"
                )
            if engine.fatal is not None:
                raise ApiError(503, f"the pipeline failed: {engine.fatal}", "server_error", code="pipeline_failed")
            job, context = await self._prepare(raw)
            job.loop = asyncio.get_running_loop()
            job.events = Events()
            job.submitted_at = arrived
            try:
                engine.submit(job)
            except EngineError as exc:
                raise ApiError(503, str(exc), "server_error", code="pipeline_failed") from None
            app.drain.track(job)
            kind, value = await job.events.get()
            if kind == "error":
                raise event_error(value)
            body = self.respond(job, value, context)
            duration = time.monotonic() - arrived
            app.metrics.e2e.observe(duration)
            app.admission.observe(duration)
            app.metrics.task_documents.labels(self.task.value).inc(len(job.texts))
            app.metrics.prompt_tokens.inc(body.get("usage", {}).get("prompt_tokens", 0))
            return web.json_response(body)
        except ApiError as err:
            status = str(err.status)
            return web.json_response(err.body(), status=err.status, headers=err.headers)
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"
            raise
        finally:
            if job is not None:
                app.drain.untrack(job)
                if app.engine is not None:
                    app.engine.cancel(job)
            app.admission.release()
            app.metrics.requests.labels(self.endpoint, status).inc()

    async def _prepare(self, raw: bytes) -> tuple[Job, Any]:
        try:
            if self.inline and len(raw) <= INLINE_BODY_BYTES:  # a pool round trip costs more than parsing it
                return self.prepare(raw)
            return await asyncio.get_running_loop().run_in_executor(self.app.pool, self.prepare, raw)
        except RequestError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
        except ApiError:
            raise
        except Exception as exc:  # a bug or a tokenizer failure: a counted JSON 500, never a hang
            log.exception("preparing a %s request failed", self.task)
            raise ApiError(500, "internal server error", "server_error", code="internal_error") from exc
