"""AudioServing: `/v1/audio/transcriptions` and `/v1/audio/translations` (and their /v3 aliases), a sibling of the
embeddings and rerank servings on the same wrapper (base.Serving: task check, body limit, admission and 429,
readiness, the drain, the fatal path, request metrics), so every guarantee of docs/runtime.md holds for audio.

The body is multipart/form-data: `prepare` hands the transcription service (tasks/transcription.py) the body
with its Content-Type, always in the server's worker pool (parsing the form and decoding audio are work a client
controls). `respond` answers in the asked `response_format`, or streams `transcript.text.delta` events as the
pipeline decodes and ends with `transcript.text.done`. Audio seconds in and the real-time factor (the pipeline's
time over the audio's duration) are counted per request.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from aiohttp import web

from ..openai import audio as api
from ..openai.errors import ApiError, event_error
from ..report import Task
from .base import STREAMING
from .sse import SSEWriter
from .state import ServingState
from .task import TaskServing

log = logging.getLogger("ovserve.tasks")


class AudioServing(TaskServing):
    """One audio endpoint: transcriptions, or translations (`translate`: into English)."""

    def __init__(self, state: ServingState, endpoint: str, translate: bool) -> None:
        super().__init__(state, Task.TRANSCRIPTION, endpoint, inline=False)  # the form and audio: in the pool
        self.translate = translate

    def attach(self, engine, service) -> None:
        engine.on_call = self.state.metrics.task_batch.observe
        self.run = service.prepare

    async def _admitted(self, request: web.Request, raw: bytes, arrived: float) -> web.StreamResponse:
        upload = api.Upload(request.headers.get("Content-Type", ""), raw, self.translate)
        return await super()._admitted(request, upload, arrived)  # type: ignore[arg-type]

    async def prepare(self, raw: Any) -> tuple[Any, Any]:
        if self.run is None:
            raise self.state.not_ready()
        return await super().prepare(raw)

    async def respond(self, request: web.Request, job, context) -> tuple[web.StreamResponse, str]:
        req: api.AudioRequest = context.request
        if req.form.stream:
            return await self._stream(request, job), "200"
        kind, value = await job.events.get()
        while kind == "delta":  # not asked to stream: the pipeline's deltas are not sent
            kind, value = await job.events.get()
        if kind == "error":
            raise event_error(value)
        self._observe(job, value)
        content_type, body = api.answer(req, value.transcript)
        if isinstance(body, dict):
            return web.json_response(body), "200"
        return web.Response(text=body, content_type=content_type), "200"

    async def _stream(self, request: web.Request, job) -> web.StreamResponse:
        kind, value = await job.events.get()
        if kind == "error":  # failed before any text: a plain error answer, not a stream
            raise event_error(value)
        sse = SSEWriter(request)
        await sse.open()
        request[STREAMING] = True
        while kind == "delta":
            await sse.write(api.delta_event(value))
            kind, value = await job.events.get()
        if kind == "error":
            err = value if isinstance(value, ApiError) else ApiError(500, str(value), "server_error")
            await sse.close(b"data: " + json.dumps(err.body()).encode() + b"\n\n")
            return sse.response
        self._observe(job, value)
        await sse.close(api.done_event(value.transcript))
        return sse.response

    def _observe(self, job, done) -> None:
        m = self.state.metrics
        duration = time.monotonic() - job.submitted_at
        m.e2e.observe(duration)
        self.state.admission.observe(duration)
        m.task_documents.labels(self.task.value).inc(1)
        seconds = done.transcript.duration
        m.audio_seconds.inc(seconds)
        if seconds > 0:
            m.audio_rtf.observe(done.compute_s / seconds)
