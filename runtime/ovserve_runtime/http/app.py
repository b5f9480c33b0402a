"""App: the aiohttp application of the runtime: OpenAI-compatible /v3 (and /v1) endpoints, health, status
and metrics.

The server owns no pipeline: it turns requests into engine.GenRequest objects and answers with the token
events the engine pushes back. Every request that reaches the engine is cancelled in a `finally` when the
handler ends early (client disconnect, write error), so the engine gives its slot back.

A generation request: the body is read with a size bound (checked on Content-Length before reading) and a
deadline; only then is it admitted (admission.py: a stalled upload holds no place in the queue and is not
counted in ovserve_queue_depth). Validation, the chat template and image decoding run on the loop for a
small body and in a bounded thread pool otherwise (prepare.py), the prompt is tokenized by the batch encoder
(encoder.py), and the answer goes out through the output path (output.py). A middleware turns anything that
escapes a handler (aiohttp's 404/405/413, an unexpected exception) into the OpenAI error JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

from aiohttp import web

from .. import endpoints
from ..admission import Admission
from ..detok import Detokenizer
from ..drain import SHUTTING_DOWN, Drain
from ..encoder import BatchEncoder
from ..engine import Events
from ..flags import RuntimeFlags, default
from ..grammars import GrammarService
from ..metrics import Metrics
from ..openai import assistant, responses, stops
from ..openai.errors import ApiError, too_large, unknown_model
from ..openai.grammar import GrammarError, Limits
from ..openai.stops import StopText
from ..openai.support import PipelineSupport
from ..report import Capabilities, Reason, RuntimeReport, State, Task
from ..tasks import install_routes as install_task_routes
from . import prepare
from .output import StreamOutput, collect
from .sse import SSEWriter
from .watchdog import Watchdog

log = logging.getLogger("ovserve.server")


@dataclass
class ServerConfig:
    """What the HTTP side runs with. A field named like a flag is that flag (flags.py: its default, bounds
    and meaning); `from_flags` builds one from the command line."""

    served_name: str
    max_prompt_tokens: int = default("max_prompt_tokens")  # 0: the model's max position
    default_max_tokens: int = default("default_max_tokens")
    max_queued_requests: int = default("max_queued_requests")  # beyond max_num_seqs generating + this many: 429
    max_body_bytes: int = default("max_body_bytes")
    body_timeout_seconds: float = default("body_timeout_seconds")  # the body must arrive within this (408)
    liveness_stall_seconds: float = default("liveness_stall_seconds")  # the progress watchdog's floor
    max_images: int = default("max_images")  # image parts per request
    max_image_pixels: int = default("max_image_pixels")  # per image, from its header, before decoding
    max_decoded_image_bytes: int = default("max_decoded_image_bytes")  # RGB bytes of all the images of a request
    prepare_threads: int = default("prepare_threads")  # workers for bodies over INLINE_BODY_BYTES; 0: min(4,CPUs)
    drain_timeout_s: float = default("drain_timeout_seconds")  # SIGTERM: how long in-flight requests may run
    stream_interval_s: float = default("stream_interval_ms") / 1000  # text this close to a stream's last write waits
    tool_parser: str = default("tool_parser")  # AUTO: from the chat template (openai/assistant.resolve_parsers)
    grammar_timeout_seconds: float = default("grammar_timeout_seconds")  # one grammar build, in its worker
    max_grammar_bytes: int = default("max_grammar_bytes")
    grammar_cache_entries: int = default("grammar_cache_entries")
    grammar_cache_bytes: int = default("grammar_cache_bytes")
    grammar_memory_bytes: int = default("grammar_memory_bytes")  # the worker's RLIMIT_AS
    reasoning_parser: str = default("reasoning_parser")

    @classmethod
    def from_flags(cls, flags: RuntimeFlags, served_name: str) -> ServerConfig:
        # served_name: the CLI resolves it (the directory name when the flag is unset)
        same = ({f.name for f in fields(cls)} & set(RuntimeFlags.model_fields)) - {"served_name"}
        return cls(
            served_name=served_name,
            drain_timeout_s=flags.drain_timeout_seconds,
            stream_interval_s=flags.stream_interval_ms / 1000,
            **flags.model_dump(include=same),
        )


def error_response(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status, headers=err.headers)


# aiohttp's own refusals (no route, wrong method, body over client_max_size) in OpenAI format
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
STREAMING = "ovserve.streaming"  # request key: set once an SSE response has been sent its headers
INLINE_BODY_BYTES = 16 * 1024  # a body this small is validated on the event loop (no pool round trip)
# without a token table: no token is assumed longer than this many characters (the prompt-size pre-check)
DEFAULT_MAX_TOKEN_CHARS = 256


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


class App:
    def __init__(self, cfg: ServerConfig, report: RuntimeReport, metrics: Metrics | None = None) -> None:
        self.cfg = cfg
        self.report = report
        self.metrics = metrics or Metrics()
        self.metrics.set_report(report)
        self.engine = None
        self.encoder: BatchEncoder | None = None
        self.max_position: int | None = None
        self.max_token_chars = DEFAULT_MAX_TOKEN_CHARS
        self.support = PipelineSupport(structured_output=False, images=False)
        self.parsers = assistant.Parsers()  # tool calling and reasoning: resolved from the chat template at attach
        self.admission = Admission(max_queued=cfg.max_queued_requests)
        self.metrics.queue_limit.set(cfg.max_queued_requests)
        self.watchdog = Watchdog(cfg.liveness_stall_seconds)
        self.created = int(time.time())
        self.pool = ThreadPoolExecutor(
            max_workers=cfg.prepare_threads or min(4, os.cpu_count() or 1), thread_name_prefix="prepare"
        )
        # client_max_size bounds a chunked body too (Content-Length is checked before reading)
        self.web = web.Application(client_max_size=cfg.max_body_bytes, middlewares=[json_errors])
        self.grammars = GrammarService(
            Limits(max_regex_bytes=cfg.max_grammar_bytes),
            cfg.grammar_timeout_seconds,
            cfg.grammar_memory_bytes,
            cfg.grammar_cache_entries,
            cfg.grammar_cache_bytes,
            on_outcome=self.metrics.grammar_outcome,
        )
        self.web.on_cleanup.append(self._close_pool)
        r = self.web.router
        for prefix in endpoints.API_PREFIXES:
            r.add_post(f"{prefix}/chat/completions", self.chat, expect_handler=self._expect)
            r.add_post(f"{prefix}/completions", self.completions, expect_handler=self._expect)
            r.add_get(f"{prefix}/models", self.models)
            r.add_get(f"{prefix}/models/{{model}}", self.model)
        install_task_routes(self)  # /v3/embeddings, /v3/rerank (tasks/)
        r.add_get(endpoints.STATUS, self.status)
        r.add_get(endpoints.LIVE, self.live)
        r.add_get(endpoints.READY, self.ready)
        r.add_get(endpoints.METRICS, self.prom)
        for path in (endpoints.OPENAPI, *(f"{p}{endpoints.OPENAPI}" for p in endpoints.API_PREFIXES)):
            r.add_get(path, self.openapi)
        self._openapi: bytes | None = None  # rendered at the first request (pydantic's schema pass: ~100 ms)
        self.drain = Drain(cfg.drain_timeout_s, abort=self._abort)
        self.drain.install(self.web)

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

    async def _close_pool(self, _app: web.Application) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.grammars.close()
        if self.encoder is not None:
            self.encoder.close()

    # --- state ---------------------------------------------------------------------------------
    def set_report(self, report: RuntimeReport) -> None:
        self.report = report
        self.metrics.set_report(report)

    def attach(self, engine, max_position: int | None) -> None:
        self.engine = engine
        self.max_position = max_position
        self.encoder = BatchEncoder(engine.tokenizer)
        engine.attach(asyncio.get_running_loop())
        self.admission.capacity = engine.capacity
        self.metrics.attach(engine, self.counts)
        table = getattr(engine, "token_table", None)
        texts = getattr(table, "texts", None)
        if texts:
            self.max_token_chars = max(1, max(len(t) for t in texts if t is not None))
        from ..tasks.worker import TaskEngine

        generates = not isinstance(engine, TaskEngine)  # embeddings and rerank servings generate no text
        self.support = PipelineSupport(
            structured_output=generates and not engine.is_vlm,
            images=engine.is_vlm,
            logprobs=generates and engine.continuous_batching,
        )
        if self.support.structured_output:
            self.grammars.warm()  # spawn the grammar worker now, not on the first schema
        template = None
        if generates:
            try:
                template = engine.tokenizer.chat_template
            except Exception:  # a tokenizer without one
                template = None
        self.parsers = assistant.resolve_parsers(str(self.cfg.tool_parser), str(self.cfg.reasoning_parser), template)
        log.info(
            "tool parser: %s (%s%s); reasoning parser: %s (%s%s)",
            self.parsers.tool or "none",
            self.parsers.tool_source,
            f": {self.parsers.tool_detail}" if self.parsers.tool_detail else "",
            self.parsers.reasoning or "none",
            self.parsers.reasoning_source,
            f": {self.parsers.reasoning_detail}" if self.parsers.reasoning_detail else "",
        )

    def capabilities(self) -> Capabilities:
        """What this model and pipeline serve (the runtime report's `capabilities`)."""
        return Capabilities(
            structuredOutput=self.support.structured_output,
            images=self.support.images,
            toolParser=self.parsers.tool if self.parsers.renders_tools else None,
            reasoningParser=self.parsers.reasoning,
            logprobs=self.support.logprobs,
            maxContext=self.max_position,
            maxPromptTokens=self.prompt_limit,
        )

    def counts(self) -> tuple[int, int]:
        """(queued, running): requests admitted here and not generating, and those generating."""
        running = min(self.engine.running, self.admission.inflight) if self.engine is not None else 0
        return self.admission.queued(running), running

    def fail(self, message: str) -> None:
        """On the loop, when the pipeline broke: every request still waiting for events ends with an error
        now (the engine answers them too; whichever comes first ends the request)."""
        for greq in self.drain.generations():
            if greq.events is not None:
                greq.events.put_nowait(("error", f"pipeline failed: {message}"))

    @property
    def prompt_limit(self) -> int | None:
        limits = [x for x in (self.cfg.max_prompt_tokens, self.max_position) if x]
        return min(limits) if limits else None

    # --- plain endpoints -----------------------------------------------------------------------
    async def status(self, _req: web.Request) -> web.Response:
        return web.json_response(self.report.model_dump(mode="json"))

    async def live(self, _req: web.Request) -> web.Response:
        if self.engine is not None and self.engine.fatal is not None:
            return web.json_response({"live": False, "reason": f"pipeline failed: {self.engine.fatal}"}, status=503)
        stalled = self.watchdog.check(
            asyncio.get_running_loop().time(), self.drain.generations(), getattr(self.engine, "step_s", None)
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
        ok = self.report.state == State.READY and self.engine is not None and self.engine.fatal is None
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
        return {"id": self.cfg.served_name, "object": "model", "created": self.created, "owned_by": "ovserve"}

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_obj()]})

    async def model(self, req: web.Request) -> web.Response:
        if req.match_info["model"] != self.cfg.served_name:
            return error_response(unknown_model(req.match_info["model"], self.cfg.served_name))
        return web.json_response(self._model_obj())

    # --- generation ----------------------------------------------------------------------------
    async def chat(self, req: web.Request) -> web.StreamResponse:
        return await self._generate(req, chat=True)

    async def completions(self, req: web.Request) -> web.StreamResponse:
        return await self._generate(req, chat=False)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        endpoint = "chat" if chat else "completions"
        arrived = time.monotonic()
        served = self.report.task.resolved
        if served is not None and served != Task.TEXT_GENERATION:  # an embeddings or rerank serving
            from ..tasks.serving import wrong_task

            return error_response(wrong_task(served, request.path, Task.TEXT_GENERATION))
        try:
            raw = await self._read_body(request)  # before admission: an upload in progress holds no place
        except ApiError as err:
            self.metrics.requests.labels(endpoint, str(err.status)).inc()
            return error_response(err)
        if not self.admission.try_admit():
            self.metrics.requests.labels(endpoint, "429").inc()
            return self._queue_full()
        try:
            return await self._admitted(request, raw, chat, endpoint, arrived)
        finally:
            self.admission.release()

    def _queue_full(self) -> web.Response:
        _queued, running = self.counts()
        retry = self.admission.retry_after(running)
        err = ApiError(
            429,
            f"the server is at capacity: {self.admission.inflight} requests in flight ({running} generating, "
            f"at most {self.cfg.max_queued_requests} may wait); retry after {retry} s",
            "rate_limit_exceeded",
            code="queue_full",
            headers={"Retry-After": str(retry)},
        )
        return error_response(err)

    def _on_the_way(self, leaving: int = 0) -> int:
        """Admitted requests not yet submitted to the engine, less `leaving` (the caller's own)."""
        return self.admission.inflight - self.drain.generating() - leaving

    def _hint_preparing(self, leaving: int = 0) -> None:
        """Tell the engine how many admitted requests are on their way (a burst's first prefill waits)."""
        if self.engine is not None:
            self.engine.preparing(self._on_the_way(leaving))

    async def _admitted(
        self, request: web.Request, raw: bytes, chat: bool, endpoint: str, arrived: float
    ) -> web.StreamResponse:
        self._hint_preparing()
        try:
            staged, greq, prompt_tokens = await self._prepare(raw, chat)
        except ApiError as err:
            self.metrics.requests.labels(endpoint, str(err.status)).inc()
            self._hint_preparing(leaving=1)  # this one is not on its way any more
            return error_response(err)
        body = staged.body
        greq.loop = asyncio.get_running_loop()
        greq.events = Events()
        greq.submitted_at = arrived
        # admitted, not yet submitted: the engine waiting to prefill a burst knows more is coming
        greq.preparing = self._on_the_way(leaving=1)
        try:
            self.engine.submit(greq)
        except Exception as exc:
            self.metrics.requests.labels(endpoint, "503").inc()
            return error_response(ApiError(503, str(exc), "server_error", code="pipeline_failed"))
        self.drain.track(greq)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        status = "200"
        try:
            plan = staged.plan
            if body.stream:
                resp, gone = await self._stream(request, greq, rid, chat, prompt_tokens, body.include_usage, plan)
                if gone:
                    status = "499"
                return resp
            if body.n is not None and body.n > 1:
                return await self._choices(greq, body.n, rid, chat, prompt_tokens, plan)
            return web.json_response(await self._answer(greq, plan, chat, rid, prompt_tokens))
        except ApiError as err:
            status = str(err.status)
            return error_response(err)
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"  # client closed the request
            raise
        finally:
            greq.sink = None  # nothing may reach this connection once its handler is gone (keep-alive reuse)
            self.drain.untrack(greq)
            self.engine.cancel(greq)  # no-op when finished; frees the slot otherwise
            self.metrics.requests.labels(endpoint, status).inc()
            self._observe(greq, prompt_tokens)

    async def _answer(self, greq, plan, chat: bool, rid: str, prompt_tokens: int) -> dict:
        """The response body of one finished generation (not streamed)."""
        text, finish, logprobs = await collect(greq, self.engine.tokenizer)
        if greq.config.stop_strings:
            text = stops.cut(text, greq.config.stop_strings)
        message = None
        if not plan.passthrough:  # tool calls and reasoning split off the text
            message = assistant.message(plan, text)
            finish = assistant.finish_reason(plan, finish, len(message.get("tool_calls", ())))
        usage = responses.usage(prompt_tokens, greq.generated)
        return responses.completion(
            rid, chat, self.cfg.served_name, int(time.time()), text, finish, usage, message, logprobs
        )

    async def _choices(self, greq, n: int, rid: str, chat: bool, prompt_tokens: int, plan) -> web.Response:
        """n > 1, not streamed: n generations of the prompt submitted together (continuous batching runs them in
        one batch, the legacy pipeline one after another). Sampling with a seed s: choice i uses s + i (without
        one, each its own random seed); greedy choices are alike, as OpenAI's are."""
        from ..engine import GenRequest
        from ..engine.wire import config_from_dict, config_to_dict

        fields_ = config_to_dict(greq.config)
        extra = []
        for i in range(1, n):
            cfg = config_from_dict(fields_)
            if cfg.do_sample:  # prepare gave an unseeded request a random seed: choice i samples with seed + i
                cfg.rng_seed = (fields_["rng_seed"] + i) % 2**64
            g = GenRequest(
                config=cfg,
                max_new_tokens=greq.max_new_tokens,
                input_ids=greq.input_ids,
                prompt=greq.prompt,
                images=list(greq.images),
                logprobs=greq.logprobs,
                loop=greq.loop,
                events=Events(),
                submitted_at=greq.submitted_at,
            )
            extra.append(g)
        answers: list[asyncio.Future] = []
        try:
            for g in extra:
                self.engine.submit(g)
                self.drain.track(g)
            answers = [asyncio.ensure_future(self._answer(g, plan, chat, rid, prompt_tokens)) for g in [greq, *extra]]
            bodies = await asyncio.gather(*answers)
        finally:
            for t in answers:  # one failed (or the client left): the others stop waiting too
                t.cancel()
            for g in extra:
                g.sink = None
                self.drain.untrack(g)
                self.engine.cancel(g)
                self._observe(g, 0)
        generated = sum(g.generated for g in [greq, *extra])
        choices = [b["choices"][0] for b in bodies]
        return web.json_response(responses.with_choices(bodies[0], choices, responses.usage(prompt_tokens, generated)))

    async def _stream(
        self, request: web.Request, greq, rid: str, chat: bool, prompt_tokens: int, include_usage: bool, plan
    ) -> tuple[web.StreamResponse, bool]:
        """(the response, whether the client went away while it was written)."""
        # wait for the first event before committing to a 200 (an immediate failure stays a clean error)
        from ..openai.errors import event_error

        first = await greq.events.get()
        if first[0] == "error":
            raise event_error(first[1])
        writer = SSEWriter(request)
        chunks = responses.Chunks(rid, chat, self.cfg.served_name, int(time.time()), include_usage)
        try:
            await writer.open()
            request[STREAMING] = True
            detok = Detokenizer(self.engine.tokenizer, self.engine.token_table)
            if greq.config.stop_strings:
                detok = StopText(detok, greq.config.stop_strings)
            parse = None if plan.passthrough else assistant.OutputStream(plan)
            out = StreamOutput(greq, writer, chunks, detok, self.cfg.stream_interval_s, parse)
            await out.run(first, prompt_tokens)
        except ConnectionResetError:
            # the client went away while we wrote (a disconnect the handler was not yet cancelled for): the
            # handler returns and aiohttp drops the connection quietly; escaping, it would log a server error
            return writer.response, True
        return writer.response, False

    def _abort(self, greq, message: str) -> None:
        """Drain deadline: end this generation now; its handler answers 503 or ends the stream with an error."""
        self.engine.cancel(greq)
        greq.events.put_nowait(("error", ApiError(503, message, "server_error", code=SHUTTING_DOWN)))

    def _observe(self, greq, prompt_tokens: int) -> None:
        m = self.metrics
        m.prompt_tokens.inc(prompt_tokens)
        m.generated_tokens.inc(greq.generated)
        if greq.first_token_at is not None:
            m.ttft.observe(greq.first_token_at - greq.submitted_at)
            end = time.monotonic()
            m.e2e.observe(end - greq.submitted_at)
            self.admission.observe(end - greq.submitted_at)
            if greq.generated > 1:
                m.tpot.observe((end - greq.first_token_at) / (greq.generated - 1))

    async def _read_body(self, request: web.Request) -> bytes:
        """The raw body, refused with 413 before it is read when it declares (or turns out) too large, and
        with 408 when it does not arrive within --body-timeout-seconds."""
        limit = self.cfg.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(request.content_length, limit)
        try:
            async with asyncio.timeout(self.cfg.body_timeout_seconds):
                return await request.read()
        except web.HTTPRequestEntityTooLarge as exc:  # chunked: aiohttp stops reading at the limit
            raise too_large(None, limit) from exc
        except TimeoutError:
            raise ApiError(
                408,
                f"the request body did not arrive within {self.cfg.body_timeout_seconds:g}s",
                code="request_timeout",
                headers={"Connection": "close"},
            ) from None

    async def _prepare(self, raw: bytes, chat: bool):
        """Validation, chat template and image decoding (in the bounded pool, or inline for a small body),
        then tokenization (the batch encoder), then the generation config."""
        try:
            if len(raw) <= INLINE_BODY_BYTES:  # a pool round trip costs more than parsing it here
                staged = prepare.stage(self, raw, chat)
            else:
                loop = asyncio.get_running_loop()
                staged = await loop.run_in_executor(self.pool, prepare.stage, self, raw, chat)
            if staged.job is not None:  # in the grammar worker, with a deadline; cached by content
                try:
                    staged.constraint = await self.grammars.build(staged.job)
                except GrammarError as exc:
                    raise ApiError(400, str(exc), param=staged.job.param, code="invalid_value") from None
            ids = await self.encoder.encode(staged.prompt, add_special_tokens=not chat)
            greq, prompt_tokens = prepare.build(self, self.engine, staged, ids)
        except ApiError:
            raise
        except Exception as exc:  # a bug or a tokenizer failure: a counted JSON 500, never a hang
            log.exception("preparing a request failed")
            raise ApiError(500, "internal server error", "server_error", code="internal_error") from exc
        return staged, greq, prompt_tokens


def failed_state(report: RuntimeReport, message: str) -> RuntimeReport:
    """The report after a fatal pipeline error at serving time: EngineFailed, never ModelLoadFailed (the
    model had loaded and served)."""
    p = report.pipeline.model_copy(update={"reason": Reason.ENGINE_FAILED, "message": message})
    return report.model_copy(update={"state": State.FAILED, "pipeline": p})
