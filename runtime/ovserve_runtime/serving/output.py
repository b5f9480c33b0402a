"""The per-request output path: engine token ids -> text -> the response body or stream chunks.

`collect` gathers a non-streaming answer (one decode at the end). `StreamOutput` runs a stream: the
handler writes what its events bring; once the first chunk is out, the engine's delivery callback hands a
step's tokens to `sink` directly (no handler wake-up: a task wake-up per token per stream was the largest
part of the HTTP process's per-token time). The stream interval lives here: text that comes within
`interval` of the stream's last write is held and goes out in one chunk at the end of the interval.

Tool calls and reasoning: with a parser (`parse`, openai/assistant.OutputStream), text deltas go through it in
`_text_chunk` and come out as chunks of its deltas (reasoning_content, content, tool_calls); what it holds at
the end goes out before the finish chunk, whose reason it may turn into `tool_calls`.
"""

from __future__ import annotations

import asyncio

from ..detok import Detokenizer
from ..openai import assistant
from ..openai.errors import event_error
from ..openai.responses import Chunks, logprobs_content, usage
from .sse import SSEWriter


def token_logprobs(tokenizer, ids: list[int], logprobs: list[float]) -> list[dict]:
    """Chat `logprobs.content` entries of these tokens (each token's own text: one batched decode)."""
    texts = tokenizer.decode([[i] for i in ids]) if ids else []
    return logprobs_content(list(texts), logprobs)


async def events(greq):
    """A request's events up to and including its last one."""
    while True:
        kind, value = await greq.events.get()
        yield kind, value
        if kind != "tokens":
            return


async def collect(greq, tokenizer) -> tuple[str, str, list[dict] | None]:
    """(text, finish_reason, logprobs content or None) of a non-streaming request; raises the ApiError of an
    error event."""
    detok = Detokenizer(tokenizer)  # one decode at the end: no table needed
    ids, lps = detok.ids, [] if greq.logprobs else None

    def take(value) -> bool:
        ids.extend(value)
        if lps is not None:
            lps.extend(getattr(value, "logprobs", ()))
        return True

    greq.sink = take  # tokens gather without waking the handler
    finish = "stop"
    async for kind, value in events(greq):
        if kind == "tokens":
            take(value)
        elif kind == "error":
            raise event_error(value)
        else:
            finish = value
    content = token_logprobs(tokenizer, list(ids), lps) if lps is not None else None
    return detok.flush(), finish, content


class StreamOutput:
    """One stream's output: detokenizer, held text (stream interval) and the writer."""

    def __init__(
        self,
        greq,
        writer: SSEWriter,
        chunks: Chunks,
        detok: Detokenizer,
        interval: float,
        parse: assistant.OutputStream | None = None,
    ) -> None:
        self.greq, self.writer, self.chunks, self.detok = greq, writer, chunks, detok
        self.interval = interval
        self.parse = parse
        self.loop = asyncio.get_running_loop()
        self.held: list[str] = []  # text waiting for this stream's next write
        self.timer: asyncio.TimerHandle | None = None  # the write of the held text
        self.due = 0.0  # loop time of this stream's next write: text before it is held
        # logprobs: the tokens (and their log-probabilities) not yet in a chunk; such a stream has no sink
        self.lp: tuple[list[int], list[float]] | None = ([], []) if greq.logprobs else None

    # --- the sink: called by the engine's delivery on the event loop -------------------------------
    def sink(self, ids: list[int]) -> bool:
        """A step's tokens straight to the socket. Declines (False) while a write of the handler's is
        pending or the client is behind: then the event is queued and the handler takes over."""
        if not self.writer.can_write_now():
            return False
        delta = self.detok.add(ids)
        if delta:
            if self.held or (self.interval and self.loop.time() < self.due):
                self.held.append(delta)
                if self.timer is None:
                    self.timer = self.loop.call_at(self.due, self._release)
            else:
                self._send_now(delta)
        return True

    def _send_now(self, text: str) -> None:
        data = self._text_chunk(text)
        if data:  # a parser may hold it all (a call not yet complete): nothing to write
            self.writer.write_now(data)
            self.due = self.loop.time() + self.interval

    def _release(self) -> None:
        self.timer = None
        if not self.held:
            return
        if self.writer.can_write_now():
            self._send_now(self.take_held())
        else:  # the handler writes the held text before whatever comes next
            self.greq.events.put_nowait(("tokens", []))

    def take_held(self) -> str:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        text = "".join(self.held)
        self.held.clear()
        return text

    def _text_chunk(self, text: str) -> bytes:
        if self.parse is None:
            if self.lp is None:
                return self.chunks.text(text)
            return self.chunks.delta(text, logprobs=self._take_logprobs())
        deltas = list(self.parse.feed(text))
        if not deltas:
            return b""  # the parser holds it; logprobs wait for the chunk that carries it
        lp = self._take_logprobs() if self.lp is not None else None
        return b"".join(self.chunks.fields(d, logprobs=lp if i == 0 else None) for i, d in enumerate(deltas))

    def _absorb(self, value) -> None:
        if self.lp is not None and value:
            self.lp[0].extend(value)
            self.lp[1].extend(getattr(value, "logprobs", ()))

    def _take_logprobs(self) -> list[dict]:
        ids, lps = self.lp
        content = token_logprobs(self.detok.tok, list(ids), list(lps))
        ids.clear()
        lps.clear()
        return content

    # --- the handler's side ----------------------------------------------------------------------
    async def run(self, first_event: tuple, prompt_tokens: int) -> None:
        """Write the stream from its first event to [DONE]."""
        greq, chunks = self.greq, self.chunks
        out = [chunks.first()] if chunks.chat else []  # not yet written: the role chunk goes with the first text
        finish: str | None = "stop"
        failed: bytes | None = None  # the error event: it goes after the text generated before it
        pending = [first_event]
        try:
            while True:
                kind, value = pending.pop() if pending else await greq.events.get()
                if kind == "tokens":
                    self._absorb(value)
                    # tokens that queued up while the handler waited go out in one chunk
                    while not greq.events.empty():
                        nxt = greq.events.get_nowait()
                        if nxt[0] != "tokens":
                            pending.append(nxt)
                            break
                        self._absorb(nxt[1])
                        value = value + nxt[1]
                    delta = self.take_held() + (self.detok.add(value) if value else "")
                    data = self._text_chunk(delta) if delta else b""
                    if data:
                        out.append(data)
                    if out and not pending:  # the stream goes on (when its end is queued, one write for both)
                        await self.writer.write(b"".join(out))
                        out = []
                        self.due = self.loop.time() + self.interval
                        if self.lp is None:
                            greq.sink = self.sink
                    continue
                if kind == "error":
                    failed = chunks.error(event_error(value))
                    finish = None
                else:
                    finish = value
                break
            # the held text goes out, also before an error; the detokenizer's pending bytes only at a finish
            tail = self.take_held() + (self.detok.flush() if finish is not None else "")
            if (tail or (self.lp is not None and self.lp[0])) and (data := self._text_chunk(tail)):
                out.append(data)
            if finish is not None and self.parse is not None:
                out += [chunks.fields(d) for d in self.parse.finish()]
                finish = assistant.finish_reason(self.parse.plan, finish, self.parse.calls)
            if self.lp is not None and self.lp[0]:  # tokens whose text the parser held to the end
                out.append(chunks.fields({}, logprobs=self._take_logprobs()))
            if failed is not None:  # last before [DONE]: clients read the event before the end as the outcome
                out.append(failed)
            if finish is not None:
                out.append(chunks.finish(finish))
            if chunks.include_usage:
                out.append(chunks.usage(usage(prompt_tokens, greq.generated)))
            out.append(chunks.done())  # chat's [DONE]; a Responses stream ends with its last event
            await self.writer.close(b"".join(out))  # the end of the stream in one write
        finally:
            self.take_held()  # no held text may reach this connection after the handler (keep-alive reuse)
