"""TaskServing: the embeddings and rerank endpoints, siblings of the generation servings on the same wrapper
(base.Serving: admission, body limit, readiness, the drain and the fatal path, metrics), so the guarantees of
docs/runtime.md hold for every task.

The task's service (tasks/embeddings.py, tasks/rerank.py) is attached once its pipeline runs and supplies
`prepare(raw) -> (job, context)` (validation and tokenization, run off the event loop) and
`respond(job, result, context) -> dict`; the job goes through the task engine (tasks/worker.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..openai.errors import ApiError, event_error
from ..openai.request import RequestError
from ..report import Task
from .base import INLINE_BODY_BYTES, Serving
from .state import ServingState

log = logging.getLogger("ovserve.tasks")

Prepare = Callable[[bytes], tuple[Any, Any]]  # raw body -> (tasks.worker.Job, context)
Respond = Callable[[Any, Any, Any], dict]  # (job, result, context) -> the response body


class TaskServing(Serving):
    """One task's endpoint (embeddings or rerank)."""

    def __init__(self, state: ServingState, task: Task, endpoint: str, inline: bool = False) -> None:
        super().__init__(state)
        self.task = task
        self.endpoint = endpoint  # the metrics label
        self.inline = inline  # prepare() is cheap (no tokenization): a small body is prepared on the loop
        self.run: Prepare | None = None  # the service's prepare and respond, set by `attach`
        self.answer: Respond | None = None

    def attach(self, engine, service) -> None:
        """The task's service, once its pipeline runs."""
        engine.on_call = self.state.metrics.task_batch.observe
        self.run = service.prepare
        self.answer = service.respond

    async def prepare(self, raw: bytes) -> tuple[Any, Any]:
        if self.run is None:  # readiness before validation: the service validates
            raise self.state.not_ready()
        self.state.ready_engine()
        try:
            if self.inline and len(raw) <= INLINE_BODY_BYTES:  # a pool round trip costs more than parsing it
                return self.run(raw)
            return await asyncio.get_running_loop().run_in_executor(self.state.pool, self.run, raw)
        except RequestError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
        except ApiError:
            raise
        except Exception as exc:  # a bug or a tokenizer failure: a counted JSON 500, never a hang
            log.exception("preparing a %s request failed", self.task)
            raise ApiError(500, "internal server error", "server_error", code="internal_error") from exc

    async def respond(self, request: web.Request, job, context) -> tuple[web.StreamResponse, str]:
        kind, value = await job.events.get()
        if kind == "error":
            raise event_error(value)
        body = self.answer(job, value, context)
        m = self.state.metrics
        duration = time.monotonic() - job.submitted_at
        m.e2e.observe(duration)
        self.state.admission.observe(duration)
        m.task_documents.labels(self.task.value).inc(len(job.texts))
        m.prompt_tokens.inc(body.get("usage", {}).get("prompt_tokens", 0))
        return web.json_response(body), "200"
