"""Generation engines: one ContinuousBatchingPipeline driven by an add_request/step loop, or one legacy
(stateful, SDPA) LLMPipeline/VLMPipeline serialized behind a worker thread.

Only the engine's own thread touches the pipeline. Requests carry an asyncio queue; the engine pushes
events into it on the event loop (the CB engine: one loop callback per step carrying every request's
events, not one per token per request):
    ("tokens", [ids...])   new generated token ids
    ("done", finish_reason) "stop" | "length"
    ("error", message)      the request failed (the engine may still be healthy)
Cancelling a request (client gone) is a flag the engine thread acts on between steps (CB: handle.cancel(),
legacy: the streamer returns CANCEL), so capacity is always given back.

Counters: `waiting` are requests accepted but not generating (in the engine's queue, or inside the pipeline
but not scheduled in the last step); `running` are those the last step generated for. The CB engine hands
at most max_num_seqs requests to the pipeline (openvino-genai ignores max_num_seqs with dynamic split-fuse,
its default); the rest wait in the engine, where a cancel is free.

Fatal path: when the pipeline itself breaks (step() raising, a legacy generate failing with a broken
model), every queued and active request gets an error event at once, the counters drop to zero, later
submits raise EngineError, and on_fatal tells the server (which turns unready and exits).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .report import PipelineType

log = logging.getLogger("ovserve.engine")


@dataclass
class SchedulerOptions:
    cache_size_gb: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    dynamic_split_fuse: bool | None = None
    kv_cache_precision: str | None = None
    cache_eviction_max_tokens: int | None = None
    cache_eviction_start_tokens: int = 32
    cache_eviction_recent_tokens: int = 128
    cache_eviction_aggregation: str = "NORM_SUM"
    sparse_attention: str | None = None

    def eviction_text(self) -> str | None:
        """The asked eviction as the decision record writes it (observe.scheduler_values); None: off."""
        if self.cache_eviction_max_tokens is None:
            return None
        return (
            f"start {self.cache_eviction_start_tokens}, recent {self.cache_eviction_recent_tokens}, "
            f"max {self.cache_eviction_max_tokens} tokens, {self.cache_eviction_aggregation}"
        )

    def scheduler_config(self):
        import openvino_genai as g

        s = g.SchedulerConfig()
        if self.cache_size_gb is not None:
            # SchedulerConfig.cache_size is whole GB (0: let openvino-genai size the cache itself)
            s.cache_size = 0 if self.cache_size_gb <= 0 else max(1, round(self.cache_size_gb))
        if self.max_num_seqs is not None:
            s.max_num_seqs = self.max_num_seqs
        if self.max_num_batched_tokens is not None:
            s.max_num_batched_tokens = self.max_num_batched_tokens
        if self.enable_prefix_caching is not None:
            s.enable_prefix_caching = self.enable_prefix_caching
        if self.dynamic_split_fuse is not None:
            s.dynamic_split_fuse = self.dynamic_split_fuse
        if self.cache_eviction_max_tokens is not None:
            s.use_cache_eviction = True
            s.cache_eviction_config = g.CacheEvictionConfig(
                self.cache_eviction_start_tokens,
                self.cache_eviction_recent_tokens,
                self.cache_eviction_max_tokens,
                getattr(g.AggregationMode, self.cache_eviction_aggregation),
            )
        if self.sparse_attention is not None:
            s.use_sparse_attention = True
            s.sparse_attention_config = g.SparseAttentionConfig(
                mode=getattr(g.SparseAttentionMode, self.sparse_attention)
            )
        return s

    def kv_precision(self) -> str | None:
        """The asked KV-cache precision; None when unset or AUTO (the plugin and openvino-genai decide)."""
        p = self.kv_cache_precision
        return None if not p or p.upper() == "AUTO" else p

    def properties(self) -> dict[str, Any]:
        p = self.kv_precision()
        return {"KV_CACHE_PRECISION": p} if p else {}

    def effective_max_num_seqs(self) -> int:
        """max_num_seqs as set, or openvino-genai's default."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        import openvino_genai as g

        return int(g.SchedulerConfig().max_num_seqs)


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
    id: int = 0
    cancelled: bool = False
    finished: bool = False
    submitted_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    generated: int = 0
    finish_reason_raw: Any = None  # the last GenerationFinishReason the CB pipeline reported
    preparing: int = 0  # requests the server was still parsing when it submitted this one (burst gathering)
    logprobs: bool = False  # "tokens" events carry the sampled tokens' log-probabilities (Tokens; CB only)
    # On the event loop: takes a step's token ids instead of the events queue (no handler wake-up); returns
    # False when it cannot now (then the event is queued, and so is everything after it until the queue is empty)
    sink: Callable[[list[int]], bool] | None = None

    def record(self, kind: str) -> None:
        """Bookkeeping done on the engine thread when an event is produced."""
        if kind != "tokens":
            self.finished = True
        elif self.first_token_at is None:
            self.first_token_at = time.monotonic()

    def emit(self, kind: str, value: Any) -> None:
        self.record(kind)
        if self.loop is not None and self.events is not None:
            try:
                self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
            except RuntimeError:  # the loop is closed: server shutting down
                pass


class EngineError(RuntimeError):
    pass


def _finish_reason(fr, generated: int, max_new: int) -> str:
    import openvino_genai as g

    if fr == g.GenerationFinishReason.LENGTH:
        return "length"
    if fr == g.GenerationFinishReason.STOP:
        return "stop"
    return "length" if generated >= max_new else "stop"


class Engine:
    """Common surface of both engines."""

    continuous_batching = False
    capacity = 1  # requests generating at once (CB: max_num_seqs)
    in_process = True  # the pipeline runs in this process (not in an engine-core process)

    def __init__(self, pipeline, kind: PipelineType, tokenizer=None) -> None:
        """`pipeline`: None for a client whose pipeline runs elsewhere (engine_core.ProcessCBEngine), which
        then brings its own `tokenizer`."""
        self.pipeline = pipeline
        self.kind = kind  # the resolved PipelineType
        self.is_vlm = kind in (PipelineType.VLM, PipelineType.VLM_CB)
        self.tokenizer = tokenizer if tokenizer is not None else pipeline.get_tokenizer()
        self.token_table = None  # detok.TokenTable, built by the loader
        self.observed = None  # decisions.Observed, read back by the loader after the smoke generation
        self.speculative = None  # report.SpeculativeReport, set by the loader
        self.speculation: dict[str, Any] = {}  # GenerationConfig fields of the running speculative mode
        self.spec_counted = False  # a draft proposing a fixed number: proposed tokens are known
        self.spec_counts = [0, 0, 0]  # decode steps, draft tokens proposed (where known), accepted (cumulative)
        self.fatal: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        self.client_ids = False  # requests arrive numbered by a client (the engine-core process's parent)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting = 0
        self._running = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, once attached

    # --- generation config ---------------------------------------------------------------------
    def base_config(self):
        raise NotImplementedError

    def new_config(self):
        import openvino_genai as g

        base = self.base_config()
        c = g.GenerationConfig()
        c.eos_token_id = base.eos_token_id
        c.stop_token_ids = set(base.stop_token_ids)
        c.apply_chat_template = False  # the server applies the chat template itself
        for k, v in self.speculation.items():  # openvino-genai needs them on every request of a speculating pipeline
            setattr(c, k, v)
        return c

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None:
        """The speculative mode that runs: its GenerationConfig fields (speculative.SpeculativeConfig)."""
        self.speculation, self.spec_counted = dict(fields), counted

    def speculation_counts(self) -> tuple[int, int, int]:
        """(decode steps, proposed, accepted) of speculating requests so far."""
        c = self.spec_counts
        return c[0], c[1], c[2]

    def speculate(self, config, num_assistant_tokens: int | None) -> str | None:
        """Apply a request's num_assistant_tokens; the reason it cannot be honoured, or None."""
        if num_assistant_tokens is None:
            return None
        if "num_assistant_tokens" not in self.speculation:
            if "assistant_confidence_threshold" in self.speculation:
                return "this serving's draft proposes by confidence (--assistant-confidence-threshold), not by count"
            return "speculative decoding does not run on this serving (/v1/status speculative)"
        config.num_assistant_tokens = num_assistant_tokens
        return None

    # --- stats (read from any thread) ----------------------------------------------------------
    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def running(self) -> int:
        return self._running

    def cache_usage(self) -> float | None:
        return None

    def cache_bytes(self) -> int | None:
        """KV-cache bytes allocated (continuous batching: PipelineMetrics.cache_size_in_bytes)."""
        return None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_guarded, name=f"engine-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop: requests submitted from it get their events delivered there in batches."""
        self.loop = loop

    def preparing(self, count: int) -> None:
        """The server admitted requests it has not submitted yet (`count`); an engine that gathers a burst
        before its first prefill waits for them (the engine-core process does)."""

    def submit(self, req: GenRequest) -> None:
        # under the lock: a request is either refused here or reached by _fail's drain, never lost between
        with self._lock:
            if self.fatal is not None:
                if self.client_ids:  # the client numbered it and has heard "fatal": it answers the request
                    return
                raise EngineError(f"pipeline failed: {self.fatal}")
            if not self.client_ids:
                req.id = next(self._ids)
            self._waiting += 1
            self._enqueue(req)

    def cancel(self, req: GenRequest) -> None:
        """Called from the event loop when the client went away; the engine thread frees the slot."""
        if not req.finished:
            req.cancelled = True
            self._wake()

    def smoke(self, timeout: float = 300) -> None:
        """One-token generation through the real serving path (readiness requires it)."""
        done = threading.Event()
        result: dict[str, Any] = {}

        class _Probe(GenRequest):
            def emit(self, kind, value):
                super().emit(kind, value)
                if kind != "tokens":
                    result[kind] = value
                    done.set()

        cfg = self.new_config()
        cfg.max_new_tokens = 1
        cfg.ignore_eos = True
        if self.is_vlm:
            req = _Probe(config=cfg, max_new_tokens=1, prompt="hello")
        else:
            req = _Probe(config=cfg, max_new_tokens=1, input_ids=self.tokenizer.encode("hello").input_ids)
        self.submit(req)
        if not done.wait(timeout):
            raise EngineError("smoke generation timed out")
        if "error" in result:
            raise EngineError(result["error"])

    # --- internals -----------------------------------------------------------------------------
    def _enqueue(self, req: GenRequest) -> None:
        raise NotImplementedError

    def _wake(self) -> None:
        pass

    def _run(self) -> None:
        raise NotImplementedError

    def _run_guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a pipeline failure outside any single request is fatal
            msg = f"{type(exc).__name__}: {str(exc).strip()}"
            log.error("engine loop failed: %s", msg)
            self._fail(msg)

    def _fail(self, message: str) -> None:
        """The pipeline is broken: refuse new requests, answer every queued and active one, report."""
        with self._lock:
            self.fatal = message
            victims = self._drain_all()
            self._waiting = self._running = 0
        for req in victims:
            self._emit(req, "error", f"pipeline failed: {message}")
        self._flush()
        if self.on_fatal is not None:
            self.on_fatal(message)

    def _drain_all(self) -> list[GenRequest]:
        """Every request the engine still holds, queued or active (called with the lock held)."""
        raise NotImplementedError

    def _emit(self, req: GenRequest, kind: str, value: Any) -> None:
        req.emit(kind, value)

    def _flush(self) -> None:
        pass

    def _started(self) -> None:
        with self._lock:
            self._waiting -= 1
            self._running += 1

    def _dropped_waiting(self) -> None:
        with self._lock:
            self._waiting -= 1

    def _ended(self) -> None:
        with self._lock:
            self._running -= 1


class Sink(Protocol):
    """Where a CBEngine's events go: the transport it is composed with. `emit` on the engine thread per event,
    `flush` once per step, `gather` when the engine wakes from idle (let the rest of a burst arrive before the
    first prefill); `out` holds the events not flushed yet."""

    out: list

    def emit(self, req: GenRequest, kind: str, value: Any) -> None: ...

    def flush(self) -> None: ...

    def gather(self) -> None: ...


class LoopSink:
    """The in-process transport: a step's events go to the server's event loop in one callback."""

    __slots__ = ("engine", "out")

    def __init__(self, engine: CBEngine) -> None:
        self.engine = engine
        self.out: list[tuple[GenRequest, str, Any]] = []  # this step's events, delivered in one callback

    def emit(self, req: GenRequest, kind: str, value: Any) -> None:
        if req.loop is None or req.events is None:
            req.emit(kind, value)  # not served by the event loop (the smoke probe)
            return
        req.record(kind)
        self.out.append((req, kind, value))

    def flush(self) -> None:
        """Hand this step's events to the event loop in one callback, then give the loop two iterations
        (ContinuousBatchingPipeline.step() holds the GIL in openvino-genai 2026.4, so the loop only runs
        between steps): the handlers write their chunks and new requests are parsed before the next step.
        Bounded, so that a busy loop cannot stall generation."""
        out, self.out = self.out, []
        loop = self.engine.loop
        if loop is None or loop.is_closed():
            for req, kind, value in out:  # no server loop attached (tests drive the engine directly)
                req.loop.call_soon_threadsafe(req.events.put_nowait, (kind, value))
            time.sleep(0)
            return
        if any(req.loop is not loop for req, _k, _v in out):  # requests from another loop: one by one
            for req, kind, value in out:
                req.loop.call_soon_threadsafe(req.events.put_nowait, (kind, value))
            out = []
        ev = threading.Event()
        try:
            loop.call_soon_threadsafe(_deliver, loop, out, ev)
        except RuntimeError:  # the loop is closed: server shutting down
            return
        ev.wait(0.05)

    def gather(self) -> None:
        """Before the first step of a burst: let the rest of the burst arrive (one prefill step for all)."""
        self.flush()


class CBEngine(Engine):
    """One ContinuousBatchingPipeline; new requests join the running batch at the next step."""

    continuous_batching = True

    def __init__(
        self,
        pipeline,
        kind: PipelineType,
        max_active: int = 256,
        sink: Callable[[CBEngine], Sink] | None = None,
        client_ids: bool = False,
    ) -> None:
        """`sink`: makes the transport of this engine's events (default LoopSink: the server's event loop in
        this process; engine_core.PipeSink: the pipe to the HTTP process). `client_ids`: keep the ids the
        requests arrive with (the transport's client numbers them)."""
        super().__init__(pipeline, kind)
        self.client_ids = client_ids
        self._inbox: queue.SimpleQueue[GenRequest] = queue.SimpleQueue()
        self._pending: collections.deque[GenRequest] = collections.deque()  # taken in, not yet added
        self._max_active = self.capacity = max(1, max_active)
        self._unscheduled = 0  # in the pipeline but not scheduled by the last step
        self._cv = threading.Condition()
        self._active: dict[int, tuple[GenRequest, Any]] = {}
        self._base = pipeline.get_config()
        self._metrics = None
        self._usage = 0.0  # KV-cache usage (percent) of the last step; 0 once no request is in the pipeline
        self._dirty = False  # cancelled requests not yet dropped by a step
        self.step_s: float | None = None  # a moving average of step() wall times
        self.sink: Sink = (sink or LoopSink)(self)
        # bound once: the step loop calls them per event and per step
        self._emit, self._flush, self._yield_to_loop = self.sink.emit, self.sink.flush, self.sink.gather

    def base_config(self):
        return self._base

    @property
    def waiting(self) -> int:
        return self._waiting + self._unscheduled

    @property
    def running(self) -> int:
        return max(0, self._running - self._unscheduled)

    def cache_usage(self) -> float | None:
        """0 when no request is in the pipeline: nothing steps while idle, so the last step's figure would
        stay (and a KVCacheUsage autoscaler would never scale down)."""
        return self._usage if self._active else 0.0

    def cache_bytes(self) -> int | None:
        m = self._metrics
        return None if m is None else int(m.cache_size_in_bytes)

    def _enqueue(self, req: GenRequest) -> None:
        self._inbox.put(req)
        self._wake()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify()

    def _admit(self) -> None:
        while True:
            try:
                self._pending.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        while self._pending and len(self._active) < self._max_active:
            req = self._pending.popleft()
            if req.cancelled:
                self._dropped_waiting()
                self._emit(req, "done", "cancelled")
                continue
            try:
                if self.is_vlm:
                    handle = self.pipeline.add_request(req.id, req.prompt or "", list(req.images), req.config)
                else:
                    handle = self.pipeline.add_request(req.id, req.input_ids, req.config)
            except Exception as exc:  # a bad request must not leak a slot or stop the loop
                self._dropped_waiting()
                self._emit(req, "error", str(exc).strip())
                continue
            self._started()
            self._active[req.id] = (req, handle)
        if any(r.cancelled for r in self._pending):  # a cancel while queued costs nothing, answer it now
            for req in [r for r in self._pending if r.cancelled]:
                self._pending.remove(req)
                self._dropped_waiting()
                self._emit(req, "done", "cancelled")

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

    def _collect(self) -> None:
        ignored, done_states, unfinished = _status_values()
        for rid, (req, h) in list(self._active.items()):
            if req.cancelled:
                h.cancel()
                self._dirty = True
                del self._active[rid]
                self._ended()
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
                self._ended()
                self._emit(req, "error", "the request was ignored by the scheduler (prompt does not fit the KV cache)")
            elif status in done_states and not h.can_read():
                del self._active[rid]
                self._ended()
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

    def _pending_work(self) -> bool:
        return self._dirty

    def _run(self) -> None:
        pipe = self.pipeline
        while not self._stop.is_set():
            with self._cv:
                if not self._active and not self._pending and self._inbox.empty() and not self._pending_work():
                    self._cv.wait(timeout=0.5)
            was_idle = not self._active
            self._admit()
            if was_idle and self._active:
                # requests of a burst arrive a little apart: let the event loop parse the rest of the burst
                # so that they are prefilled in the same step
                self._yield_to_loop()
                self._admit()
            if self.sink.out and not self._active:
                self._flush()  # refused or cancelled before starting: nothing will step for them
            # also step with nothing active: a cancelled request's KV blocks are released by a step
            if self._active or self._pending_work():
                if pipe.has_non_finished_requests():
                    t = time.monotonic()
                    pipe.step()  # raising is fatal: _run_guarded answers every request
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
                self._flush()


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


def deliver(req: GenRequest, kind: str, value: Any) -> None:
    """On the event loop: one event to its request's handler, through its sink when it has one and nothing is
    queued before it (the order of a request's events is kept)."""
    sink = req.sink
    if sink is not None and kind == "tokens" and req.events.empty() and sink(value):
        return
    req.events.put_nowait((kind, value))


def _deliver(loop: asyncio.AbstractEventLoop, out: list, ev: threading.Event) -> None:
    """On the event loop: one step's events to their requests."""
    for req, kind, value in out:
        deliver(req, kind, value)
    loop.call_soon(ev.set)


class LegacyEngine(Engine):
    """One stateful LLMPipeline / VLMPipeline (SDPA); requests run one at a time, in arrival order."""

    def __init__(self, pipeline, kind: PipelineType) -> None:
        super().__init__(pipeline, kind)
        self._queue: queue.Queue[GenRequest | None] = queue.Queue()
        self._current: GenRequest | None = None  # the request generating now
        self._base = pipeline.get_generation_config()

    def base_config(self):
        return self._base

    def _enqueue(self, req: GenRequest) -> None:
        self._queue.put(req)

    def _wake(self) -> None:
        if self._stop.is_set():
            self._queue.put(None)

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

    def _run(self) -> None:
        import openvino_genai as g

        while not self._stop.is_set():
            req = self._queue.get()
            if req is None:
                continue
            if req.cancelled:
                self._dropped_waiting()
                req.emit("done", "cancelled")
                continue
            self._started()
            self._current = req  # only this thread (and _fail, on it) touches it
            try:
                final = self._generate(g, req)
            except Exception as exc:
                msg = str(exc).strip()
                if _is_fatal(msg):
                    raise  # _fail answers this request and every queued one
                self._current = None
                self._ended()  # the slot is free before the client hears the outcome
                req.emit("error", msg)
            else:
                self._current = None
                self._ended()
                req.emit("done", final)

    def _generate(self, g, req: GenRequest) -> str:
        """Run one generation; returns the finish reason ("cancelled", "length" or "stop")."""

        class _Streamer(g.StreamerBase):
            def write(self, token):
                ids = [token] if isinstance(token, int) else list(token)
                req.generated += len(ids)
                req.emit("tokens", ids)
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


# --- construction --------------------------------------------------------------------------------


def construct_cb(path: str, device: str, sched: SchedulerOptions, props: dict[str, Any], spec=None):
    """`spec`: a speculative.SpeculativeConfig to run (a draft model or prompt lookup), or None."""
    import openvino_genai as g

    cfg = sched.scheduler_config()
    extra = {**props, **sched.properties()}
    if spec is not None and spec.mode == "draft":
        extra["draft_model"] = g.draft_model(
            spec.draft_path, spec.draft_device or device, **dict(spec.draft_properties)
        )
    elif spec is not None and spec.mode == "promptLookup":
        extra["prompt_lookup"] = True
    log.info(
        "ContinuousBatchingPipeline scheduler: cache_size=%s max_num_seqs=%s max_num_batched_tokens=%s "
        "enable_prefix_caching=%s dynamic_split_fuse=%s properties=%s",
        cfg.cache_size,
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        cfg.enable_prefix_caching,
        cfg.dynamic_split_fuse,
        extra,
    )
    return g.ContinuousBatchingPipeline(path, cfg, device, extra)


def construct_legacy(path: str, device: str, vlm: bool, props: dict[str, Any]):
    """Legacy stateful pipeline with the SDPA backend forced (never the silent PA-then-SDPA default)."""
    import openvino_genai as g

    cls = g.VLMPipeline if vlm else g.LLMPipeline
    return cls(path, device, ATTENTION_BACKEND="SDPA", **props)
