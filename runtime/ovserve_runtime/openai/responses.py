"""Response bodies and stream chunks of chat completions and completions (OpenAI's shapes).

`completion(...)` is a non-streaming body; `Chunks` builds one stream's server-sent events (`data: {json}`
and a blank line), the per-text chunk from bytes computed once per stream (it is the hot path: one per
stream per write). Pure.

Tool calls and reasoning: `completion(message=...)` takes the assistant message openai/assistant.py built
(content, reasoning_content, tool_calls) and `Chunks.fields(...)` a stream delta of its (one of those fields).
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ApiError

DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def logprobs_content(tokens: list[str], logprobs: list[float]) -> list[dict[str, Any]]:
    """Chat `logprobs.content`: one entry per generated token (no alternatives: `top_logprobs` is [])."""
    return [
        {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in zip(tokens, logprobs, strict=True)
    ]


def message(text: str) -> dict[str, Any]:
    """The assistant message of a chat completion."""
    return {"role": "assistant", "content": text}


def completion(
    rid: str,
    chat: bool,
    model: str,
    created: int,
    text: str,
    finish: str,
    usage_: dict[str, int],
    message: dict[str, Any] | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The body of a non-streaming response (`message`: the assistant message, when not just `text`;
    `logprobs`: chat `logprobs.content` entries, when asked for)."""
    if chat:
        msg = message if message is not None else globals()["message"](text)
        lp = {"content": logprobs} if logprobs is not None else None
        choice = {"index": 0, "message": msg, "logprobs": lp, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage_,
    }


def with_choices(body: dict[str, Any], choices: list[dict[str, Any]], usage_: dict[str, int]) -> dict[str, Any]:
    """A response body (from `completion`) with the choices of n > 1 generations, indexed in order."""
    return {**body, "choices": [{**c, "index": i} for i, c in enumerate(choices)], "usage": usage_}


class Chunks:
    """The events of one stream."""

    _MARK = "\u0000ovserve-text\u0000"

    def __init__(self, rid: str, chat: bool, model: str, created: int, include_usage: bool) -> None:
        self.rid, self.chat, self.model, self.created, self.include_usage = rid, chat, model, created, include_usage
        self.object = "chat.completion.chunk" if chat else "text_completion"
        # the per-text chunk is the same bytes around the text: built once per stream
        self._head, self._tail = self.delta(self._MARK).split(json.dumps(self._MARK).encode())

    def _payload(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        p = {"id": self.rid, "object": self.object, "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            p["usage"] = None
        return p

    def delta(
        self,
        text: str | None,
        finish: str | None = None,
        role: bool = False,
        logprobs: list[dict[str, Any]] | None = None,
    ) -> bytes:
        if self.chat:
            d: dict[str, Any] = {}
            if role:
                d["role"] = "assistant"
            if text is not None:
                d["content"] = text
            lp = {"content": logprobs} if logprobs is not None else None
            choice = {"index": 0, "delta": d, "logprobs": lp, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return sse(self._payload([choice]))

    def fields(self, delta: dict[str, Any], logprobs: list[dict[str, Any]] | None = None) -> bytes:
        """A chat chunk whose delta is `delta` (reasoning_content, content or tool_calls)."""
        lp = {"content": logprobs} if logprobs is not None else None
        return sse(self._payload([{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": None}]))

    def first(self) -> bytes:
        """What a stream starts with: the chat role chunk; nothing for completions."""
        return self.delta("", role=True) if self.chat else b""

    def text(self, text: str) -> bytes:
        return self._head + json.dumps(text).encode() + self._tail

    def finish(self, reason: str) -> bytes:
        return self.delta(None if self.chat else "", reason)

    def usage(self, usage_: dict[str, int]) -> bytes:
        return sse(
            {
                "id": self.rid,
                "object": self.object,
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_,
            }
        )

    @staticmethod
    def error(err: ApiError) -> bytes:
        return sse(err.body())

    @staticmethod
    def done() -> bytes:
        return DONE
