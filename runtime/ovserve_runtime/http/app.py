"""App: the aiohttp application of the runtime, thin: it builds the serving state and the servings
(serving/), registers their routes (OpenAI-compatible /v3 and /v1, the task endpoints), the middleware that
turns anything escaping a handler (aiohttp's 404/405/413, an unexpected exception) into the OpenAI error JSON,
and answers the plain endpoints itself: health (with the liveness watchdog), status, metrics, models, the
OpenAPI document.

What a request goes through (body limit and deadline, admission, readiness, prepare, submit, track, release,
metrics) is serving/base.py's, the same for every endpoint; chat and completions are serving/generate.py's,
embeddings and rerank serving/task.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from .. import endpoints
from ..metrics import Metrics
from ..openai.errors import ApiError, too_large, unknown_model
from ..refusals import Refusals
from ..report import Capabilities, Reason, RuntimeReport, State, Task
from ..serving import (
    REFUSAL,
    STREAMING,
    AudioServing,
    ChatServing,
    CompletionServing,
    ResponsesServing,
    ServerConfig,
    ServingState,
    TaskServing,
    error_response,
)
from ..tasks import AUDIO_ROUTES, EXTRA_RERANK_PATHS, TASK_ROUTES
from .watchdog import Watchdog

log = logging.getLogger("ovserve.server")

__all__ = ["App", "ServerConfig", "error_response", "failed_state", "json_errors"]

# aiohttp's own refusals (no route, wrong method, body over client_max_size) in OpenAI format
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    """Nothing leaves as plain text: HTTP errors and unexpected exceptions become the OpenAI error JSON."""
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        resp = error_response(ApiError(exc.status, f"{exc.reason}: {request.method} {request.path}", code=code))
        if "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        if request.get(STREAMING):
            raise  # the 200 headers are out: aiohttp closes the connection, the client sees a cut stream
        return error_response(ApiError(500, "internal server error", "server_error", code="internal_error"))


@web.middleware
async def unread_body_closes(request: web.Request, handler) -> web.StreamResponse:
    """An answer given before the body was read to its end (a 404, a wrong task) closes the connection instead of
    letting aiohttp drain the rest: a body that fails to decode (a broken gzip) would fail again in that drain,
    logged as an unhandled server exception, and a large one would be read for nothing."""
    resp = await handler(request)
    if request.body_exists and not request.content.is_eof() and not resp.prepared:
        request.content.feed_eof()
        resp.force_close()
    return resp


class App:
    def __init__(self, cfg: ServerConfig, report: RuntimeReport, metrics: Metrics | None = None) -> None:
        self.state = ServingState(cfg, report, metrics)
        self.watchdog = Watchdog(cfg.liveness_stall_seconds)
        # client_max_size bounds a chunked body too (Content-Length is checked before reading)
        self.refusals = Refusals(self.state.metrics.refusals)
        self.web = web.Application(
            client_max_size=cfg.max_body_bytes, middlewares=[unread_body_closes, self._visible, json_errors]
        )
        self.web.on_cleanup.append(self._close)
        self.chat = ChatServing(self.state)
        self.completions = CompletionServing(self.state)
        self.responses = ResponsesServing(self.state)
        self.task_servings = {
            t: TaskServing(self.state, t, path, inline=t == Task.EMBEDDINGS) for t, path in TASK_ROUTES.items()
        }
        self.audio_servings = [AudioServing(self.state, path, translate) for path, translate in AUDIO_ROUTES.items()]
        r = self.web.router
        for prefix in endpoints.API_PREFIXES:
            r.add_post(f"{prefix}/chat/completions", self.chat.handle, expect_handler=self._expect)
            r.add_post(f"{prefix}/completions", self.completions.handle, expect_handler=self._expect)
            r.add_post(f"{prefix}/responses", self.responses.handle, expect_handler=self._expect)
            r.add_get(f"{prefix}/responses/{{response_id}}", self.responses.get)
            r.add_delete(f"{prefix}/responses/{{response_id}}", self.responses.delete)
            r.add_get(f"{prefix}/models", self.models)
            r.add_get(f"{prefix}/models/{{model}}", self.model)
        for prefix in endpoints.API_PREFIXES:  # /v3/embeddings, /v3/rerank
            for t, path in TASK_ROUTES.items():
                r.add_post(f"{prefix}/{path}", self.task_servings[t].handle)
        for path in EXTRA_RERANK_PATHS:
            r.add_post(path, self.task_servings[Task.RERANK].handle)
        for prefix in endpoints.API_PREFIXES:  # /v1/audio/transcriptions, /v1/audio/translations
            for serving in self.audio_servings:
                r.add_post(f"{prefix}/{serving.endpoint}", serving.handle, expect_handler=self._expect)
        r.add_get(endpoints.STATUS, self.status)
        r.add_get(endpoints.LIVE, self.live)
        r.add_get(endpoints.READY, self.ready)
        r.add_get(endpoints.METRICS, self.prom)
        for path in (endpoints.OPENAPI, *(f"{p}{endpoints.OPENAPI}" for p in endpoints.API_PREFIXES)):
            r.add_get(path, self.openapi)
        self._openapi: bytes | None = None  # rendered at the first request (pydantic's schema pass: ~100 ms)
        self.state.drain.install(self.web)

    @web.middleware
    async def _visible(self, request: web.Request, handler) -> web.StreamResponse:
        """Every 4xx answered is logged (rate-limited) and counted by code and param: refusals.py."""
        resp = await handler(request)
        if 400 <= resp.status < 500:
            err = resp.get(REFUSAL)
            self.refusals.record(
                request.method, request.path, resp.status, getattr(err, "code", None), getattr(err, "param", None)
            )
        return resp

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue` (curl sends it for bodies over 1 MiB): a body over the limit is refused
        before the client uploads it."""
        if request.content_length is not None and request.content_length > self.cfg.max_body_bytes:
            return error_response(too_large(request.content_length, self.cfg.max_body_bytes))
        if request.headers.get("Expect", "").lower() != "100-continue":
            return error_response(ApiError(417, "only 'Expect: 100-continue' is supported", code="expectation_failed"))
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    async def _close(self, _app: web.Application) -> None:
        self.state.close()

    # --- the state (serving/state.py) ----------------------------------------------------------
    @property
    def cfg(self) -> ServerConfig:
        return self.state.cfg

    @property
    def report(self) -> RuntimeReport:
        return self.state.report

    @property
    def metrics(self) -> Metrics:
        return self.state.metrics

    @property
    def engine(self):
        return self.state.engine

    @property
    def drain(self):
        return self.state.drain

    @property
    def parsers(self):
        return self.state.parsers

    def set_report(self, report: RuntimeReport) -> None:
        self.state.set_report(report)

    def attach(self, engine, max_position: int | None) -> None:
        from ..tasks.worker import TaskEngine

        # embeddings and rerank servings generate no text
        self.state.attach(engine, max_position, generates=not isinstance(engine, TaskEngine))

    def attach_service(self, task: Task | None, engine, service) -> None:
        """An embeddings, rerank or transcription serving's service (tasks.Loaded.service), once its pipeline runs."""
        serving = self.task_servings.get(task)
        if serving is not None and service is not None:
            serving.attach(engine, service)
        if task == Task.TRANSCRIPTION and service is not None:
            for audio in self.audio_servings:
                audio.attach(engine, service)

    def capabilities(self) -> Capabilities:
        """What this model and pipeline serve (the runtime report's `capabilities`)."""
        return self.state.capabilities()

    def fail(self, message: str) -> None:
        """On the loop, when the pipeline broke: every request still waiting for events ends with an error."""
        self.state.fail(message)

    # --- plain endpoints -----------------------------------------------------------------------
    async def status(self, _req: web.Request) -> web.Response:
        return web.json_response(self.report.model_dump(mode="json"))

    async def live(self, _req: web.Request) -> web.Response:
        engine = self.engine
        if engine is not None and engine.fatal is not None:
            return web.json_response({"live": False, "reason": f"pipeline failed: {engine.fatal}"}, status=503)
        stalled = self.watchdog.check(
            asyncio.get_running_loop().time(), self.drain.generations(), getattr(engine, "step_s", None)
        )
        if stalled is not None:
            if self.watchdog.stalled is None:
                log.error("liveness: %s", stalled)
            self.watchdog.stalled = stalled
            return web.json_response({"live": False, "reason": stalled}, status=503)
        self.watchdog.stalled = None
        return web.json_response({"live": True}, status=200)

    async def ready(self, _req: web.Request) -> web.Response:
        if self.drain.draining:
            return web.json_response({"ready": False, "state": "draining"}, status=503)
        engine = self.engine
        ok = self.report.state == State.READY and engine is not None and engine.fatal is None
        return web.json_response({"ready": ok, "state": str(self.report.state)}, status=200 if ok else 503)

    async def prom(self, _req: web.Request) -> web.Response:
        body, ctype = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def openapi(self, _req: web.Request) -> web.Response:
        """The OpenAPI document of this API (openapi.py), generated from the request models."""
        if self._openapi is None:
            from importlib.metadata import PackageNotFoundError, version

            from .. import openapi

            try:
                v = version("ovserve")
            except PackageNotFoundError:
                v = "0"
            self._openapi = json.dumps(openapi.document(v)).encode()
        return web.Response(body=self._openapi, content_type="application/json")

    def _model_obj(self) -> dict:
        return {"id": self.cfg.served_name, "object": "model", "created": self.state.created, "owned_by": "ovserve"}

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_obj()]})

    async def model(self, req: web.Request) -> web.Response:
        if req.match_info["model"] != self.cfg.served_name:
            return error_response(unknown_model(req.match_info["model"], self.cfg.served_name))
        return web.json_response(self._model_obj())


def failed_state(report: RuntimeReport, message: str) -> RuntimeReport:
    """The report after a fatal pipeline error at serving time: EngineFailed, never ModelLoadFailed (the
    model had loaded and served)."""
    p = report.pipeline.model_copy(update={"reason": Reason.ENGINE_FAILED, "message": message})
    return report.model_copy(update={"state": State.FAILED, "pipeline": p})
