"""Engine cores: the one object that owns a pipeline and steps it, on a thread of its own, with no event loop.

CBCore drives one ContinuousBatchingPipeline with an add_request/step loop; LegacyCore serializes one stateful
(SDPA) LLMPipeline/VLMPipeline, a request at a time. A core is built with an Outbox, the transport its events
leave through: `emit` per event, `flush` once per step (the CB core: one batch per step carrying every request's
events, never one wake-up per token per request), `gather` when it wakes from idle. inprocess.LoopSink hands a
step to the server's event loop in this process; process.PipeSink writes it to the pipe of the HTTP process.
The core never knows which, and nothing of it is specialised per transport.

Requests arrive numbered by their client (client.py). Cancelling one (the client went away) is a flag the
core's thread acts on between steps (CB: handle.cancel(), legacy: the streamer returns CANCEL), so capacity is
always given back.

Counters: `waiting` are requests accepted but not generating (in the core's queue, or inside the pipeline but
not scheduled in the last step); `running` are those the last step generated for. The CB core hands at most
max_num_seqs requests to the pipeline (openvino-genai ignores max_num_seqs with dynamic split-fuse, its
default); the rest wait in the core, where a cancel is free. Speculative decoding is counted here too: decode
steps, proposed and accepted draft tokens.

Fatal path: when the pipeline itself breaks (step() raising, a legacy generate failing with a broken model),
every queued and active request gets an error event at once, the counters drop to zero, later submits raise
EngineError, and on_fatal tells the transport (which tells the server: it turns unready and exits).
"""

from __future__ import annotations

import collections
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..report import PipelineType
from .request import EngineError, GenRequest, with_logprobs

log = logging.getLogger("ovserve.engine")


class Outbox(Protocol):
    """Where a core's events go: the transport it is composed with. `emit` on the core's thread per event,
    `flush` once per step, `gather` when the CB core wakes from idle (let the rest of a burst arrive before the
    first prefill); `out` holds the events not flushed yet. flush and gather get the core for its counters."""

    out: list

    def emit(self, req: GenRequest, kind: str, value: Any) -> None: ...

    def flush(self, core: Core) -> None: ...

    def gather(self, core: Core) -> None: ...


class Core(Protocol):
    """What a transport sees of a core (CBCore, LegacyCore)."""

    pipeline: Any
    kind: PipelineType
    is_vlm: bool
    continuous_batching: bool
    capacity: int
    step_s: float | None
    on_fatal: Callable[[str], None] | None
    spec_counts: list[int]

    @property
    def fatal(self) -> str | None: ...

    @property
    def waiting(self) -> int: ...

    @property
    def running(self) -> int: ...

    def base_config(self) -> Any: ...

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None: ...

    def cache_usage(self) -> float | None: ...

    def cache_bytes(self) -> int | None: ...

    def queued(self) -> int: ...

    def submit(self, req: GenRequest) -> None: ...

    def cancel(self, req: GenRequest) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Ledger:
    """What a core owes its client: requests accepted and not generating (`waiting`), generating (`running`),
    and the pipeline's failure (`fatal`). One lock: a request is either refused by `accept` or reached by the
    fatal drain, never lost between."""

    __slots__ = ("fatal", "lock", "running", "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.fatal: str | None = None

    def accept(self, req: GenRequest, enqueue: Callable[[GenRequest], None]) -> None:
        with self.lock:
            if self.fatal is not None:
                raise EngineError(f"pipeline failed: {self.fatal}")
            self.waiting += 1
            enqueue(req)

    def started(self) -> None:
        with self.lock:
            self.waiting -= 1
            self.running += 1

    def dropped(self) -> None:
        """A waiting request that will not run (cancelled, refused by the pipeline)."""
        with self.lock:
            self.waiting -= 1

    def ended(self) -> None:
        with self.lock:
            self.running -= 1

    def fail(self, message: str, drain: Callable[[], list[GenRequest]]) -> list[GenRequest]:
        """Turn fatal; every request still held (`drain`, called under the lock) is returned to be answered."""
        with self.lock:
            self.fatal = message
            victims = drain()
            self.waiting = self.running = 0
        return victims


class CoreThread:
    """The thread a core runs on: `run` until `stopping`; an exception escaping it is the pipeline's failure."""

    def __init__(self, name: str, run: Callable[[], None], fail: Callable[[str], None], wake: Callable[[], None]):
        self.name, self._run, self._fail, self._wake = name, run, fail, wake
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a pipeline failure outside any single request is fatal
            msg = f"{type(exc).__name__}: {str(exc).strip()}"
            log.error("engine loop failed: %s", msg)
            self._fail(msg)


def answer_fatal(core: Core, outbox: Outbox, victims: list[GenRequest], message: str) -> None:
    """Every request the broken pipeline held gets the error, in one flush; then the transport hears it."""
    for req in victims:
        outbox.emit(req, "error", f"pipeline failed: {message}")
    outbox.flush(core)
    if core.on_fatal is not None:
        core.on_fatal(message)


def _finish_reason(fr, generated: int, max_new: int) -> str:
    import openvino_genai as g

    if fr == g.GenerationFinishReason.LENGTH:
        return "length"
    if fr == g.GenerationFinishReason.STOP:
        return "stop"
    return "length" if generated >= max_new else "stop"


@functools.cache
def _status_values() -> tuple[int, frozenset[int], int]:
    """GenerationStatus values (IGNORED, {FINISHED, STOP, CANCEL}) and GenerationFinishReason.NONE's."""
    import openvino_genai as g

    s = g.GenerationStatus
    return (
        s.IGNORED.value,
        frozenset(x.value for x in (s.FINISHED, s.STOP, s.CANCEL)),
        g.GenerationFinishReason.NONE.value,
    )


class CBCore:
    """One ContinuousBatchingPipeline; new requests join the running batch at the next step."""

    continuous_batching = True

    def __init__(self, pipeline, kind: PipelineType, outbox: Outbox, max_active: int = 256) -> None:
        self.pipeline = pipeline
        self.kind = kind
        self.is_vlm = kind in (PipelineType.VLM, PipelineType.VLM_CB)
        self.outbox = outbox
        self.on_fatal: Callable[[str], None] | None = None
        self.capacity = max(1, max_active)  # requests in the pipeline at once
        self.speculation: dict[str, Any] = {}  # GenerationConfig fields of the running speculative mode
        self.spec_counted = False  # a draft proposing a fixed number: proposed tokens are known
        self.spec_counts = [0, 0, 0]  # decode steps, draft tokens proposed (where known), accepted (cumulative)
        self.step_s: float | None = None  # a moving average of step() wall times
        self._ledger = Ledger()
        self._inbox: queue.SimpleQueue[GenRequest] = queue.SimpleQueue()
        self._pending: collections.deque[GenRequest] = collections.deque()  # taken in, not yet added
        self._unscheduled = 0  # in the pipeline but not scheduled by the last step
        self._cv = threading.Condition()
        self._active: dict[int, tuple[GenRequest, Any]] = {}
        self._base = pipeline.get_config()
        self._metrics = None
        self._usage = 0.0  # KV-cache usage (percent) of the last step; 0 once no request is in the pipeline
        self._dirty = False  # cancelled requests not yet dropped by a step
        self._emit = outbox.emit  # bound once: the step loop calls it per event
        self._thread = CoreThread(f"engine-{kind}", self._run, self._fail, self._wake)

    # --- what the transports read --------------------------------------------------------------
    def base_config(self):
        return self._base

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None:
        """The speculative mode that runs: its GenerationConfig fields (speculative.SpeculativeConfig)."""
        self.speculation, self.spec_counted = dict(fields), counted

    @property
    def fatal(self) -> str | None:
        return self._ledger.fatal

    @property
    def waiting(self) -> int:
        return self._ledger.waiting + self._unscheduled

    @property
    def running(self) -> int:
        return max(0, self._ledger.running - self._unscheduled)

    def cache_usage(self) -> float | None:
        """0 when no request is in the pipeline: nothing steps while idle, so the last step's figure would
        stay (and a KVCacheUsage autoscaler would never scale down)."""
        return self._usage if self._active else 0.0

    def cache_bytes(self) -> int | None:
        """KV-cache bytes allocated (PipelineMetrics.cache_size_in_bytes)."""
        m = self._metrics
        return None if m is None else int(m.cache_size_in_bytes)

    def queued(self) -> int:
        """Requests submitted and not yet taken in by the step loop (burst gathering watches it)."""
        return self._inbox.qsize()

    # --- requests, from the transport's thread -------------------------------------------------
    def submit(self, req: GenRequest) -> None:
        self._ledger.accept(req, self._enqueue)

    def cancel(self, req: GenRequest) -> None:
        if not req.finished:
            req.cancelled = True
            self._wake()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    # --- the step loop -------------------------------------------------------------------------
    def _enqueue(self, req: GenRequest) -> None:
        self._inbox.put(req)
        self._wake()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify()

    def _fail(self, message: str) -> None:
        answer_fatal(self, self.outbox, self._ledger.fail(message, self._drain_all), message)

    def _drain_all(self) -> list[GenRequest]:
        victims = [req for req, _h in self._active.values()] + list(self._pending)
        self._active.clear()
        self._pending.clear()
        while True:
            try:
                victims.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        self._unscheduled = 0
        return victims

    def _admit(self) -> None:
        while True:
            try:
                self._pending.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        ledger = self._ledger
        while self._pending and len(self._active) < self.capacity:
            req = self._pending.popleft()
            if req.cancelled:
                ledger.dropped()
                self._emit(req, "done", "cancelled")
                continue
            try:
                if self.is_vlm:
                    handle = self.pipeline.add_request(req.id, req.prompt or "", list(req.images), req.config)
                else:
                    handle = self.pipeline.add_request(req.id, req.input_ids, req.config)
            except Exception as exc:  # a bad request must not leak a slot or stop the loop
                ledger.dropped()
                self._emit(req, "error", str(exc).strip())
                continue
            ledger.started()
            req.started_at = time.monotonic()
            self._active[req.id] = (req, handle)
        if any(r.cancelled for r in self._pending):  # a cancel while queued costs nothing, answer it now
            for req in [r for r in self._pending if r.cancelled]:
                self._pending.remove(req)
                ledger.dropped()
                self._emit(req, "done", "cancelled")

    def _collect(self) -> None:
        ignored, done_states, unfinished = _status_values()
        ended = self._ledger.ended
        for rid, (req, h) in list(self._active.items()):
            if req.cancelled:
                h.cancel()
                self._dirty = True
                del self._active[rid]
                ended()
                self._emit(req, "done", "cancelled")
                continue
            if h.can_read():
                outs = h.read()
                ids: list[int] = []
                lps: list[float] | None = [] if req.logprobs else None
                for out in outs.values():
                    ids.extend(out.generated_ids)
                    if lps is not None:
                        lps.extend(out.generated_log_probs)
                    req.finish_reason_raw = out.finish_reason
                if lps is not None:
                    ids = with_logprobs(ids, lps)
                if ids:
                    if self.speculation and req.generated:  # a decode step: tokens beyond one were accepted
                        self._count_speculation(req, len(ids))
                    req.generated += len(ids)
                    self._emit(req, "tokens", ids)
                    if req.finish_reason_raw.value == unfinished:
                        continue  # still generating: no status call (a step's Python time is per request)
            status = h.get_status().value  # an int: comparing pybind11 enums costs microseconds per request
            if status == ignored:
                del self._active[rid]
                ended()
                self._emit(req, "error", "the request was ignored by the scheduler (prompt does not fit the KV cache)")
            elif status in done_states and not h.can_read():
                del self._active[rid]
                ended()
                self._emit(req, "done", _finish_reason(req.finish_reason_raw, req.generated, req.max_new_tokens))

    def _count_speculation(self, req: GenRequest, n: int) -> None:
        """One decode step of a speculating request that yielded `n` tokens: n - 1 proposed tokens were accepted.
        Proposed counts are known for a draft proposing a fixed number (min(N, tokens left - 1)); prompt lookup
        and a confidence threshold propose a varying number, which add_request/step does not expose."""
        c = self.spec_counts
        c[0] += 1
        c[2] += n - 1
        k = req.config.num_assistant_tokens if self.spec_counted else 0
        if k:
            c[1] += max(0, min(k, req.max_new_tokens - req.generated - 1))

    def _run(self) -> None:
        pipe, outbox, stopping = self.pipeline, self.outbox, self._thread.stopping
        while not stopping.is_set():
            with self._cv:
                if not self._active and not self._pending and self._inbox.empty() and not self._dirty:
                    self._cv.wait(timeout=0.5)
            was_idle = not self._active
            self._admit()
            if was_idle and self._active:
                # requests of a burst arrive a little apart: let the transport gather the rest of the burst so
                # that they are prefilled in the same step
                outbox.gather(self)
                self._admit()
            if outbox.out and not self._active:
                outbox.flush(self)  # refused or cancelled before starting: nothing will step for them
            # also step with nothing active: a cancelled request's KV blocks are released by a step
            if self._active or self._dirty:
                if pipe.has_non_finished_requests():
                    t = time.monotonic()
                    pipe.step()  # raising is fatal: CoreThread answers every request
                    t = time.monotonic() - t
                    self.step_s = t if self.step_s is None else 0.8 * self.step_s + 0.2 * t
                    try:
                        self._metrics = pipe.get_metrics()  # about a microsecond
                        self._usage = float(self._metrics.cache_usage)
                    except Exception:  # metrics are best effort
                        self._metrics = None
                self._collect()
                if not self._active:
                    self._usage = 0.0  # a new burst reads 0 until its first step, not the last burst's end
                scheduled = self._metrics.scheduled_requests if self._metrics is not None else len(self._active)
                self._unscheduled = max(0, len(self._active) - scheduled)
                if not self._active and not pipe.has_non_finished_requests():
                    self._dirty = False
                outbox.flush(self)


class LegacyCore:
    """One stateful LLMPipeline / VLMPipeline (SDPA); requests run one at a time, in arrival order. Its events
    leave through the outbox one token at a time (the pipeline's streamer is the only place they appear)."""

    continuous_batching = False
    capacity = 1
    step_s = None  # no steps: one generate() per request

    def __init__(self, pipeline, kind: PipelineType, outbox: Outbox) -> None:
        self.pipeline = pipeline
        self.kind = kind
        self.is_vlm = kind in (PipelineType.VLM, PipelineType.VLM_CB)
        self.outbox = outbox
        self.on_fatal: Callable[[str], None] | None = None
        self.spec_counts = [0, 0, 0]  # speculative decoding needs continuous batching: never counts
        self._ledger = Ledger()
        self._queue: queue.Queue[GenRequest | None] = queue.Queue()
        self._current: GenRequest | None = None  # the request generating now
        self._base = pipeline.get_generation_config()
        self._thread = CoreThread(f"engine-{kind}", self._run, self._fail, self._wake)

    def base_config(self):
        return self._base

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None:
        if fields:
            raise EngineError("speculative decoding needs the continuous-batching pipeline")

    @property
    def fatal(self) -> str | None:
        return self._ledger.fatal

    @property
    def waiting(self) -> int:
        return self._ledger.waiting

    @property
    def running(self) -> int:
        return self._ledger.running

    def cache_usage(self) -> float | None:
        return None

    def cache_bytes(self) -> int | None:
        return None

    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, req: GenRequest) -> None:
        self._ledger.accept(req, self._queue.put)

    def cancel(self, req: GenRequest) -> None:
        """The streamer and the queue check the flag: nothing to wake."""
        if not req.finished:
            req.cancelled = True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _wake(self) -> None:
        if self._thread.stopping.is_set():
            self._queue.put(None)

    def _fail(self, message: str) -> None:
        answer_fatal(self, self.outbox, self._ledger.fail(message, self._drain_all), message)

    def _drain_all(self) -> list[GenRequest]:
        victims = [self._current] if self._current is not None else []
        self._current = None
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                return victims
            if req is not None:
                victims.append(req)

    def _send(self, req: GenRequest, kind: str, value: Any) -> None:
        self.outbox.emit(req, kind, value)
        self.outbox.flush(self)

    def _run(self) -> None:
        import openvino_genai as g

        ledger, stopping = self._ledger, self._thread.stopping
        while not stopping.is_set():
            req = self._queue.get()
            if req is None:
                continue
            if req.cancelled:
                ledger.dropped()
                self._send(req, "done", "cancelled")
                continue
            ledger.started()
            req.started_at = time.monotonic()
            self._current = req  # only this thread (and _fail, on it) touches it
            try:
                final = self._generate(g, req)
            except Exception as exc:
                msg = str(exc).strip()
                if _is_fatal(msg):
                    raise  # _fail answers this request and every queued one
                self._current = None
                ledger.ended()  # the slot is free before the client hears the outcome
                self._send(req, "error", msg)
            else:
                self._current = None
                ledger.ended()
                self._send(req, "done", final)

    def _generate(self, g, req: GenRequest) -> str:
        """Run one generation; returns the finish reason ("cancelled", "length" or "stop")."""
        send = self._send

        class _Streamer(g.StreamerBase):
            def write(self, token):
                ids = [token] if isinstance(token, int) else list(token)
                req.generated += len(ids)
                send(req, "tokens", ids)
                return g.StreamingStatus.CANCEL if req.cancelled else g.StreamingStatus.RUNNING

            def end(self):
                pass

        streamer = _Streamer()
        if self.is_vlm:
            self.pipeline.generate(
                req.prompt or "", images=list(req.images), generation_config=req.config, streamer=streamer
            )
        else:
            self.pipeline.generate(req.input_ids, req.config, streamer)
        if req.cancelled:
            return "cancelled"
        return "length" if req.generated >= req.max_new_tokens else "stop"


def _is_fatal(msg: str) -> bool:
    # a per-request error (bad input) leaves the pipeline usable; a broken model does not
    return "beam_idx" in msg or "infer_request" in msg
