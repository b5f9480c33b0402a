"""The Responses API's answer: the `response` object and its stream of typed events.

The generation path produces what chat produces (the assistant message: content, reasoning_content,
tool_calls; or, streamed, the same as deltas). `Output` gathers that into Responses output items, in order:
`reasoning` (the thinking text, as `content` [reasoning_text]; with `include: ["reasoning.encrypted_content"]`
also as `encrypted_content`, which is this server's own: the text in base64, not encrypted), `message` (one
`output_text` part), `function_call` (`call_id`, `name`, `arguments`). `response(...)` is the object: `status`
completed, or incomplete with `incomplete_details.reason` `max_output_tokens` when cut, the request's echoed
settings, `usage` (input, output and reasoning tokens) and the convenience `output_text`.

`Events` writes a stream in OpenAI's order, each event an SSE `event:`/`data:` pair with its
`sequence_number`: response.created, response.in_progress, then per item output_item.added,
(content_part.added, output_text.delta..., output_text.done, content_part.done | reasoning_text.delta...,
reasoning_text.done | function_call_arguments.delta, function_call_arguments.done), output_item.done; last
response.completed or response.incomplete (or response.failed after an error). Its methods are those the
chat stream writer (serving/output.StreamOutput) calls on chat's `Chunks`, so the same writer runs both; the
deltas concatenate to the final object's text by construction (one accumulator serves both).

Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from .errors import ApiError


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(input_tokens: int, output_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


class Output:
    """The output items of one response, built from chat deltas (streamed) or a whole message."""

    def __init__(self, encrypted_reasoning: bool = False) -> None:
        self.items: list[dict[str, Any]] = []
        self.encrypted_reasoning = encrypted_reasoning
        self._open: dict[str, Any] | None = None  # the item text is going into (reasoning or message)
        self._buf: list[str] = []  # the open item's text, joined once when it closes (deltas are many and small)

    @property
    def open_kind(self) -> str | None:
        return self._open["type"] if self._open is not None else None

    @property
    def text(self) -> str:
        """The concatenated output_text of every message item."""
        return "".join(p["text"] for i in self.items if i["type"] == "message" for p in i["content"])

    @property
    def reasoning(self) -> str:
        return "".join(p["text"] for i in self.items if i["type"] == "reasoning" for p in i["content"])

    def open_reasoning(self) -> tuple[dict[str, Any], bool]:
        """The reasoning item text goes into (new: True when it was just opened)."""
        if self._open is not None and self._open["type"] == "reasoning":
            return self._open, False
        item = {
            "id": new_id("rs"),
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": ""}],
        }
        return self._start(item), True

    def open_message(self) -> tuple[dict[str, Any], bool]:
        if self._open is not None and self._open["type"] == "message":
            return self._open, False
        item = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}],
        }
        return self._start(item), True

    def add_call(self, call: dict[str, Any]) -> dict[str, Any]:
        fn = call.get("function") or {}
        item = {
            "id": new_id("fc"),
            "type": "function_call",
            "status": "completed",
            "call_id": call.get("id") or new_id("call"),
            "name": fn.get("name", ""),
            "arguments": fn.get("arguments", ""),
        }
        self.close()
        self.items.append(item)
        return item

    def append(self, text: str) -> None:
        """Text for the open item."""
        self._buf.append(text)

    def _start(self, item: dict[str, Any]) -> dict[str, Any]:
        self.close()
        self.items.append(item)
        self._open = item
        return item

    def close(self, status: str = "completed") -> dict[str, Any] | None:
        """Close the open item; it is returned (for its done events), None when none was open."""
        item, self._open = self._open, None
        if item is None:
            return None
        item["content"][0]["text"] += "".join(self._buf)
        self._buf.clear()
        if item["type"] == "message":
            item["status"] = status
        elif self.encrypted_reasoning:
            item["encrypted_content"] = base64.b64encode(item["content"][0]["text"].encode()).decode()
        return item

    def add_message(self, message: dict[str, Any], status: str = "completed") -> None:
        """A whole assistant message (non-streamed): reasoning, text, then calls."""
        if message.get("reasoning_content"):
            self.open_reasoning()
            self.append(message["reasoning_content"])
        if message.get("content"):
            self.open_message()
            self.append(message["content"])
        self.close(status)
        for call in message.get("tool_calls") or ():
            self.add_call(call)


def response(
    rid: str,
    created: int,
    model: str,
    req: Any,
    output: Output | None,
    *,
    status: str,
    usage_: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `response` object (req: the ResponsesRequest, for the settings it echoes)."""
    fmt = req.text.format if req.text is not None and req.text.format is not None else None
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": model,
        "output": list(output.items) if output is not None else [],
        "output_text": output.text if output is not None else "",
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "reasoning": {
            "effort": req.reasoning.effort if req.reasoning else None,
            "summary": req.reasoning.summary if req.reasoning else None,
        },
        "store": req.stores,
        "temperature": req.temperature,  # unset: greedy here (OpenAI's default would be 1.0): not claimed
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or ()],
        "top_p": req.top_p,
        "truncation": "disabled",
        "usage": usage_,
        "user": req.user,
        "metadata": req.metadata or {},
    }


def status_of(finish: str) -> str:
    return "incomplete" if finish == "length" else "completed"


_DELTA_HEAD = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
_DELTA_TAIL = b',"logprobs":[]}\n\n'


class Events:
    """A Responses stream's events, with the interface of chat's `Chunks` (serving/output.StreamOutput drives it).
    `usage_of(output)` gives the final usage (the server counts reasoning tokens with its tokenizer)."""

    chat = True  # the writer starts with first(): here response.created and response.in_progress
    include_usage = True  # the writer then calls usage(): here the final event, which carries the usage

    def __init__(self, rid: str, created: int, model: str, req: Any, usage_of: Any) -> None:
        self.rid, self.created, self.model, self.req = rid, created, model, req
        self.usage_of = usage_of
        self.output = Output(req.encrypted_reasoning)
        self.seq = 0
        self.finish_reason = "stop"
        self.failed = False
        self.final: dict[str, Any] | None = None  # the response object of response.completed / .incomplete
        self._delta_mid = b""  # the open message's part of its output_text delta events

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

    def _response(self, status: str, usage_: dict[str, Any] | None = None, error: dict | None = None) -> dict:
        return response(
            self.rid, self.created, self.model, self.req, self.output, status=status, usage_=usage_, error=error
        )

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, x in enumerate(self.output.items) if x is item)

    # --- Chunks' interface ---------------------------------------------------------------------------
    def first(self) -> bytes:
        return self._event("response.created", response=self._response("in_progress")) + self._event(
            "response.in_progress", response=self._response("in_progress")
        )

    def text(self, text: str) -> bytes:
        """An output_text delta: the event's bytes around the text are built once per item (the hot path: one
        per stream write; a dict through json.dumps per delta cost half again the HTTP process's CPU)."""
        if self.output.open_kind != "message":
            return self.fields({"content": text})
        self.output.append(text)
        seq, self.seq = self.seq, self.seq + 1
        return b"".join((_DELTA_HEAD, str(seq).encode(), self._delta_mid, json.dumps(text).encode(), _DELTA_TAIL))

    def delta(self, text: str | None, finish: str | None = None, role: bool = False, logprobs: Any = None) -> bytes:
        return self.fields({"content": text}) if text else b""

    def fields(self, delta: dict[str, Any], logprobs: Any = None) -> bytes:
        out: list[bytes] = []
        if delta.get("reasoning_content"):
            out += self._switch("reasoning")
            item, new = self.output.open_reasoning()
            out += self._opened(item, new)
            self.output.append(delta["reasoning_content"])
            out.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    content_index=0,
                    delta=delta["reasoning_content"],
                )
            )
        if delta.get("content"):
            out += self._switch("message")
            item, new = self.output.open_message()
            out += self._opened(item, new)
            out.append(self.text(delta["content"]))
        for call in delta.get("tool_calls") or ():
            out += self._done(self.output.close())
            item = self.output.add_call(call)
            idx = self._index(item)
            out.append(self._event("response.output_item.added", output_index=idx, item={**item, "arguments": ""}))
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=idx,
                    delta=item["arguments"],
                )
            )
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=idx,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            out.append(self._event("response.output_item.done", output_index=idx, item=item))
        return b"".join(out)

    def finish(self, reason: str) -> bytes:
        self.finish_reason = reason
        return b"".join(self._done(self.output.close("incomplete" if reason == "length" else "completed")))

    def usage(self, _chat_usage: dict[str, int]) -> bytes:
        if self.failed:  # response.failed was the end
            return b""
        status = status_of(self.finish_reason)
        self.final = self._response(status, self.usage_of(self.output))
        return self._event(f"response.{status}", response=self.final)

    def error(self, err: ApiError) -> bytes:
        body = err.body()["error"]
        self.failed = True
        self.output.close("incomplete")
        # the Responses error codes are a fixed set: the server's own code goes into the message
        code = "rate_limit_exceeded" if err.status == 429 else "server_error"
        message = f"{body.get('code')}: {body['message']}" if body.get("code") else body["message"]
        failed = self._response("failed", error={"code": code, "message": message})
        return self._event("response.failed", response=failed)

    def done(self) -> bytes:
        return b""  # a Responses stream has no [DONE]: response.completed is its end

    # --- items ---------------------------------------------------------------------------------------
    def _switch(self, kind: str) -> list[bytes]:
        """The done events of the open item when text of another kind comes."""
        if self.output.open_kind in (None, kind):
            return []
        return self._done(self.output.close())

    def _opened(self, item: dict[str, Any], new: bool) -> list[bytes]:
        if not new:
            return []
        idx = len(self.output.items) - 1
        if item["type"] == "message":  # what every output_text delta of this item carries
            self._delta_mid = f',"item_id":"{item["id"]}","output_index":{idx},"content_index":0,"delta":'.encode()
        # the item as it was when opened: no text yet
        shell = {**item, "content": [{**item["content"][0], "text": ""}]}
        if item["type"] == "reasoning":
            return [self._event("response.output_item.added", output_index=idx, item={**shell, "content": []})]
        return [
            self._event("response.output_item.added", output_index=idx, item={**shell, "content": []}),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                part=shell["content"][0],
            ),
        ]

    def _done(self, item: dict[str, Any] | None) -> list[bytes]:
        if item is None:
            return []
        idx = self._index(item)
        part = item["content"][0]
        if item["type"] == "reasoning":
            return [
                self._event(
                    "response.reasoning_text.done",
                    item_id=item["id"],
                    output_index=idx,
                    content_index=0,
                    text=part["text"],
                ),
                self._event("response.output_item.done", output_index=idx, item=item),
            ]
        return [
            self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                text=part["text"],
                logprobs=[],
            ),
            self._event("response.content_part.done", item_id=item["id"], output_index=idx, content_index=0, part=part),
            self._event("response.output_item.done", output_index=idx, item=item),
        ]
