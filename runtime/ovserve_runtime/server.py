"""HTTP API (aiohttp): OpenAI-compatible /v3 (and /v1) endpoints, health, status and metrics.

The server owns no pipeline: it turns requests into engine.GenRequest objects and streams the token
events the engine pushes back. Every request that reaches the engine is cancelled in a `finally` when
the handler ends early (client disconnect, write error), so the engine gives its slot back.

The event loop does I/O: the body is read with a size bound (checked on Content-Length before reading),
then validation (openai_request), the chat template and image decoding run on the loop for a small body
and in a bounded thread pool otherwise, and the prompt is tokenized by the batch encoder (encoder.py).
A middleware turns anything that escapes a handler (aiohttp's 404/405/413, an unexpected exception) into
the OpenAI error JSON, never aiohttp's plain text.
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
from typing import Any

from aiohttp import web

from . import endpoints
from .admission import Admission
from .detok import Detokenizer
from .drain import SHUTTING_DOWN, Drain
from .encoder import BatchEncoder
from .engine import Events
from .flags import RuntimeFlags, default
from .metrics import Metrics
from .openai_request import ChatRequest, CompletionRequest, RequestError, parse
from .report import Reason, RuntimeReport, State, Task
from .tasks import install_routes as install_task_routes

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
    max_images: int = default("max_images")  # image parts per request
    max_image_pixels: int = default("max_image_pixels")  # per image, from its header, before decoding
    max_decoded_image_bytes: int = default("max_decoded_image_bytes")  # RGB bytes of all the images of a request
    prepare_threads: int = default("prepare_threads")  # workers for bodies over INLINE_BODY_BYTES; 0: min(4,CPUs)
    drain_timeout_s: float = default("drain_timeout_seconds")  # SIGTERM: how long in-flight requests may run
    stream_interval_s: float = default("stream_interval_ms") / 1000  # text this close to a stream's last write waits

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


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=headers)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _event_error(value: Any) -> ApiError:
    """The ApiError of an ("error", value) engine event: an ApiError as is (the drain's), else a failure."""
    if isinstance(value, ApiError):
        return value
    return ApiError(500, f"generation failed: {value}", "server_error", code="generation_failed")


def _too_large(size: int | None, limit: int) -> ApiError:
    got = f"{size} bytes" if size is not None else "more"
    return ApiError(413, f"the request body is {got}; the limit is {limit} bytes", code="request_too_large")


# aiohttp's own refusals (no route, wrong method, body over client_max_size) in OpenAI format
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
STREAMING = "ovserve.streaming"  # request key: set once an SSE response has been sent its headers
CLIENT_GONE = "ovserve.client_gone"  # request key: the client disconnected while its stream was written
INLINE_BODY_BYTES = 16 * 1024  # a body this small is validated on the event loop (no pool round trip)


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    """Nothing leaves as plain text: HTTP errors and unexpected exceptions become the OpenAI error JSON."""
    try:
        return await handler(request)
    except ApiError as err:
        return err.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        err = ApiError(exc.status, f"{exc.reason}: {request.method} {request.path}", code=code)
        resp = err.response()
        if "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        if request.get(STREAMING):
            raise  # the 200 headers are out: aiohttp closes the connection, the client sees a cut stream
        return ApiError(500, "internal server error", "server_error", code="internal_error").response()


class App:
    def __init__(self, cfg: ServerConfig, report: RuntimeReport, metrics: Metrics | None = None) -> None:
        self.cfg = cfg
        self.report = report
        self.metrics = metrics or Metrics()
        self.metrics.set_report(report)
        self.engine = None
        self.encoder: BatchEncoder | None = None
        self.max_position: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.admission = Admission(max_queued=cfg.max_queued_requests)
        self.metrics.queue_limit.set(cfg.max_queued_requests)
        self.created = int(time.time())
        self.pool = ThreadPoolExecutor(
            max_workers=cfg.prepare_threads or min(4, os.cpu_count() or 1), thread_name_prefix="prepare"
        )
        # client_max_size bounds a chunked body too (Content-Length is checked before reading)
        self.web = web.Application(client_max_size=cfg.max_body_bytes, middlewares=[json_errors])
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
        self.drain = Drain(cfg.drain_timeout_s, abort=self._abort)
        self.drain.install(self.web)

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue` (curl sends it for bodies over 1 MiB): a body over the limit is refused
        before the client uploads it."""
        if request.content_length is not None and request.content_length > self.cfg.max_body_bytes:
            return _too_large(request.content_length, self.cfg.max_body_bytes).response()
        if request.headers.get("Expect", "").lower() != "100-continue":
            return ApiError(417, "only 'Expect: 100-continue' is supported", code="expectation_failed").response()
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    async def _close_pool(self, _app: web.Application) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
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
        failed = self.engine is not None and self.engine.fatal is not None
        return web.json_response({"live": not failed}, status=503 if failed else 200)

    async def ready(self, _req: web.Request) -> web.Response:
        if self.drain.draining:
            return web.json_response({"ready": False, "state": "draining"}, status=503)
        ok = self.report.state == State.READY and self.engine is not None and self.engine.fatal is None
        return web.json_response({"ready": ok, "state": str(self.report.state)}, status=200 if ok else 503)

    async def prom(self, _req: web.Request) -> web.Response:
        body, ctype = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    def _model_obj(self) -> dict:
        return {"id": self.cfg.served_name, "object": "model", "created": self.created, "owned_by": "ovserve"}

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_obj()]})

    async def model(self, req: web.Request) -> web.Response:
        if req.match_info["model"] != self.cfg.served_name:
            return self._unknown_model(req.match_info["model"]).response()
        return web.json_response(self._model_obj())

    def _unknown_model(self, name: Any) -> ApiError:
        return ApiError(
            404,
            f"The model '{name}' does not exist; this server serves '{self.cfg.served_name}'",
            param="model",
            code="model_not_found",
        )

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
            from .tasks.serving import wrong_task

            return wrong_task(served, request.path, Task.TEXT_GENERATION).response()
        if not self.admission.try_admit():
            self.metrics.requests.labels(endpoint, "429").inc()
            return self._queue_full()
        try:
            return await self._admitted(request, chat, endpoint, arrived)
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
        )
        return err.response(headers={"Retry-After": str(retry)})

    def _on_the_way(self, leaving: int = 0) -> int:
        """Admitted requests not yet submitted to the engine, less `leaving` (the caller's own)."""
        return self.admission.inflight - self.drain.generating() - leaving

    def _hint_preparing(self, leaving: int = 0) -> None:
        """Tell the engine how many admitted requests are on their way (a burst's first prefill waits)."""
        if self.engine is not None:
            self.engine.preparing(self._on_the_way(leaving))

    async def _admitted(self, request: web.Request, chat: bool, endpoint: str, arrived: float) -> web.StreamResponse:
        self._hint_preparing()
        try:
            raw = await self._read_body(request)
            body, greq, prompt_tokens = await self._prepare(raw, chat)
        except ApiError as err:
            self.metrics.requests.labels(endpoint, str(err.status)).inc()
            self._hint_preparing(leaving=1)  # this one is not on its way any more
            return err.response()
        stream = bool(body.stream)
        include_usage = body.include_usage
        greq.loop = asyncio.get_running_loop()
        greq.events = Events()
        greq.submitted_at = arrived
        # admitted, not yet submitted: the engine waiting to prefill a burst knows more is coming
        greq.preparing = self._on_the_way(leaving=1)
        try:
            self.engine.submit(greq)
        except Exception as exc:
            self.metrics.requests.labels(endpoint, "503").inc()
            return ApiError(503, str(exc), "server_error", code="pipeline_failed").response()
        self.drain.track(greq)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        status = "200"
        try:
            if stream:
                resp = await self._stream(request, greq, rid, chat, prompt_tokens, include_usage)
                if request.get(CLIENT_GONE):
                    status = "499"
                return resp
            return await self._collect(greq, rid, chat, prompt_tokens)
        except ApiError as err:
            status = str(err.status)
            return err.response()
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"  # client closed the request
            raise
        finally:
            greq.sink = None  # nothing may reach this connection once its handler is gone (keep-alive reuse)
            self.drain.untrack(greq)
            self.engine.cancel(greq)  # no-op when finished; frees the slot otherwise
            self.metrics.requests.labels(endpoint, status).inc()
            self._observe(greq, prompt_tokens)

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
        """The raw body, refused with 413 before it is read when it declares (or turns out) too large."""
        limit = self.cfg.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge as exc:  # chunked: aiohttp stops reading at the limit
            raise _too_large(None, limit) from exc

    async def _prepare(self, raw: bytes, chat: bool):
        """Validation, chat template and image decoding (in the bounded pool, or inline for a small body),
        then tokenization (the batch encoder), then the generation config."""
        try:
            if len(raw) <= INLINE_BODY_BYTES:  # a pool round trip costs more than parsing it here
                body, prompt, images = self._stage(raw, chat)
            else:
                loop = asyncio.get_running_loop()
                body, prompt, images = await loop.run_in_executor(self.pool, self._stage, raw, chat)
            ids = await self.encoder.encode(prompt, add_special_tokens=not chat)
            greq, prompt_tokens = self._build(self.engine, body, prompt, images, ids)
        except ApiError:
            raise
        except Exception as exc:  # a bug or a tokenizer failure: a counted JSON 500, never a hang
            log.exception("preparing a request failed")
            raise ApiError(500, "internal server error", "server_error", code="internal_error") from exc
        return body, greq, prompt_tokens

    def _stage(self, raw: bytes, chat: bool):
        """(body, prompt text, images) of a valid request for this model, or ApiError."""
        try:
            body = parse(raw, chat)
        except RequestError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
        if body.model is not None and body.model != self.cfg.served_name:
            raise self._unknown_model(body.model)
        engine = self.engine
        if engine is None or self.report.state != State.READY:
            raise ApiError(
                503,
                f"the model is not ready (state {self.report.state})",
                "server_error",
                code="model_not_ready",
            )
        if engine.fatal is not None:
            raise ApiError(503, f"the pipeline failed: {engine.fatal}", "server_error", code="pipeline_failed")
        if isinstance(body, ChatRequest):
            prompt, images = self._chat_prompt(engine, body)
            return body, prompt, images
        return body, body.text, []

    def _build(self, engine, body: ChatRequest | CompletionRequest, prompt: str, images: list, ids):
        import openvino as ov

        from .engine import GenRequest

        chat = isinstance(body, ChatRequest)
        max_tokens = body.new_tokens()
        max_param = "max_completion_tokens" if chat and body.max_completion_tokens is not None else "max_tokens"

        # ids: the encoder's (chat: the template carries its own special tokens; completions: with BOS)
        prompt_tokens = len(ids)
        limit = self.prompt_limit
        param = "messages" if chat else "prompt"
        if limit is not None and prompt_tokens > limit:
            raise ApiError(
                400,
                f"the prompt has {prompt_tokens} tokens, more than the limit of {limit}",
                param=param,
                code="context_length_exceeded",
            )
        room = (self.max_position - prompt_tokens) if self.max_position else None
        if max_tokens is None:
            max_tokens = self.cfg.default_max_tokens
            if room is not None:
                max_tokens = max(1, min(max_tokens, room))
        elif room is not None and max_tokens > room:
            raise ApiError(
                400,
                f"prompt ({prompt_tokens} tokens) + {max_param} ({max_tokens}) exceeds the "
                f"model's context of {self.max_position} tokens",
                param=max_param,
                code="context_length_exceeded",
            )

        cfg = engine.new_config()
        cfg.max_new_tokens = max_tokens
        if body.sampling:
            cfg.do_sample = True
            cfg.temperature = body.temperature
            if body.top_p is not None:
                cfg.top_p = body.top_p
            if body.top_k:
                cfg.top_k = body.top_k
            if body.seed is not None:
                cfg.rng_seed = body.seed
        else:
            cfg.do_sample = False
        if body.presence_penalty:
            cfg.presence_penalty = body.presence_penalty
        if body.frequency_penalty:
            cfg.frequency_penalty = body.frequency_penalty
        if body.repetition_penalty:
            cfg.repetition_penalty = body.repetition_penalty
        if body.stop:
            cfg.stop_strings = set(body.stop)
        if body.ignore_eos:
            cfg.ignore_eos = True
        try:  # openvino-genai's own checks, here rather than as a failure at generation time
            cfg.validate()
        except Exception as exc:
            msg = str(exc).strip().splitlines()[-1]
            raise ApiError(400, f"invalid generation parameters: {msg}", code="invalid_value") from exc
        if engine.is_vlm:
            greq = GenRequest(config=cfg, max_new_tokens=max_tokens, prompt=prompt, images=images)
        else:
            greq = GenRequest(config=cfg, max_new_tokens=max_tokens, input_ids=ov.Tensor(ids.reshape(1, -1)))
        return greq, prompt_tokens

    def _chat_prompt(self, engine, body: ChatRequest) -> tuple[str, list]:
        from .images import ImageBudget, ImageError, ImageLimits, decode_data_url, to_tensor

        limits = ImageLimits(
            max_images=self.cfg.max_images,
            max_pixels=self.cfg.max_image_pixels,
            max_decoded_bytes=self.cfg.max_decoded_image_bytes,
        )
        parts_with_images = [
            (i, j)
            for i, m in enumerate(body.messages)
            for j, part in enumerate(m.content or ())
            if part.type == "image_url"
        ]
        if parts_with_images and not engine.is_vlm:
            i, j = parts_with_images[0]
            raise ApiError(
                400,
                "this model is text-only: image_url content is not supported",
                param=f"messages[{i}].content[{j}]",
                code="unsupported_value",
            )
        if len(parts_with_images) > limits.max_images:
            raise ApiError(
                400,
                f"{len(parts_with_images)} images in one request, more than the limit of {limits.max_images}",
                param="messages",
                code="too_many_images",
            )
        budget = ImageBudget(limits)
        flat: list[dict] = []
        images: list = []
        for i, m in enumerate(body.messages):
            parts = []
            for j, part in enumerate(m.content or ()):
                if part.type == "text":
                    parts.append(part.text)
                    continue
                try:
                    img = decode_data_url(part.image_url.url, budget)
                except ImageError as exc:
                    raise ApiError(
                        exc.status, str(exc), param=f"messages[{i}].content[{j}].image_url", code=exc.code
                    ) from exc
                parts.append(f"<ov_genai_image_{len(images)}>")
                images.append(to_tensor(img))
            flat.append({"role": m.role, "content": "".join(parts)})
        try:
            prompt = engine.tokenizer.apply_chat_template(flat, add_generation_prompt=True)
        except Exception:
            # a model without a chat template: a plain transcript
            prompt = "".join(f"{m['role']}: {m['content']}\n" for m in flat) + "assistant:"
        return prompt, images

    async def _events(self, greq):
        while True:
            kind, value = await greq.events.get()
            yield kind, value
            if kind != "tokens":
                return

    async def _collect(self, greq, rid: str, chat: bool, prompt_tokens: int) -> web.Response:
        detok = Detokenizer(self.engine.tokenizer)  # one decode at the end: no table needed
        greq.sink = lambda ids: detok.ids.extend(ids) or True  # tokens gather without waking this handler
        finish = "stop"
        async for kind, value in self._events(greq):
            if kind == "tokens":
                detok.ids.extend(value)
            elif kind == "error":
                raise _event_error(value)
            else:
                finish = value
        text = detok.flush()
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": greq.generated,
            "total_tokens": prompt_tokens + greq.generated,
        }
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return web.json_response(
            {
                "id": rid,
                "object": obj,
                "created": int(time.time()),
                "model": self.cfg.served_name,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _stream(
        self, request: web.Request, greq, rid: str, chat: bool, prompt_tokens: int, include_usage: bool
    ) -> web.StreamResponse:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None, first: bool = False) -> bytes:
            if chat:
                delta: dict[str, Any] = {}
                if first:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            payload = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": self.cfg.served_name,
                "choices": [choice],
            }
            if include_usage:
                payload["usage"] = None
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        # the per-token chunk is the same bytes around the text: build them once per request
        marker = "\u0000ovserve-text\u0000"
        head, tail_ = chunk(marker, None).split(json.dumps(marker).encode())

        def text_chunk(text: str) -> bytes:
            return head + json.dumps(text).encode() + tail_

        # wait for the first event before committing to a 200 (an immediate failure stays a clean error)
        first_event = await greq.events.get()
        if first_event[0] == "error":
            raise _event_error(first_event[1])
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        busy = False  # this handler is waiting for a write to drain: the sink must not write meanwhile
        loop = asyncio.get_running_loop()
        interval = self.cfg.stream_interval_s
        held: list[str] = []  # text waiting for this stream's next write (stream interval)
        timer: asyncio.TimerHandle | None = None  # the write of the held text
        due = 0.0  # loop time of this stream's next write: text before it is held

        def can_write() -> bool:
            if busy or transport is None or transport.is_closing():
                return False
            # the kernel's buffer is full when aiohttp's transport holds bytes: a write would wait for the client
            return not transport.get_write_buffer_size()

        def send(text: str) -> None:
            nonlocal due
            data = text_chunk(text)
            # after prepare() and the first write, aiohttp's writer adds nothing but this framing
            transport.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
            due = loop.time() + interval

        def take_held() -> str:
            nonlocal timer
            if timer is not None:
                timer.cancel()
                timer = None
            text = "".join(held)
            held.clear()
            return text

        def sink(ids: list[int]) -> bool:
            """A step's tokens straight from the engine's delivery to the socket, without waking this handler
            (a task wake-up per token per stream was the largest part of the HTTP process's per-token time).
            Text that comes within the stream interval of the last write waits for one write at its end.
            Declines while a write of the handler's is pending or the client is behind: the handler takes over."""
            nonlocal timer
            if not can_write():
                return False
            delta = detok.add(ids)
            if delta:
                if held or (interval and loop.time() < due):
                    held.append(delta)
                    if timer is None:
                        timer = loop.call_at(due, release)
                else:
                    send(delta)
            return True

        def release() -> None:
            nonlocal timer
            timer = None
            if not held:
                return
            if can_write():
                send(take_held())
            else:  # the handler writes the held text before whatever comes next
                greq.events.put_nowait(("tokens", []))

        try:
            await resp.prepare(request)
            request[STREAMING] = True
            transport = request.transport
            chunked = resp.headers.get("Transfer-Encoding") == "chunked"
            detok = Detokenizer(self.engine.tokenizer, self.engine.token_table)
            # chunks not yet written: the role chunk goes out with the first text, the last text with the end
            out = [chunk("", None, first=True)] if chat else []
            finish = "stop"
            pending = [first_event]
            while True:
                kind, value = pending.pop() if pending else await greq.events.get()
                if kind == "tokens":
                    # tokens that queued up while this handler waited go out in one chunk
                    while not greq.events.empty():
                        nxt = greq.events.get_nowait()
                        if nxt[0] != "tokens":
                            pending.append(nxt)
                            break
                        value = value + nxt[1]
                    delta = take_held() + (detok.add(value) if value else "")
                    if delta:
                        out.append(text_chunk(delta))
                    if out and not pending:  # the stream goes on (when its end is queued, one write for both)
                        busy = True
                        try:
                            await resp.write(b"".join(out))  # the first one also sends the headers
                        finally:
                            busy = False
                        out = []
                        due = loop.time() + interval
                        greq.sink = sink
                    continue
                if kind == "error":
                    out.append(b"data: " + json.dumps(_event_error(value).body()).encode() + b"\n\n")
                    finish = None
                else:
                    finish = value
                break
            tail = take_held() + (detok.flush() if finish is not None else "")  # no flush after an error event
            if tail:
                out.append(chunk(tail, None))
            if finish is not None:
                out.append(chunk(None if chat else "", finish))
            if include_usage:
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": greq.generated,
                    "total_tokens": prompt_tokens + greq.generated,
                }
                payload = {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": self.cfg.served_name,
                    "choices": [],
                    "usage": usage,
                }
                out.append(b"data: " + json.dumps(payload).encode() + b"\n\n")
            out.append(b"data: [DONE]\n\n")
            await resp.write_eof(b"".join(out))  # the end of the stream in one write with the chunked terminator
        except ConnectionResetError:
            # the client went away while we wrote (a disconnect the handler was not yet cancelled for): the
            # handler returns and aiohttp drops the connection quietly; escaping, it would log a server error
            request[CLIENT_GONE] = True
        finally:
            take_held()  # no held text may reach this connection after the handler (keep-alive reuse)
        return resp


def failed_state(report: RuntimeReport, message: str) -> RuntimeReport:
    """The report after a fatal pipeline error at serving time."""
    p = report.pipeline.model_copy(update={"reason": Reason.MODEL_LOAD_FAILED, "message": message})
    return report.model_copy(update={"state": State.FAILED, "pipeline": p})
