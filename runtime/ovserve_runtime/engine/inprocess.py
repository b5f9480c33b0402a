"""The in-process transport: the core's thread runs in the HTTP process and its events reach the server's event
loop in one callback per step (LoopSink). Serves the legacy pipelines, VLM_CB, and text CB models under
--no-engine-process; text CB models otherwise run in the engine-core child (process.py)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

from ..report import PipelineType
from .client import EngineClient
from .core import CBCore, Core, LegacyCore
from .request import GenRequest, deliver_batch


class LoopSink:
    """An Outbox (core.Outbox) that hands the core's events to the server's event loop, once attached. `paced`
    (the CB core): after each step, wait for the loop to run (see flush). Unpaced (the legacy core, whose
    streamer calls it per token): hand over and return."""

    __slots__ = ("loop", "out", "paced")

    def __init__(self, paced: bool = True) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.out: list[tuple[GenRequest, str, Any]] = []  # this step's events, delivered in one callback
        self.paced = paced

    def emit(self, req: GenRequest, kind: str, value: Any) -> None:
        if req.loop is None or req.events is None:
            req.emit(kind, value)  # not served by the event loop (the smoke probe)
            return
        req.record(kind, value)
        self.out.append((req, kind, value))

    def flush(self, core: Core) -> None:
        """Hand this step's events to the event loop in one callback, then (paced) give the loop two iterations
        (ContinuousBatchingPipeline.step() holds the GIL in openvino-genai 2026.4, so the loop only runs between
        steps): the handlers write their chunks and new requests are parsed before the next step. Bounded, so
        that a busy loop cannot stall generation."""
        out, self.out = self.out, []
        if not out:
            if self.paced:
                self._pace(None)
            return
        loop = self.loop
        if loop is None or loop.is_closed():
            for req, kind, value in out:  # no server loop attached (tests drive the engine directly)
                req.loop.call_soon_threadsafe(req.events.put_nowait, (kind, value))
            time.sleep(0)
            return
        if any(req.loop is not loop for req, _k, _v in out):  # requests from another loop: one by one
            for req, kind, value in out:
                req.loop.call_soon_threadsafe(req.events.put_nowait, (kind, value))
            out = []
        self._pace(out)

    def _pace(self, out: list | None) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            time.sleep(0)
            return
        ev = threading.Event() if self.paced else None
        try:
            loop.call_soon_threadsafe(deliver_batch, loop, out or [], ev)
        except RuntimeError:  # the loop is closed: server shutting down
            return
        if ev is not None:
            ev.wait(0.05)

    def gather(self, core: Core) -> None:
        """Before the first step of a burst: let the rest of the burst arrive (one prefill step for all)."""
        self.flush(core)


class InProcessClient(EngineClient):
    """A core in this process, its events delivered to the event loop by a LoopSink."""

    in_process = True

    def __init__(self, core: Core, sink: LoopSink) -> None:
        super().__init__(core.kind, core.pipeline.get_tokenizer(), core.capacity)
        self.core, self.sink = core, sink
        self.continuous_batching = core.continuous_batching
        core.on_fatal = self._fatal
        self._ids = itertools.count(1)

    def _fatal(self, message: str) -> None:
        if self.on_fatal is not None:
            self.on_fatal(message)

    # --- what the HTTP side reads --------------------------------------------------------------
    def base_config(self):
        return self.core.base_config()

    @property
    def fatal(self) -> str | None:
        return self.core.fatal

    @property
    def waiting(self) -> int:
        return self.core.waiting

    @property
    def running(self) -> int:
        return self.core.running

    @property
    def step_s(self) -> float | None:
        return self.core.step_s

    def cache_usage(self) -> float | None:
        return self.core.cache_usage()

    def cache_bytes(self) -> int | None:
        return self.core.cache_bytes()

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None:
        super().set_speculation(fields, counted)
        self.core.set_speculation(fields, counted)

    def speculation_counts(self) -> tuple[int, int, int]:
        c = self.core.spec_counts
        return c[0], c[1], c[2]

    # --- lifecycle and requests ----------------------------------------------------------------
    def start(self) -> None:
        self.core.start()

    def stop(self) -> None:
        self.core.stop()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sink.loop = loop

    def preparing(self, count: int) -> None:
        """Nothing to tell: in one process the core yields to the loop at every step (LoopSink.flush)."""

    def submit(self, req: GenRequest) -> None:
        req.id = next(self._ids)
        self.core.submit(req)

    def cancel(self, req: GenRequest) -> None:
        self.core.cancel(req)


def cb_client(pipeline, kind: PipelineType, max_active: int = 256) -> InProcessClient:
    """A ContinuousBatchingPipeline served in this process."""
    sink = LoopSink(paced=True)
    return InProcessClient(CBCore(pipeline, kind, sink, max_active=max_active), sink)


def legacy_client(pipeline, kind: PipelineType) -> InProcessClient:
    """A legacy stateful pipeline served in this process."""
    sink = LoopSink(paced=False)
    return InProcessClient(LegacyCore(pipeline, kind, sink), sink)
