"""The child-process transport: the ContinuousBatchingPipeline of a text model runs in an engine-core process.

ContinuousBatchingPipeline.step() holds the GIL (openvino-genai 2026.4), so an in-process core serializes every
HTTP-side operation with inference. Here the child owns the pipeline (the only copy of the weights) and runs the
same CBCore as the in-process transport, composed with a PipeSink (core.Outbox) instead of a LoopSink; its main
thread reads the pipe and hands adds and cancels to the core. The HTTP process keeps only the tokenizer: its
ProcessClient (client.EngineClient) numbers the requests and turns step messages into their events. Nothing of
either side overrides the other's internals: the pipe messages are the whole contract. One pipe between them:

  HTTP -> core   ("add", id, [prompt ids], is_tensor, {generation config fields}, preparing)
                 ("preparing", n)  ("cancel", id)  ("stop",)  preparing, n: requests the HTTP side is still parsing
  core -> HTTP   ("ready", {eos_token_id, stop_token_ids})  or  ("init_error", message)   once, at start
                 ("step", [(id, kind, value), ...], stats)    one per step; stats: (waiting, running, cache_usage,
                 cache_bytes, steps, proposed, accepted), the last three speculative decoding counts (cumulative)
                 ("fatal", message)                                                        then it exits

                 ("echo",)  answering the parent's ("echo",): the hand-over point below

The HTTP side reads the pipe on a thread while it loads (the smoke generation), then on its event loop
(add_reader): attach() sends an echo, and the thread stops at its answer, so every message is read once.
Its threads run SCHED_BATCH (cli.py): the engine's pipe write wakes the event loop, and under the default
policy that wake-up preempts the engine's step loop on a busy machine (a 50 us write took 330 us median at
16 streams on 2 cores, a third of a step).
The child dies with its parent (PR_SET_PDEATHSIG, and EOF on the pipe); when the child dies, the engine
turns fatal: readiness says 503, pending requests get an error, new ones are refused.

One request's fault stays its own on both sides: the HTTP side writes to the pipe from a thread (PipeWriter: the
child reads only between steps, and a full pipe must not block the event loop) and delivers each request's
events on their own (request.deliver_batch); the child applies each message on its own (ChildServer: a bad one
is logged and answers its request with an error) and forgets a request on its last event.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..report import PipelineType
from .client import EngineClient
from .core import CBCore, Core
from .pipelines import SchedulerOptions
from .request import EngineError, GenRequest, deliver_batch
from .wire import config_from_dict, config_to_dict, decode, encode, recv, send

log = logging.getLogger("ovserve.engine_core")

# burst gathering when the engine wakes from idle: stop when no request came for a gap, at most BURST_MAX_S. The
# gap is BURST_GAP_S, or the last busy period's step time when shorter (not under BURST_GAP_MIN_S): a request that
# misses the burst's prefill joins the next step, so waiting longer than a step for it costs more than it saves
BURST_GAP_S = 0.002
BURST_GAP_MIN_S = 0.0002
BURST_MAX_S = 0.25

# the child's event that tells the HTTP process when a request entered the pipeline (never reaches a handler)
STARTED = "started"
# step messages the event loop takes from the pipe in one go
READ_BATCH = 64

# --- the child ---------------------------------------------------------------------------------


class PipeSink:
    """The engine-core process's Outbox (core.Outbox): a step's events as one message on the pipe, keyed by the
    ids the HTTP process gave its requests, with the core's counters."""

    def __init__(self, conn, finished: Callable[[int], None] | None = None) -> None:
        self.conn = conn
        self.out: list[tuple[int, str, Any]] = []
        self.announced = 0  # from the latest "add" or "preparing": requests the HTTP side is still parsing
        self.lock = threading.Lock()
        # told a request's id on its last event (the child forgets it, and its prompt tensor, at once)
        self.finished = finished

    def emit(self, req: GenRequest, kind: str, value: Any) -> None:
        if kind == "tokens" and req.first_token_at is None and req.started_at is not None:
            # when the request entered the pipeline (CLOCK_MONOTONIC is the machine's: the HTTP process
            # compares it with its own times for the queue-wait metric), once, before its first tokens
            self.out.append((req.id, STARTED, req.started_at))
        req.record(kind, value)
        self.out.append((req.id, kind, value))
        if kind != "tokens" and self.finished is not None:
            self.finished(req.id)

    @staticmethod
    def stats(c: Core) -> tuple:
        return (c.waiting, c.running, c.cache_usage(), c.cache_bytes(), *c.spec_counts)

    def flush(self, core: Core) -> None:
        out, self.out = self.out, []
        if out:
            # the pipe write releases the GIL: the receiver thread takes in new requests there
            self.send(("step", out, self.stats(core)))
        else:
            time.sleep(0)  # let the receiver thread take in new requests

    def gather(self, core: Core) -> None:
        """Idle -> busy: the requests of a burst arrive a little apart (the HTTP process parses and tokenizes
        them one by one); wait while they keep coming, so that one prefill step takes them all instead of
        the late ones waiting for a whole step of the early ones."""
        self.flush(core)
        step_s = core.step_s
        deadline = time.monotonic() + BURST_MAX_S
        seen = core.queued()
        gap = BURST_GAP_S if step_s is None else min(BURST_GAP_S, max(BURST_GAP_MIN_S, step_s))
        while time.monotonic() < deadline:
            time.sleep(gap)
            now = core.queued()
            # over when nothing came for a gap and the HTTP side said it was preparing no more
            if now == seen and self.announced <= 0:
                return
            seen = now

    def send(self, msg) -> None:
        with self.lock:
            send(self.conn, msg)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: EOF on the pipe still ends the child


def core_main(
    conn, path: str, device: str, sched: dict, props: dict, kind: str, parent: int, log_level: int, spec: dict | None
) -> None:
    _die_with_parent()
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s[core]: %(message)s")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)
    # The parent decides when to stop: it drains in-flight requests on SIGTERM, and a signal sent to the whole
    # process group (Ctrl-C, systemd's control-group kill) must not end generation under it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from .pipelines import construct_cb

    try:
        opts = SchedulerOptions(**sched)
        from ..speculative import SpeculativeConfig

        sc = SpeculativeConfig(**spec) if spec else None
        pipe = construct_cb(path, device, opts, props, sc)
        sink = PipeSink(conn)
        core = CBCore(pipe, PipelineType(kind), sink, max_active=opts.effective_max_num_seqs())
        server = ChildServer(core, sink)
        if sc is not None:
            core.set_speculation(sc.generation_fields(), sc.counted)
    except Exception as exc:
        send(conn, ("init_error", str(exc).strip()))
        return
    base = core.base_config()
    send(conn, ("ready", {"eos_token_id": base.eos_token_id, "stop_token_ids": set(base.stop_token_ids)}))
    core.on_fatal = lambda msg: sink.send(("fatal", msg))
    core.start()
    try:
        while server.handle_bytes(conn.recv_bytes()):
            pass
    except (EOFError, OSError):
        pass  # the parent is gone
    core.stop()
    os._exit(0)


class ChildServer:
    """The engine-core child's side of the pipe: each message applied to the core on its own. A message that
    cannot be applied (malformed, a config the pipeline refuses) is logged and, when it names a request,
    answers that request with an error; the child and every other request go on. A request is forgotten on
    its last event (PipeSink.finished), so nothing of it (its prompt tensor) outlives it here."""

    def __init__(self, core: Core, sink: PipeSink) -> None:
        self.core, self.sink = core, sink
        self.reqs: dict[int, GenRequest] = {}  # the requests not yet finished, by the HTTP side's id
        sink.finished = self._forget

    def _forget(self, rid: int) -> None:
        self.reqs.pop(rid, None)  # one dict operation: atomic between the core's thread and this one

    def handle_bytes(self, data: bytes) -> bool:
        """One message as it came off the pipe (framed whole: one that cannot be unpickled is skipped alone)."""
        try:
            msg = decode(data)
        except Exception:
            log.exception("engine process: an unreadable message of %d bytes", len(data))
            return True
        return self.handle(msg)

    def handle(self, msg: Any) -> bool:
        """Apply one message; False once it says stop."""
        try:
            return self._apply(msg)
        except Exception as exc:
            kind = msg[0] if isinstance(msg, tuple) and msg else type(msg).__name__
            log.exception("engine process: a %r message could not be applied", kind)
            rid = msg[1] if isinstance(msg, tuple) and len(msg) > 1 and kind == "add" else None
            if isinstance(rid, int) and not isinstance(rid, bool):
                self._forget(rid)
                error = f"the engine could not take the request: {type(exc).__name__}: {exc}".strip()
                with contextlib.suppress(Exception):  # the core's figures unreadable: the parent keeps its last
                    self.sink.send(("step", [(rid, "error", error)], PipeSink.stats(self.core)))
            return True

    def _apply(self, msg: Any) -> bool:
        kind = msg[0]
        if kind == "add":
            import numpy as np
            import openvino as ov

            _, rid, ids, tensor, cfg, announced = msg
            req = GenRequest(
                config=config_from_dict(cfg),
                max_new_tokens=cfg["max_new_tokens"],
                input_ids=ov.Tensor(np.asarray([ids], dtype=np.int64)) if tensor else ids,
                id=rid,
                logprobs=cfg.get("logprobs", 0) > 0,
            )
            self.sink.announced = announced
            self.reqs[rid] = req
            try:
                self.core.submit(req)
            except EngineError:  # the core failed: the parent has heard "fatal" and answers
                self._forget(rid)
        elif kind == "preparing":
            self.sink.announced = msg[1]
        elif kind == "cancel":
            req = self.reqs.pop(msg[1], None)
            if req is not None:
                self.core.cancel(req)
        elif kind == "echo":  # the parent's reader hands over to its event loop after this
            self.sink.send(("echo",))
        elif kind == "stop":
            return False
        else:
            raise ValueError(f"unknown message {kind!r}")
        return True


class PipeWriter:
    """The HTTP side's writes to the engine process, off the caller's thread: the child reads its pipe only
    between steps, so a write that fills the pipe would block the event loop for a step or more (a burst of
    long prompts: many). Messages are pickled by the caller (in order, whatever thread sends) and written in
    that order by one thread."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.error: str | None = None  # set once a write failed: the process is gone
        self._thread = threading.Thread(target=self._run, name="engine-core-writer", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        if self.error is not None:
            raise EngineError(f"the engine process is gone: {self.error}")
        self._queue.put(data)

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            try:
                self._conn.send_bytes(data)
            except (OSError, ValueError) as exc:  # the reader sees the same end and turns the engine fatal
                self.error = str(exc) or type(exc).__name__
                return

    def close(self, timeout: float) -> None:
        """Write what is queued (within `timeout`), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)


# --- the HTTP side -----------------------------------------------------------------------------


class ProcessClient(EngineClient):
    """The HTTP process's client of an engine-core child: numbers requests, sends them as "add" messages, and
    turns each step message into the events of its requests, on the event loop once attached."""

    continuous_batching = True
    in_process = False

    def __init__(
        self, path: str, device: str, sched: SchedulerOptions, props: dict[str, Any], kind: PipelineType, spec=None
    ):
        import openvino_genai as g

        # no pipeline here (it runs in the engine-core process): only its tokenizer. One thread: a tokenizer call
        # is a tiny infer request, and with the plugin's default (all cores) its threads wait for the cores the
        # engine process is using: 40-130 ms per encode() instead of 0.4 ms under load on 2 cores
        super().__init__(kind, g.Tokenizer(path, INFERENCE_NUM_THREADS=1), sched.effective_max_num_seqs())
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, once attached
        self._fatal: str | None = None
        self._lock = threading.Lock()
        self._ids = iter(range(1, 1 << 62))
        self._reqs: dict[int, GenRequest] = {}
        self._stats: tuple = (0, 0, None, None, 0, 0, 0)
        self._stopping = False
        self._on_loop = False  # the event loop reads the pipe (after attach)
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=core_main,
            args=(
                child,
                path,
                device,
                asdict(sched),
                props,
                str(kind),
                os.getpid(),
                logging.getLogger().level,
                asdict(spec) if spec is not None else None,
            ),
            name="ovserve-engine-core",
            daemon=True,
        )
        self.proc.start()
        child.close()
        try:
            msg = recv(self._conn)
        except EOFError:
            self.proc.join(5)
            raise RuntimeError(f"the engine process exited with code {self.proc.exitcode} while loading") from None
        if msg[0] == "init_error":
            self.proc.join(5)
            raise RuntimeError(msg[1])
        self._base = msg[1]
        self._reader = threading.Thread(target=self._read, name="engine-core-reader", daemon=True)
        self._writer = PipeWriter(self._conn)

    # --- what the HTTP side reads: the figures of the core's last step message ---
    def base_config(self):
        return _Base(self._base)

    @property
    def fatal(self) -> str | None:
        return self._fatal

    @property
    def step_s(self) -> float | None:
        return None  # not sent: the watchdog uses its configured bound

    @property
    def waiting(self) -> int:
        return self._stats[0]

    @property
    def running(self) -> int:
        return self._stats[1]

    def cache_usage(self) -> float | None:
        return self._stats[2]

    def cache_bytes(self) -> int | None:
        return self._stats[3]

    def speculation_counts(self) -> tuple[int, int, int]:
        return self._stats[4], self._stats[5], self._stats[6]

    def start(self) -> None:
        self._reader.start()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve this event loop: from now on the loop reads the pipe itself (add_reader), so a step's events
        reach the handlers without a thread hop, its GIL hand-off and the loop's self-pipe wake-up. The reader
        thread hands over at an echo from the engine process: every message before it is the thread's."""
        self.loop = loop
        with contextlib.suppress(EngineError):  # the process is gone: the reader thread reports it
            self._send(("echo",))

    def stop(self) -> None:
        self._stopping = True
        if self._on_loop:
            self._on_loop = False
            with contextlib.suppress(Exception):  # the loop may be closed already
                self.loop.remove_reader(self._conn.fileno())
        try:
            self._send(("stop",))
        except (OSError, EngineError):
            pass
        self._writer.close(10)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        if self._reader.is_alive():
            self._reader.join(5)

    def submit(self, req: GenRequest) -> None:
        # under the lock: either refused here or answered by the reader's fatal path, never lost between
        with self._lock:
            if self.fatal is not None:
                raise EngineError(f"pipeline failed: {self.fatal}")
            req.id = next(self._ids)
            self._reqs[req.id] = req
        # a token tensor crosses as a list of ids; anything else as is, for the pipeline to judge
        tensor = hasattr(req.input_ids, "data")
        ids = req.input_ids.data[0].tolist() if tensor else req.input_ids
        try:
            self._send(("add", req.id, ids, tensor, config_to_dict(req.config), req.preparing))
        except EngineError:
            with self._lock:
                self._reqs.pop(req.id, None)
            raise

    def preparing(self, count: int) -> None:
        # only while the engine is idle or gathering a burst (its last step message said nothing runs): a busy
        # engine does not gather, and the requests' own "add" messages carry the count then
        if self._stats[1] == 0:
            try:
                self._send(("preparing", count))
            except EngineError:
                pass

    def cancel(self, req: GenRequest) -> None:
        if not req.finished and not req.cancelled:
            req.cancelled = True
            try:
                self._send(("cancel", req.id))
            except EngineError:
                pass

    def _send(self, msg) -> None:
        """Queue a message for the engine process (PipeWriter): never a blocking pipe write on the loop."""
        self._writer.put(encode(msg))

    # --- reading the pipe: a thread until attach(), then the event loop ---
    def _read(self) -> None:
        reason = "the engine process exited"
        try:
            while True:
                msg = recv(self._conn)
                if msg[0] == "step":
                    events = msg[1]
                    # the engine ran ahead of this process: take every step already sent in one callback
                    while msg[0] == "step" and self._conn.poll():
                        msg = recv(self._conn)
                        if msg[0] == "step":
                            events = events + msg[1]
                    self._stats = msg[2] if msg[0] == "step" else self._stats
                    self._dispatch_safely(events)
                if msg[0] == "echo":
                    with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                        self.loop.call_soon_threadsafe(self._take_over)
                    return
                if msg[0] == "fatal":
                    reason = msg[1]
                    break
        except (EOFError, OSError):
            pass
        except Exception as exc:  # an unreadable message: its events are lost, so every request is answered
            reason = f"an unreadable message from the engine process ({type(exc).__name__}: {exc})"
        self._died(reason)

    def _take_over(self) -> None:
        if self._stopping:
            return
        self._on_loop = True
        # Connection.poll() builds a selector per call (a sixth of the HTTP process's time at 16 streams)
        self._poller = select.poll()
        self._poller.register(self._conn.fileno(), select.POLLIN)
        self.loop.add_reader(self._conn.fileno(), self._readable)

    def _readable(self) -> None:
        """On the loop: the messages the pipe holds now (each is written whole, so a read never waits long), at
        most READ_BATCH of them before the loop runs its other callbacks."""
        events: list = []
        reason = None
        try:
            for i in range(READ_BATCH):
                if i and not self._poller.poll(0):  # the first: the loop saw the pipe readable
                    break
                msg = recv(self._conn)
                if msg[0] == "step":
                    events.extend(msg[1])
                    self._stats = msg[2]
                elif msg[0] == "fatal":
                    reason = msg[1]
                    break
        except (EOFError, OSError):
            reason = "the engine process exited"
        except Exception as exc:  # an unreadable message: its events are lost, so every request is answered
            reason = f"an unreadable message from the engine process ({type(exc).__name__}: {exc})"
        if events:
            self._dispatch_safely(events)
        if reason is not None:
            self._on_loop = False
            self.loop.remove_reader(self._conn.fileno())
            if not self._stopping:
                self._died(reason)

    def _died(self, reason: str) -> None:
        if self._stopping:
            return
        self.proc.join(2)
        if msg_code := self.proc.exitcode:
            reason = f"{reason} (exit code {msg_code})"
        log.error("engine process failed: %s", reason)
        with self._lock:
            self._fatal = reason
            pending, self._reqs = list(self._reqs.values()), {}
        self._stats = (0, 0, None, None, *self._stats[4:])
        for req in pending:
            try:
                req.emit("error", f"pipeline failed: {reason}")
            except Exception:  # one request's callback: the others still hear of the failure
                log.exception("request %s: the pipeline's failure could not be delivered", req.id)
        if self.on_fatal is not None:
            self.on_fatal(reason)

    def _dispatch_safely(self, events: list) -> None:
        """_dispatch, whose failure (a bug: each request's delivery is isolated) is logged: the reader goes on
        and a fatal read with these events is still handled."""
        try:
            self._dispatch(events)
        except Exception:
            log.exception("delivering a step's events failed")

    def _dispatch(self, events: list) -> None:
        batch, loop = [], self.loop
        with self._lock:
            for rid, kind, value in events:
                req = self._reqs.get(rid)
                if req is None:
                    continue
                if kind == STARTED:
                    req.started_at = value
                    continue
                if kind != "tokens":
                    del self._reqs[rid]
                else:
                    req.generated += len(value)
                batch.append((req, kind, value))
        rest = []
        for req, kind, value in batch:
            if loop is not None and req.loop is loop and req.events is not None:
                req.record(kind, value)
                rest.append((req, kind, value))
            else:  # the smoke probe, or a request from another loop
                try:
                    req.emit(kind, value)
                except Exception:
                    log.exception("request %s: an event could not be delivered", req.id)
        if not rest:
            return
        if self._on_loop:  # on the loop already: each request's delivery on its own
            deliver_batch(loop, rest, None)
            return
        try:
            loop.call_soon_threadsafe(deliver_batch, loop, rest, None)
        except RuntimeError:
            pass


class _Base:
    """What EngineClient.new_config reads from the pipeline's generation config."""

    def __init__(self, d: dict) -> None:
        self.eos_token_id = d["eos_token_id"]
        self.stop_token_ids = d["stop_token_ids"]
