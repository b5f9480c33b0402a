"""A generation request as the engine sees it, and the events that answer it on the server's event loop.

Every core pushes a request's events through its transport; on the event loop they reach the request's handler:
    ("tokens", [ids...])   new generated token ids
    ("done", finish_reason) "stop" | "length" | "cancelled"
    ("error", message)      the request failed (the engine may still be healthy)

Delivery isolates requests: an exception while one request's events are delivered (its sink: the stream's
parser and writer) answers that request with an error and drops what comes for it after; the rest of the
step's batch is delivered all the same.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("ovserve.engine")


class EngineError(RuntimeError):
    pass


class Events:
    """A request's events on the event loop, for its one handler: the part of asyncio.Queue the server uses
    (put_nowait, get, get_nowait, empty) without its bookkeeping (maxsize, join/task_done, getter lists), which
    was a quarter of the HTTP process's Python time at 16 streams on a tiny model (one put and one get per
    request per step)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():  # done: its handler was cancelled
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> Any:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.popleft()


class Tokens(list):
    """A "tokens" event's ids with their log-probabilities (`logprobs`), for a request that asked for them."""

    logprobs: list[float]


def with_logprobs(ids: list[int], logprobs: list[float]) -> Tokens:
    t = Tokens(ids)
    t.logprobs = logprobs
    return t


@dataclass(eq=False)  # identity: requests live in sets and are compared as objects
class GenRequest:
    """One generation. `input_ids` (ov.Tensor [1, n]) for text, or `prompt` + `images` for a VLM."""

    config: Any  # openvino_genai.GenerationConfig
    max_new_tokens: int
    input_ids: Any = None
    prompt: str | None = None
    images: list = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None
    events: Events | asyncio.Queue | None = None  # the server's Events; tests may use an asyncio.Queue
    id: int = 0  # given by the engine client that takes it
    cancelled: bool = False
    finished: bool = False
    submitted_at: float = field(default_factory=time.monotonic)  # the server: when the request arrived
    queued_at: float | None = None  # the server: when it was handed to the engine (after preparing)
    started_at: float | None = None  # the core: when it entered the pipeline (the process transport sends it)
    first_token_at: float | None = None
    last_token_at: float | None = None
    token_gaps: list[float] = field(default_factory=list)  # seconds between successive "tokens" events
    finish: str | None = None  # the "done" event's reason (stop, length, cancelled), "error" for an error event
    generated: int = 0
    finish_reason_raw: Any = None  # the last GenerationFinishReason the CB pipeline reported
    preparing: int = 0  # requests the server was still parsing when it submitted this one (burst gathering)
    logprobs: bool = False  # "tokens" events carry the sampled tokens' log-probabilities (Tokens; CB only)
    # On the event loop: takes a step's token ids instead of the events queue (no handler wake-up); returns
    # False when it cannot now (then the event is queued, and so is everything after it until the queue is empty)
    sink: Callable[[list[int]], bool] | None = None
    # Off the event loop: a caller with no loop (the smoke generation) takes each event on the engine's thread
    on_event: Callable[[str, Any], None] | None = None
    undeliverable: bool = False  # delivering an event raised: it was answered with an error, the rest is dropped

    def record(self, kind: str, value: Any = None) -> None:
        """Bookkeeping done when an event is produced (or, the process transport, received): finish, first
        token and the gaps between token events (the inter-token latency metric)."""
        if kind != "tokens":
            self.finished = True
            self.finish = value if kind == "done" and isinstance(value, str) else "error"
            return
        now = time.monotonic()
        if self.first_token_at is None:
            self.first_token_at = now
        elif self.last_token_at is not None:
            self.token_gaps.append(now - self.last_token_at)
        self.last_token_at = now

    def emit(self, kind: str, value: Any) -> None:
        """One event, on its own (the batched path is the transport's): to `on_event`, or to the request's loop."""
        self.record(kind, value)
        if self.on_event is not None:
            self.on_event(kind, value)
        elif self.loop is not None and self.events is not None:
            try:
                self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
            except RuntimeError:  # the loop is closed: server shutting down
                pass


def deliver(req: GenRequest, kind: str, value: Any) -> None:
    """On the event loop: one event to its request's handler, through its sink when it has one and nothing is
    queued before it (the order of a request's events is kept). Never raises: a failure answers this request."""
    if req.undeliverable:
        return
    try:
        sink = req.sink
        if sink is not None and kind == "tokens" and req.events.empty() and sink(value):
            return
        req.events.put_nowait((kind, value))
    except Exception as exc:
        _undeliverable(req, exc)


def _undeliverable(req: GenRequest, exc: Exception) -> None:
    """This request's output cannot be delivered: its handler gets an error (and then cancels it)."""
    log.error("delivering request %s's output failed: %s: %s", req.id, type(exc).__name__, exc, exc_info=exc)
    req.undeliverable, req.sink = True, None
    try:
        req.events.put_nowait(("error", f"delivering the output failed ({type(exc).__name__})"))
    except Exception:  # its queue is broken too: nothing can reach this handler
        log.exception("request %s: the error could not be queued either", req.id)


def deliver_batch(loop: asyncio.AbstractEventLoop, out: list, ev: threading.Event | None) -> None:
    """On the event loop: one step's events to their requests, each on its own (deliver never raises); then
    `ev` tells the engine thread they are out."""
    try:
        for req, kind, value in out:
            deliver(req, kind, value)
    finally:
        if ev is not None:
            loop.call_soon(ev.set)
