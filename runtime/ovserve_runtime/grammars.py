"""Output grammars built off the event loop, in a worker process with a deadline, cached by content hash.

A request's json_schema or forced tool call becomes a regex (openai/grammar.py). What that costs is the
client's to choose: outlines-core is Rust and holds the GIL, a schema can expand to gigabytes. So the build runs
in a child process (spawned once, reused) that has an address-space limit (--grammar-memory-bytes); the server
waits for it on a thread, never on the loop, for at most --grammar-timeout-seconds. A build over the deadline
kills the worker (the next build starts a new one) and answers 400 naming the field, as does one that ran out
of memory. One build runs at a time: a client sending new expensive schemas delays other new schemas by at
most the deadline each, never a generation or a request whose grammar is cached.

The cache holds the regex of a job (or its refusal: a hostile schema sent again costs nothing), keyed by the
sha256 of the job's content, bounded in entries and bytes (--grammar-cache-entries, --grammar-cache-bytes),
least recently used dropped first. Identical jobs in flight share one build.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import resource
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .openai import forced
from .openai.grammar import (
    GrammarError,
    GrammarJob,
    Limits,
    check_dialect,
    check_regex,
    regex_literal,
    schema_regex,
)
from .openai.tools import Function

log = logging.getLogger("ovserve.grammars")


@dataclass(frozen=True)
class _Refused:
    message: str


def build_job(job: GrammarJob, limits: Limits) -> dict[str, str]:
    """What the worker runs: the StructuredOutputConfig keyword arguments of a job (GrammarError for what cannot
    or may not be built). Pure; tests call it directly."""
    if job.kind == "schema":
        regex = schema_regex(job.schema_ or {"type": "object"}, limits)
    else:
        functions = [Function(name=n, parameters=p) for n, p in job.functions]
        try:
            calls = forced.forced_calls(job.parser or "", functions, parallel=job.parallel, limits=limits)
        except GrammarError:
            raise
        except ValueError as exc:
            raise GrammarError(f"cannot force a call to these tools: {exc}") from None
        regex = regex_literal(job.prefix) + "(" + calls.regex + ")" if job.prefix else calls.regex
    check_regex(regex, limits)
    check_dialect(regex)
    return {"regex": regex}


def _worker_main(conn: Any, limits: Limits, memory_bytes: int) -> None:
    """The worker process: build jobs one after another until the pipe closes."""
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ValueError, OSError):  # a lower hard limit already: keep it
        pass
    while True:
        try:
            raw = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", build_job(GrammarJob.model_validate(raw), limits)))
        except GrammarError as exc:
            conn.send(("refused", str(exc)))
        except MemoryError:
            conn.send(("refused", f"building the grammar needs more than {memory_bytes} bytes of memory"))
        except RecursionError:
            conn.send(("refused", "the schema nests too deeply to build a grammar from"))
        except Exception as exc:  # outlines-core's own errors and panics: the schema's fault, not the server's
            conn.send(("refused", f"the grammar could not be built: {type(exc).__name__}: {str(exc)[:300]}"))


class _Worker:
    """One worker process and its pipe; `build` runs on the service's single thread."""

    def __init__(self, limits: Limits, memory_bytes: int) -> None:
        self.limits, self.memory_bytes = limits, memory_bytes
        self.proc: Any = None
        self.conn: Any = None
        self.restarts = 0

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # no copy of the server's threads or engine state
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, self.limits, self.memory_bytes), name="ovserve-grammar", daemon=True
        )
        self.proc.start()
        child.close()
        self.conn = parent

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5)
            self.conn.close()
        self.proc = self.conn = None

    def build(self, job: GrammarJob, timeout_s: float) -> tuple[str, Any]:
        if self.proc is None or not self.proc.is_alive():
            if self.proc is not None:
                self.restarts += 1
                self.stop()
            self._start()
        try:
            self.conn.send(job.model_dump(by_alias=True))
            if self.conn.poll(timeout_s):
                return self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.stop()
            return "refused", (
                f"building the grammar crashed its worker (more than {self.memory_bytes} bytes of memory, or a "
                "schema the grammar library cannot handle)"
            )
        self.stop()
        return "timeout", f"building the grammar took longer than {timeout_s:g} s"


class GrammarService:
    """Builds GrammarJobs for the server: `await build(job)` gives the StructuredOutputConfig keyword arguments
    or raises GrammarError. Counts outcomes in `counts` (hit, built, refused, timeout) for the metrics."""

    def __init__(
        self,
        limits: Limits,
        timeout_s: float,
        memory_bytes: int,
        cache_entries: int,
        cache_bytes: int,
        on_outcome: Any = None,
    ) -> None:
        self.limits, self.timeout_s = limits, timeout_s
        self.cache_entries, self.cache_bytes = cache_entries, cache_bytes
        self._cache: OrderedDict[str, tuple[dict[str, str] | _Refused, int]] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[str, asyncio.Future] = {}
        self._worker = _Worker(limits, memory_bytes)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._lock = threading.Lock()  # the worker is used from the one thread, and stopped from close()
        self._on_outcome = on_outcome or (lambda outcome, seconds: None)

    @property
    def restarts(self) -> int:
        return self._worker.restarts

    def warm(self) -> None:
        """Start the worker now (off the loop), so the first schema does not wait for the spawn."""
        self._thread.submit(self._warm)

    def _warm(self) -> None:
        with self._lock:
            if self._worker.proc is None:
                self._worker._start()

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._worker.stop()

    async def build(self, job: GrammarJob) -> dict[str, str]:
        key = job.key()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self._on_outcome("hit", 0.0)
            return _unwrap(hit[0])
        shared = self._inflight.get(key)
        if shared is None:
            shared = asyncio.ensure_future(self._build(key, job))
            self._inflight[key] = shared
            shared.add_done_callback(lambda _f: self._inflight.pop(key, None))
        # shield: one client leaving does not cancel a build another client waits for (nor leave it half-done)
        return _unwrap(await asyncio.shield(shared))

    async def _build(self, key: str, job: GrammarJob) -> dict[str, str] | _Refused:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        kind, value = await loop.run_in_executor(self._thread, self._run, job)
        seconds = time.monotonic() - t0
        self._on_outcome("built" if kind == "ok" else kind, seconds)
        if kind == "ok":
            result: dict[str, str] | _Refused = value
        else:
            log.info("grammar for %s refused after %.2f s: %s", job.param, seconds, value)
            result = _Refused(value)
        if kind != "timeout":  # a timeout may be the machine's load, not the schema: not remembered
            self._remember(key, result)
        return result

    def _run(self, job: GrammarJob) -> tuple[str, Any]:
        with self._lock:
            return self._worker.build(job, self.timeout_s)

    def _remember(self, key: str, result: dict[str, str] | _Refused) -> None:
        size = len(result.message) if isinstance(result, _Refused) else sum(len(v) for v in result.values())
        if self.cache_entries <= 0 or size > self.cache_bytes:
            return
        self._cache[key] = (result, size)
        self._bytes += size
        while len(self._cache) > self.cache_entries or self._bytes > self.cache_bytes:
            _k, (_r, dropped) = self._cache.popitem(last=False)
            self._bytes -= dropped


def _unwrap(result: dict[str, str] | _Refused) -> dict[str, str]:
    if isinstance(result, _Refused):
        raise GrammarError(result.message)
    return result
