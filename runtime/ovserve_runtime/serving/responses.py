"""The Responses API (`POST /v1/responses`, `/v3/responses`; `GET` and `DELETE /v1/responses/{id}`): a sibling of
chat, the same admission, 429, drain, watchdog and metrics (base.Serving), the same prompt, grammar and output
path (generate.GenerationServing).

A request is parsed as the Responses body (openai/responses_request.py), its `previous_response_id` looked up
in this pod's store (a miss: 404 naming it, never a fresh start), and run as the chat request it amounts to;
the answer is built from what chat would have answered (openai/responses_output.py): output items, status,
usage with the reasoning tokens counted by the model's tokenizer. With `store` (the default) the response and
its conversation are kept in the bounded store (responsestore.py) for the next turn and for GET.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import TypeAdapter

from ..detok import Detokenizer
from ..openai import assistant, stops
from ..openai.errors import ApiError, event_error, unknown_model
from ..openai.request import RequestError
from ..openai.responses_output import Events, Output, response, status_of, usage
from ..openai.responses_request import (
    RESPONSES_NAMES,
    Item,
    ResponsesRequest,
    parse_responses,
    responses_param,
    to_chat,
)
from ..openai.stops import StopText
from . import prepare
from .base import INLINE_BODY_BYTES, STREAMING, error_response
from .generate import ChatServing
from .output import StreamOutput, collect
from .sse import SSEWriter


@dataclass
class Turn:
    """One Responses request on its way: the request, the stored conversation it continues, its id."""

    req: ResponsesRequest
    history: tuple[dict[str, Any], ...]
    rid: str


def _not_found(rid: str, param: str | None) -> ApiError:
    return ApiError(
        404,
        f"Previous response with id '{rid}' not found: it was never stored on this server, was stored with "
        "store false, or was evicted (a per-pod store: docs/runtime.md, Responses API)"
        if param == "previous_response_id"
        else f"No response with id '{rid}' is stored on this server",
        param=param,
        code="previous_response_not_found" if param == "previous_response_id" else "not_found",
    )


class ResponsesServing(ChatServing):
    endpoint = "responses"
    id_prefix = "resp_"

    async def prepare(self, raw: bytes):
        state = self.state
        try:
            req = await self._run(lambda: parse_responses(raw), len(raw))
        except RequestError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
        if req.model is not None and req.model != state.cfg.served_name:
            raise unknown_model(req.model, state.cfg.served_name)
        history: tuple[dict[str, Any], ...] = ()
        if req.previous_response_id is not None:  # on the loop: the store has no lock
            stored = state.responses.get(req.previous_response_id)
            if stored is None:
                raise _not_found(req.previous_response_id, "previous_response_id")
            history = stored.conversation
        turn = Turn(req, history, "resp_" + uuid.uuid4().hex)
        state.hint_preparing()
        try:
            staged, greq, prompt_tokens = await self.prepare_staged(lambda: self._stage_turn(turn), len(raw))
        except ApiError as err:
            state.hint_preparing(leaving=1)
            raise _renamed(err) from None
        greq.preparing = state.on_the_way(leaving=1)
        return greq, (staged, prompt_tokens, turn)

    async def _run(self, fn, size: int):
        if size <= INLINE_BODY_BYTES:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(self.state.pool, fn)

    def _stage_turn(self, turn: Turn):
        """On the loop or in the pool: the chat request this turn amounts to, staged as chat is."""
        state = self.state
        try:
            body = to_chat(turn.req, _history(turn.history))
        except RequestError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
        if turn.req.reasoning is not None and turn.req.reasoning.effort is not None:
            body = body.model_copy(update={"reasoning_effort": turn.req.reasoning.effort})
        engine = state.ready_engine()
        return prepare.stage_chat(state.prepare_context(), engine, body)

    async def respond(self, request: web.Request, greq, context) -> tuple[web.StreamResponse, str]:
        staged, prompt_tokens, turn = context
        if turn.req.stream:
            resp, gone = await self._stream_turn(request, greq, staged, prompt_tokens, turn)
            return resp, "499" if gone else "200"
        text, finish, _ = await collect(greq, self.state.engine.tokenizer)
        if greq.config.stop_strings:
            text = stops.cut(text, greq.config.stop_strings)
        plan = staged.plan
        message = assistant.message(plan, text) if not plan.passthrough else {"content": text}
        finish = assistant.finish_reason(plan, finish, len(message.get("tool_calls") or ()))
        output = Output(turn.req.encrypted_reasoning)
        output.add_message(message, "incomplete" if finish == "length" else "completed")
        reasoning_tokens = await self._count(output.reasoning)
        obj = self._object(turn, output, status_of(finish), usage(prompt_tokens, greq.generated, reasoning_tokens))
        self._keep(turn, obj, output)
        return web.json_response(obj), "200"

    async def _stream_turn(self, request, greq, staged, prompt_tokens: int, turn: Turn):
        first = await greq.events.get()
        if first[0] == "error":
            raise event_error(first[1])
        state = self.state
        tokenizer = state.engine.tokenizer

        def usage_of(output: Output) -> dict[str, Any]:
            # the final event is written synchronously: the reasoning text (bounded by max_output_tokens) is
            # counted here with the tokenizer, on the loop
            reasoning = output.reasoning
            n = len(tokenizer.encode(reasoning, add_special_tokens=False).input_ids.data[0]) if reasoning else 0
            return usage(prompt_tokens, greq.generated, min(n, greq.generated))

        events = Events(turn.rid, int(time.time()), state.cfg.served_name, turn.req, usage_of)
        writer = SSEWriter(request)
        try:
            await writer.open()
            request[STREAMING] = True
            detok = Detokenizer(tokenizer, state.engine.token_table)
            if greq.config.stop_strings:
                detok = StopText(detok, greq.config.stop_strings)
            parse = None if staged.plan.passthrough else assistant.OutputStream(staged.plan)
            out = StreamOutput(greq, writer, events, detok, state.cfg.stream_interval_s, parse)
            await out.run(first, prompt_tokens)
        except ConnectionResetError:
            return writer.response, True
        if events.final is not None:
            self._keep(turn, events.final, events.output)
        return writer.response, False

    async def _count(self, text: str) -> int:
        if not text:
            return 0
        ids = await self.state.encoder.encode(text, add_special_tokens=False)
        return len(ids)

    def _object(self, turn: Turn, output: Output, status: str, usage_: dict[str, Any]) -> dict[str, Any]:
        return response(
            turn.rid, int(time.time()), self.state.cfg.served_name, turn.req, output, status=status, usage_=usage_
        )

    def _keep(self, turn: Turn, obj: dict[str, Any], output: Output) -> None:
        """Store the response and its conversation (store true: the default)."""
        if not turn.req.stores:
            return
        inputs = [x.model_dump(exclude_none=True) for x in turn.req.input]
        self.state.responses.put(turn.rid, obj, [*turn.history, *inputs, *output.items])

    # --- GET / DELETE /v1/responses/{id} ----------------------------------------------------------------
    async def get(self, request: web.Request) -> web.Response:
        rid = request.match_info["response_id"]
        stored = self.state.responses.get(rid)
        if stored is None:
            return error_response(_not_found(rid, None))
        return web.json_response(stored.response)

    async def delete(self, request: web.Request) -> web.Response:
        rid = request.match_info["response_id"]
        if not self.state.responses.delete(rid):
            return error_response(_not_found(rid, None))
        return web.json_response({"id": rid, "object": "response", "deleted": True})


def _history(stored: tuple[dict[str, Any], ...]) -> list[Any]:
    """A stored conversation as input items (output items are valid input items)."""
    return TypeAdapter(list[Item]).validate_python(list(stored))


def _renamed(err: ApiError) -> ApiError:
    """A chat field's name in an error, as the Responses request calls it."""
    renamed = responses_param(err.param)
    if renamed != err.param:
        chat = next(c for c, _ in RESPONSES_NAMES if err.param == c or err.param.startswith((c + ".", c + "[")))
        resp = dict(RESPONSES_NAMES)[chat]
        err.param, err.message = renamed, err.message.replace(chat, resp)
    return err
