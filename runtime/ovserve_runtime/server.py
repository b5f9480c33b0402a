"""HTTP API (aiohttp): OpenAI-compatible /v3 (and /v1) endpoints, health, status and metrics.

The server owns no pipeline: it turns requests into engine.GenRequest objects and streams the token
events the engine pushes back. Every request that reaches the engine is cancelled in a `finally` when
the handler ends early (client disconnect, write error), so the engine gives its slot back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .detok import Detokenizer
from .drain import SHUTTING_DOWN, Drain
from .metrics import Metrics
from .report import Reason, RuntimeReport, State

log = logging.getLogger("ovserve.server")


@dataclass
class ServerConfig:
    served_name: str
    max_prompt_tokens: int = 0  # 0: the model's max position
    default_max_tokens: int = 512
    drain_timeout_s: float = 30.0  # SIGTERM: how long in-flight requests may still run (drain.py)


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

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


def _event_error(value: Any) -> ApiError:
    """The ApiError of an ("error", value) engine event: an ApiError as is (the drain's), else a failure."""
    if isinstance(value, ApiError):
        return value
    return ApiError(500, f"generation failed: {value}", "server_error", code="generation_failed")


def _num(
    body: dict, key: str, kind: type, lo: float | None = None, hi: float | None = None, lo_open: bool = False
) -> Any:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
        raise ApiError(
            400,
            f"'{key}' must be {'an integer' if kind is int else 'a number'}",
            param=key,
            code="invalid_type",
        )
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ApiError(
            400, f"'{key}' must be {'>' if lo_open else '>='} {lo}, got {v}", param=key, code="invalid_value"
        )
    if hi is not None and v > hi:
        raise ApiError(400, f"'{key}' must be <= {hi}, got {v}", param=key, code="invalid_value")
    return v


class App:
    def __init__(self, cfg: ServerConfig, report: RuntimeReport, metrics: Metrics | None = None) -> None:
        self.cfg = cfg
        self.report = report
        self.metrics = metrics or Metrics()
        self.metrics.set_report(report)
        self.engine = None
        self.max_position: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.created = int(time.time())
        self.web = web.Application(client_max_size=64 * 1024 * 1024)
        r = self.web.router
        for prefix in ("/v3", "/v1"):
            r.add_post(f"{prefix}/chat/completions", self.chat)
            r.add_post(f"{prefix}/completions", self.completions)
            r.add_get(f"{prefix}/models", self.models)
            r.add_get(f"{prefix}/models/{{model}}", self.model)
        r.add_get("/v1/status", self.status)
        r.add_get("/v2/health/live", self.live)
        r.add_get("/v2/health/ready", self.ready)
        r.add_get("/metrics", self.prom)
        self.drain = Drain(cfg.drain_timeout_s, abort=self._abort)
        self.drain.install(self.web)

    # --- state ---------------------------------------------------------------------------------
    def set_report(self, report: RuntimeReport) -> None:
        self.report = report
        self.metrics.set_report(report)

    def attach(self, engine, max_position: int | None) -> None:
        self.engine = engine
        self.max_position = max_position
        engine.loop = asyncio.get_running_loop()
        self.metrics.engine = engine

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
        try:
            body = await self._body(request)
            greq, prompt_tokens = self._build(body, chat)
        except ApiError as err:
            self.metrics.requests.labels(endpoint, str(err.status)).inc()
            return err.response()
        stream = bool(body.get("stream"))
        opts = body.get("stream_options") or {}
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        greq.loop = asyncio.get_running_loop()
        greq.events = asyncio.Queue()
        greq.submitted_at = arrived
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
                return await self._stream(request, greq, rid, chat, prompt_tokens, include_usage)
            return await self._collect(greq, rid, chat, prompt_tokens)
        except ApiError as err:
            status = str(err.status)
            return err.response()
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"  # client closed the request
            raise
        finally:
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
            if greq.generated > 1:
                m.tpot.observe((end - greq.first_token_at) / (greq.generated - 1))

    async def _body(self, request: web.Request) -> dict:
        try:
            body = json.loads(await request.read() or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"invalid JSON body: {exc}", code="invalid_json") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        if "model" in body and body["model"] != self.cfg.served_name:
            raise self._unknown_model(body["model"])
        if self.engine is None or self.report.state != State.READY:
            raise ApiError(
                503,
                f"the model is not ready (state {self.report.state})",
                "server_error",
                code="model_not_ready",
            )
        if self.engine.fatal is not None:
            raise ApiError(503, f"the pipeline failed: {self.engine.fatal}", "server_error", code="pipeline_failed")
        return body

    def _build(self, body: dict, chat: bool):
        from .engine import GenRequest

        engine = self.engine
        images: list = []
        if chat:
            prompt, images = self._chat_prompt(body.get("messages"))
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise ApiError(
                    400,
                    "'prompt' must be a string (or a list of one string)",
                    param="prompt",
                    code="invalid_type",
                )
        n = _num(body, "n", int, 1, 1)
        del n
        max_tokens = _num(body, "max_completion_tokens", int, 1)
        if max_tokens is None:
            max_tokens = _num(body, "max_tokens", int, 1)
        temperature = _num(body, "temperature", float, 0, 2)
        top_p = _num(body, "top_p", float, 0, 1, lo_open=True)
        top_k = _num(body, "top_k", int, 0)
        seed = _num(body, "seed", int, 0)
        presence = _num(body, "presence_penalty", float, -2, 2)
        frequency = _num(body, "frequency_penalty", float, -2, 2)
        repetition = _num(body, "repetition_penalty", float, 0, lo_open=True)
        stop = body.get("stop")
        if stop is not None:
            if isinstance(stop, str):
                stop = [stop]
            if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 16:
                raise ApiError(400, "'stop' must be a string or a list of up to 16 strings", param="stop")

        tok = engine.tokenizer
        # chat: the template carries its own special tokens; completions: add BOS like the model expects
        ids = tok.encode(prompt, add_special_tokens=not chat).input_ids
        prompt_tokens = int(ids.shape[1])
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
                f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"model's context of {self.max_position} tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )

        cfg = engine.new_config()
        cfg.max_new_tokens = max_tokens
        if temperature is not None and temperature > 0:
            cfg.do_sample = True
            cfg.temperature = float(temperature)
            if top_p is not None:
                cfg.top_p = float(top_p)
            if top_k:
                cfg.top_k = int(top_k)
            if seed is not None:
                cfg.rng_seed = int(seed)
        else:
            cfg.do_sample = False
        if presence:
            cfg.presence_penalty = float(presence)
        if frequency:
            cfg.frequency_penalty = float(frequency)
        if repetition:
            cfg.repetition_penalty = float(repetition)
        if stop:
            cfg.stop_strings = set(stop)
        if body.get("ignore_eos"):
            cfg.ignore_eos = True
        if engine.is_vlm:
            greq = GenRequest(config=cfg, max_new_tokens=max_tokens, prompt=prompt, images=images)
        else:
            greq = GenRequest(config=cfg, max_new_tokens=max_tokens, input_ids=ids)
        return greq, prompt_tokens

    def _chat_prompt(self, messages: Any) -> tuple[str, list]:
        from .images import ImageError, decode_data_url, to_tensor

        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty list", param="messages")
        vlm = self.engine.is_vlm
        flat: list[dict] = []
        images: list = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ApiError(400, f"messages[{i}] must be an object with a 'role'", param=f"messages[{i}]")
            content = m.get("content")
            if content is None:
                content = ""
            if isinstance(content, list):
                parts = []
                for j, part in enumerate(content):
                    ptype = part.get("type") if isinstance(part, dict) else None
                    if ptype == "text" and isinstance(part.get("text"), str):
                        parts.append(part["text"])
                    elif ptype == "image_url":
                        if not vlm:
                            raise ApiError(
                                400,
                                "this model is text-only: image_url content is not supported",
                                param=f"messages[{i}].content[{j}]",
                            )
                        url = part.get("image_url")
                        url = url.get("url") if isinstance(url, dict) else url
                        try:
                            img = decode_data_url(url if isinstance(url, str) else "")
                        except ImageError as exc:
                            raise ApiError(400, str(exc), param=f"messages[{i}].content[{j}]") from exc
                        parts.append(f"<ov_genai_image_{len(images)}>")
                        images.append(to_tensor(img))
                    else:
                        raise ApiError(
                            400,
                            f"unsupported content part type {ptype!r}",
                            param=f"messages[{i}].content[{j}]",
                        )
                content = "".join(parts)
            elif not isinstance(content, str):
                raise ApiError(
                    400,
                    f"messages[{i}].content must be a string or a list of parts",
                    param=f"messages[{i}].content",
                )
            flat.append({"role": m["role"], "content": content})
        try:
            prompt = self.engine.tokenizer.apply_chat_template(flat, add_generation_prompt=True)
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
        await resp.prepare(request)
        detok = Detokenizer(self.engine.tokenizer, self.engine.token_table)
        if chat:
            await resp.write(chunk("", None, first=True))
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
                delta = detok.add(value)
                if delta:
                    await resp.write(text_chunk(delta))
                continue
            if kind == "error":
                await resp.write(b"data: " + json.dumps(_event_error(value).body()).encode() + b"\n\n")
                finish = None
            else:
                finish = value
            break
        tail = detok.flush()
        if tail:
            await resp.write(chunk(tail, None))
        if finish is not None:
            await resp.write(chunk(None if chat else "", finish))
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
            await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def failed_state(report: RuntimeReport, message: str) -> RuntimeReport:
    """The report after a fatal pipeline error at serving time."""
    p = report.pipeline.model_copy(update={"reason": Reason.MODEL_LOAD_FAILED, "message": message})
    return report.model_copy(update={"state": State.FAILED, "pipeline": p})
