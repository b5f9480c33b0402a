"""The engine of the tasks other than text generation: one pipeline, one thread, requests batched.

Embeddings and rerank pipelines take a whole batch in one call (`embed_documents(texts)`,
`rerank(query, documents)`), and a call on a batch costs far less than a call per text. So the worker takes
every job waiting when it wakes and runs as few calls as the jobs allow: for embeddings one call for the texts
of all waiting requests (up to `max_batch` texts; a larger request runs alone, in slices), for rerank one call
per request (a call has one query), a request's documents in slices of `slice_size`. Results go back to the
event loop in one wake-up per call.

The surface is the generation engine client's (engine.EngineClient) where the HTTP side uses it, so that admission, the
429 bound, the drain, readiness/liveness and the fatal path are the same code for every task: `capacity`
(requests served by one call), `running`, `fatal` / `on_fatal`, `submit`, `cancel`, `tokenizer`.

Liveness: the HTTP side tracks jobs with the generations, and the progress watchdog reads their `generated`
(texts done: a large request's slices count as they finish) and the engine's `step_s` (the last call's
duration), so a hung pipeline call with requests in flight turns liveness 503 as a hung generation does.

Faults: an exception from a call is first taken for a bad input: the smoke input is run, and when it passes,
each job of the failed call is retried alone so that only the job that fails alone gets the error (500). When
the smoke input fails too, the pipeline is broken: every queued and running job gets the error, `fatal` is
set and `on_fatal` tells the server (readiness and liveness 503, failure report, exit 3), as for generation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import EngineError, Events

log = logging.getLogger("ovserve.tasks")

GATHER_SHARE = 0.25  # of the last call's duration: the longest wait for the last call's batch to re-form
GATHER_MAX_S = 0.02
GATHER_CALLS = 4  # the batch to re-form: the largest of this many last calls (a lighter load stops waiting soon)


@dataclass(eq=False)
class Job:
    """One request's work: `texts` (embeddings) or a query and its documents (rerank)."""

    texts: list[str]
    query: str | None = None
    loop: asyncio.AbstractEventLoop | None = None
    events: Events | None = None  # ("done", results) or ("error", message | ApiError), once
    cancelled: bool = False
    finished: bool = False
    submitted_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # texts done so far (the slices of a request larger than a batch): the progress the liveness watchdog reads,
    # as it reads a generation's tokens (a job in flight without it made every probe a 500 under load)
    generated: int = 0

    def emit(self, kind: str, value: Any) -> None:
        """From the worker thread: the job's one event, delivered on its loop."""
        if self.finished:
            return
        self.finished = True
        if self.loop is not None and self.events is not None:
            try:
                self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
            except RuntimeError:
                pass  # the loop is closed: nobody waits


def _deliver(items: list) -> None:
    for events, event in items:
        events.put_nowait(event)


# run(jobs) -> one result per job (a list of vectors, or of (index, score) pairs)
RunBatch = Callable[[Sequence[Job]], list[Any]]


class TaskEngine:
    continuous_batching = False
    in_process = True
    token_table = None
    is_vlm = False
    observed = None  # decisions.Observed of a generation engine; the record takes its defaults
    speculative = None

    def __init__(
        self,
        name: str,
        run: RunBatch,
        tokenizer: Any,
        max_batch: int,
        batch_jobs: bool,
        smoke: Job,
        merge: Callable[[list], Any] | None = None,
        slice_size: int | None = None,
    ) -> None:
        self.kind = name
        self.run = run
        self.merge = merge  # the results of a large job's slices -> its one result
        self.tokenizer = tokenizer
        self.max_batch = max(1, max_batch)
        # the most texts of one job in one call (default: a batch): a larger job runs in slices, so that what one
        # request costs a call (its tensors, the pipeline's activations) is bounded whatever its size
        self.slice_size = max(1, slice_size or self.max_batch)
        self.batch_jobs = batch_jobs  # several jobs in one call (embeddings) or one job per call (rerank)
        self.capacity = self.max_batch if batch_jobs else 1
        self.smoke_job = smoke
        self.fatal: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0  # pipeline calls made
        self.on_call: Callable[[int], None] | None = None  # texts of each call (metrics), from the worker
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._running = 0
        self._recent: deque[int] = deque([1], maxlen=GATHER_CALLS)  # texts of the last calls: the batch worth a wait
        self._last_call_s = 0.0  # its duration: the wait is a share of it
        self._stop = False
        self._thread: threading.Thread | None = None

    # --- the server's side (event loop) --------------------------------------------------------
    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def cache_usage(self) -> float | None:
        return None

    @property
    def step_s(self) -> float | None:
        """The last call's duration: the liveness watchdog's unit of progress (None before the first)."""
        return self._last_call_s or None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def preparing(self, count: int) -> None:
        pass

    def submit(self, job: Job) -> None:
        with self._cond:  # under the lock: a job is refused here or reached by _fail, never lost between
            if self.fatal is not None:
                raise EngineError(f"pipeline failed: {self.fatal}")
            self._queue.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """The client went away (or the drain ended it): a queued job is skipped; a running call finishes."""
        job.cancelled = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"task-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def smoke(self, timeout: float = 300) -> None:
        """The smoke input through the real path (readiness requires it)."""
        done = threading.Event()
        out: dict[str, Any] = {}

        class _Probe(Job):
            def emit(self, kind: str, value: Any) -> None:
                out[kind] = value
                done.set()

        probe = _Probe(texts=list(self.smoke_job.texts), query=self.smoke_job.query, extra=self.smoke_job.extra)
        self.submit(probe)
        if not done.wait(timeout):
            raise EngineError("smoke call timed out")
        if "error" in out:
            raise EngineError(str(out["error"]))

    # --- the worker thread -----------------------------------------------------------------------
    def _take(self) -> list[Job] | None:
        with self._cond:
            while not self._queue and not self._stop:
                self._cond.wait()
            if self._stop:
                return None
            jobs = [self._queue.popleft()]
            if self.batch_jobs:
                total = len(jobs[0].texts)
                # clients whose answers the last calls sent re-send within a round trip: wait a little for the
                # batch the last calls had (closed-loop clients otherwise split into a large and a small call:
                # a mean batch of 8 at 16 clients), never longer than a fraction of a call, and not at all when
                # the load is lighter than that (a batch of 1 after a call of 1)
                deadline = time.monotonic() + min(GATHER_MAX_S, GATHER_SHARE * self._last_call_s)
                while total < min(self.max_batch, max(self._recent)):
                    if self._queue:
                        if total + len(self._queue[0].texts) > self.max_batch:
                            break
                        job = self._queue.popleft()
                        total += len(job.texts)
                        jobs.append(job)
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stop:
                        break
                    self._cond.wait(left)
                while self._queue and total + len(self._queue[0].texts) <= self.max_batch:
                    job = self._queue.popleft()
                    total += len(job.texts)
                    jobs.append(job)
                self._recent.append(total)
            jobs = [j for j in jobs if not j.cancelled]
            self._running = len(jobs)
            return jobs

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            try:
                if jobs:
                    self._serve(jobs)
            except Exception as exc:  # a failure outside any call (a bug): fatal, like the generation engine's
                self._fail(f"{type(exc).__name__}: {str(exc).strip()}", jobs)
            finally:
                self._running = 0
            if self.fatal is not None:
                return

    def _serve(self, jobs: list[Job]) -> None:
        try:
            results = self._call(jobs)
        except Exception as exc:
            message = f"{type(exc).__name__}: {str(exc).strip()}"
            log.warning("a %s call on %d requests failed: %s", self.kind, len(jobs), message)
            try:
                self._call([self.smoke_job])
            except Exception as exc2:  # the pipeline itself is broken
                self._fail(f"{type(exc2).__name__}: {str(exc2).strip()}", jobs)
                return
            if len(jobs) == 1:
                jobs[0].emit("error", message)
                return
            for job in jobs:  # one bad input must not fail its neighbours: each alone
                self._serve([job])
            return
        # one wake-up of the event loop for the whole call (a call_soon_threadsafe per job was the largest part
        # of the worker's time with many small requests); a result that is an exception is that job's error
        by_loop: dict[Any, list] = {}
        for job, result in zip(jobs, results, strict=True):
            kind = "error" if isinstance(result, BaseException) else "done"
            if job.loop is None or job.events is None or type(job).emit is not Job.emit:
                job.emit(kind, result)  # the smoke probe and jobs without a loop
            elif not job.finished:
                job.finished = True
                by_loop.setdefault(job.loop, []).append((job.events, (kind, result)))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:
                pass  # the loop is closed: nobody waits

    def _call(self, jobs: Sequence[Job]) -> list[Any]:
        size = self.slice_size
        if len(jobs) == 1 and len(jobs[0].texts) > size and self.merge is not None:
            job = jobs[0]  # a request larger than a slice: its texts in slices, one result
            parts = []
            for i in range(0, len(job.texts), size):
                part = Job(texts=job.texts[i : i + size], query=job.query, extra=job.extra)
                res = self._run([part])[0]
                if isinstance(res, BaseException):
                    return [res]
                parts.append(res)
                job.generated += len(part.texts)
            return [self.merge(parts)]
        return self._run(jobs)

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(sum(len(j.texts) for j in jobs))
        t = time.monotonic()
        try:
            return self.run(jobs)
        finally:
            self._last_call_s = time.monotonic() - t

    def _fail(self, message: str, current: list[Job]) -> None:
        log.error("%s pipeline failed: %s", self.kind, message)
        with self._cond:
            self.fatal = message
            victims = current + list(self._queue)
            self._queue.clear()
        # The server hears it before any job does: a client that sees the error and then probes finds the
        # server already failed, and a caller never sees a job's error before `on_fatal` ran.
        if self.on_fatal is not None:
            self.on_fatal(message)
        for job in victims:
            job.emit("error", f"pipeline failed: {message}")
