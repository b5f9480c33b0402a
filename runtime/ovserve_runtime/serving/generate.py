"""Text generation servings: `GenerationServing` (what every text endpoint shares once base.Serving has
admitted a request: preparing a GenRequest, the grammar built off the loop, tokenization, the answer streamed,
in n choices, or whole; the token and latency metrics) and its siblings `ChatServing` (/chat/completions) and
`CompletionServing` (/completions), which differ in how a body becomes a prompt.

Validation, the chat template and image decoding run on the loop for a small body and in the bounded pool
otherwise (prepare.py), the prompt is tokenized by the batch encoder (encoder.py), and the answer goes out
through the output path (output.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from aiohttp import web

from ..detok import Detokenizer
from ..engine import Events
from ..openai import assistant, responses, stops
from ..openai.errors import ApiError, event_error
from ..openai.grammar import GrammarError
from ..openai.request import ChatRequest, CompletionRequest
from ..openai.stops import StopText
from ..report import SpeculativeMode
from . import prepare
from .base import INLINE_BODY_BYTES, STREAMING, Serving
from .output import StreamOutput, collect
from .prepare import Context, Staged
from .sse import SSEWriter

log = logging.getLogger("ovserve.server")


class GenerationServing(Serving):
    """A text generation endpoint. Siblings set `chat`, `endpoint`, `id_prefix` and implement `stage`."""

    chat = True  # the prompt is a chat template's (it carries its special tokens) or the text itself
    id_prefix = ""  # of the response id

    def stage(self, ctx: Context, engine, body) -> Staged:
        raise NotImplementedError

    # --- prepare ---------------------------------------------------------------------------------
    async def prepare(self, raw: bytes):
        state = self.state
        state.hint_preparing()
        try:
            staged, greq, prompt_tokens = await self._prepare(raw)
        except ApiError:
            state.hint_preparing(leaving=1)  # this one is not on its way any more
            raise
        # admitted, not yet submitted: the engine waiting to prefill a burst knows more is coming
        greq.preparing = state.on_the_way(leaving=1)
        return greq, (staged, prompt_tokens)

    def _stage(self, raw: bytes) -> Staged:
        """On the loop or in the pool: the body checked (400, 404 before readiness), then the prompt."""
        state = self.state
        body = prepare.parse_body(raw, self.chat, state.cfg.served_name)
        engine = state.ready_engine()
        return self.stage(state.prepare_context(), engine, body)

    async def _prepare(self, raw: bytes):
        return await self.prepare_staged(lambda: self._stage(raw), len(raw))

    async def prepare_staged(self, stage, size: int):
        """Validation, chat template and image decoding (`stage()`: in the bounded pool, or inline for a small
        body of `size` bytes), then tokenization (the batch encoder), then the generation config."""
        state = self.state
        try:
            if size <= INLINE_BODY_BYTES:  # a pool round trip costs more than parsing it here
                staged = stage()
            else:
                loop = asyncio.get_running_loop()
                staged = await loop.run_in_executor(state.pool, stage)
            if staged.job is not None:  # in the grammar worker, with a deadline; cached by content
                try:
                    staged.constraint = await state.grammars.build(staged.job)
                except GrammarError as exc:
                    raise ApiError(400, str(exc), param=staged.job.param, code="invalid_value") from None
            ids = await state.encoder.encode(staged.prompt, add_special_tokens=not self.chat)
            greq, prompt_tokens = prepare.build(state.prepare_context(), state.engine, staged, ids)
        except ApiError:
            raise
        except Exception as exc:  # a bug or a tokenizer failure: a counted JSON 500, never a hang
            log.exception("preparing a request failed")
            raise ApiError(500, "internal server error", "server_error", code="internal_error") from exc
        return staged, greq, prompt_tokens

    # --- respond ---------------------------------------------------------------------------------
    async def respond(self, request: web.Request, greq, context) -> tuple[web.StreamResponse, str]:
        staged, prompt_tokens = context
        body, plan = staged.body, staged.plan
        rid = self.id_prefix + uuid.uuid4().hex[:24]
        if body.stream:
            resp, gone = await self._stream(request, greq, rid, prompt_tokens, body.include_usage, plan)
            return resp, "499" if gone else "200"
        if body.n is not None and body.n > 1:
            return await self._choices(greq, body.n, rid, prompt_tokens, plan), "200"
        return web.json_response(await self._answer(greq, plan, rid, prompt_tokens)), "200"

    def finish(self, greq) -> None:
        greq.sink = None  # nothing may reach this connection once its handler is gone (keep-alive reuse)

    def observe(self, greq, context) -> None:
        self._observe(greq, context[1])

    def trace_attributes(self, greq, context) -> dict:
        # cached tokens are absent, not 0: openvino-genai reports no prefix-cache hits per request
        out = {"gen_ai.usage.input_tokens": context[1], "gen_ai.usage.output_tokens": greq.generated}
        if greq.finish:
            out["gen_ai.response.finish_reasons"] = [greq.finish]
        mode = self.state.report.speculative.resolved
        if mode != SpeculativeMode.NONE and greq.first_token_at is not None:
            # one token delivery per pipeline step: the first is the prefill's token, each later one a decode step
            # that yielded 1 + the accepted proposals (the engine's ovserve_speculative_* counters, per request)
            steps = len(greq.token_gaps)
            out["ovserve.speculative.mode"] = str(mode)
            out["ovserve.speculative.decode_steps"] = steps
            out["ovserve.speculative.accepted_tokens"] = max(0, greq.generated - 1 - steps)
        return out

    async def _answer(self, greq, plan, rid: str, prompt_tokens: int) -> dict:
        """The response body of one finished generation (not streamed)."""
        text, finish, logprobs = await collect(greq, self.state.engine.tokenizer)
        if greq.config.stop_strings:
            text = stops.cut(text, greq.config.stop_strings)
        message = None
        if not plan.passthrough:  # tool calls and reasoning split off the text
            message = assistant.message(plan, text)
            finish = assistant.finish_reason(plan, finish, len(message.get("tool_calls", ())))
        usage = responses.usage(prompt_tokens, greq.generated)
        return responses.completion(
            rid, self.chat, self.state.cfg.served_name, int(time.time()), text, finish, usage, message, logprobs
        )

    async def _choices(self, greq, n: int, rid: str, prompt_tokens: int, plan) -> web.Response:
        """n > 1, not streamed: n generations of the prompt submitted together (continuous batching runs them in
        one batch, the legacy pipeline one after another). Sampling with a seed s: choice i uses s + i (without
        one, each its own random seed); greedy choices are alike, as OpenAI's are."""
        from ..engine import GenRequest
        from ..engine.wire import config_from_dict, config_to_dict

        state = self.state
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
                state.engine.submit(g)
                state.drain.track(g)
            answers = [asyncio.ensure_future(self._answer(g, plan, rid, prompt_tokens)) for g in [greq, *extra]]
            bodies = await asyncio.gather(*answers)
        finally:
            for t in answers:  # one failed (or the client left): the others stop waiting too
                t.cancel()
            for g in extra:
                g.sink = None
                state.drain.untrack(g)
                state.engine.cancel(g)
                self._observe(g, 0)
        generated = sum(g.generated for g in [greq, *extra])
        choices = [b["choices"][0] for b in bodies]
        return web.json_response(responses.with_choices(bodies[0], choices, responses.usage(prompt_tokens, generated)))

    async def _stream(
        self, request: web.Request, greq, rid: str, prompt_tokens: int, include_usage: bool, plan
    ) -> tuple[web.StreamResponse, bool]:
        """(the response, whether the client went away while it was written)."""
        # wait for the first event before committing to a 200 (an immediate failure stays a clean error)
        first = await greq.events.get()
        if first[0] == "error":
            raise event_error(first[1])
        state = self.state
        writer = SSEWriter(request)
        chunks = responses.Chunks(rid, self.chat, state.cfg.served_name, int(time.time()), include_usage)
        try:
            await writer.open()
            request[STREAMING] = True
            detok = Detokenizer(state.engine.tokenizer, state.engine.token_table)
            if greq.config.stop_strings:
                detok = StopText(detok, greq.config.stop_strings)
            parse = None if plan.passthrough else assistant.OutputStream(plan)
            out = StreamOutput(greq, writer, chunks, detok, state.cfg.stream_interval_s, parse)
            await out.run(first, prompt_tokens)
        except ConnectionResetError:
            # the client went away while we wrote (a disconnect the handler was not yet cancelled for): the
            # handler returns and aiohttp drops the connection quietly; escaping, it would log a server error
            return writer.response, True
        return writer.response, False

    def _observe(self, greq, prompt_tokens: int) -> None:
        state = self.state
        m = state.metrics
        m.prompt_tokens.inc(prompt_tokens)
        m.generated_tokens.inc(greq.generated)
        m.finished.labels(self.endpoint, greq.finish or "cancelled").inc()  # None: the handler ended first
        if greq.queued_at is not None:  # not the extra choices of n > 1 (their request's own times)
            m.prepare.observe(greq.queued_at - greq.submitted_at)
            if greq.started_at is not None:
                m.queue_wait.observe(max(0.0, greq.started_at - greq.queued_at))
        for gap in greq.token_gaps:
            m.itl.observe(gap)
        if greq.first_token_at is not None:
            m.ttft.observe(greq.first_token_at - greq.submitted_at)
            end = time.monotonic()
            m.e2e.observe(end - greq.submitted_at)
            state.admission.observe(end - greq.submitted_at)
            if greq.generated > 1:
                m.tpot.observe((end - greq.first_token_at) / (greq.generated - 1))


class ChatServing(GenerationServing):
    """/chat/completions: messages through the model's chat template (tools, images, response_format)."""

    chat = True
    endpoint = "chat"
    id_prefix = "chatcmpl-"

    def stage(self, ctx: Context, engine, body: ChatRequest) -> Staged:
        return prepare.stage_chat(ctx, engine, body)


class CompletionServing(GenerationServing):
    """/completions: the prompt as it is (tokenized with the model's special tokens)."""

    chat = False
    endpoint = "completions"
    id_prefix = "cmpl-"

    def stage(self, ctx: Context, engine, body: CompletionRequest) -> Staged:
        return prepare.stage_completion(ctx, engine, body)
