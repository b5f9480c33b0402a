"""Graceful shutdown: the SIGTERM drain of the HTTP server (docs/runtime.md, "Shutdown and drain").

Behind a load balancer (a Kubernetes Service) a terminating pod is removed from the endpoints while it
still runs: the pod template's preStop sleep lets that removal spread before SIGTERM. What is left for the
runtime:

1. `begin()`: readiness answers 503 (state "draining"); every response prepared from now on carries
   `Connection: close` and its connection closes after it, so keep-alive clients reconnect elsewhere.
   A connection whose response was prepared before the drain (a stream) is NOT closed when that response
   ends: its client did not get the header and may already be sending the next request on it (closing
   then would lose that request); it is served, with `Connection: close`.
2. Requests keep being served, new ones included: endpoint removal lags, and a keep-alive client may
   send one more request on its connection; refusing it would turn that lag into a lost request.
3. The drain is over when no request is in flight and every connection that may still be reused (its
   last response came before the drain and told no `Connection: close`, or it has sent nothing yet) has
   been idle for `IDLE_GRACE_S` since the drain began or since its last response, or at the deadline
   (--drain-timeout-seconds). Connections answered during the drain do not count: they are closing. (A
   global "last activity" would never go quiet: the kubelet's probes arrive every few seconds.)
   At the deadline every generation still running is ended: a stream gets an error event and `[DONE]`,
   a non-streaming request a 503 `server_shutting_down`; a generation request arriving after it gets that
   503 at once.
4. The caller then closes the listener and the connections and stops the engine (which keeps stepping
   until then, so every in-flight generation can finish).

Nothing is kept per connection before the drain: a response that ended before it began counts as ending
when it began (the idle grace runs from the later of the two), so only responses that end during the
drain are recorded, and closed connections are forgotten at each check. (Keeping every connection's
handler from its first response on held ~2 KB per connection until SIGTERM: the kubelet's probes and the
operator's readback open ~70,000 a day.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("ovserve.drain")

IDLE_GRACE_S = 2.0  # an idle keep-alive connection this quiet is closed (its client reconnects elsewhere)
FINISH_S = 2.0  # after the deadline: time for the handlers to write their error event and close
POLL_S = 0.05
SHUTTING_DOWN = "server_shutting_down"


def shutting_down_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": SHUTTING_DOWN}}


class Drain:
    """Drain state of one server; `install()` it on the aiohttp application before it starts."""

    def __init__(self, timeout_s: float, abort: Callable[[Any, str], None] | None = None) -> None:
        self.timeout_s = timeout_s
        self.abort = abort  # abort(generation, message): end one in-flight generation at the deadline
        self.draining = False
        self.expired = False
        self.in_flight = 0  # handlers running, any endpoint
        self.late = 0  # generation requests (POST) that arrived during the drain
        self.answered = 0  # generation requests (POST) answered during the drain, wherever they began
        self._generations: dict[int, Any] = {}  # in flight, by id()
        self._started = 0.0
        # connection (aiohttp's RequestHandler) -> when its last response ended; during the drain only
        self._last_response: dict[Any, float] = {}
        self._closing: set[Any] = set()  # connections answered during the drain (Connection: close)
        self._hurry = asyncio.Event()

    # --- wiring ---------------------------------------------------------------------------------
    def install(self, app: web.Application) -> None:
        app.middlewares.insert(0, self._middleware)  # outermost: counts the whole request
        app.on_response_prepare.append(self._on_prepare)

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        if self.expired and request.method == "POST":
            message = "the server is shutting down: retry on another replica"
            return web.json_response(shutting_down_body(message), status=503, headers={"Retry-After": "1"})
        self.in_flight += 1
        if self.draining and request.method == "POST":
            self.late += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
            if self.draining:  # before the drain, the idle grace would start at its beginning anyway
                if request.method == "POST":
                    self.answered += 1
                self._last_response[request.protocol] = asyncio.get_running_loop().time()

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if self.draining:
            response.force_close()  # no keep-alive: aiohttp closes the connection after this response
            response.headers["Connection"] = "close"  # and the client knows (the hook runs after aiohttp's own)
            self._closing.add(request.protocol)

    def track(self, generation: Any) -> None:
        """A generation reached the engine; ended at the deadline if still running."""
        if self.expired and self.abort is not None:
            self.abort(generation, self._expired_message())
            return
        self._generations[id(generation)] = generation

    def untrack(self, generation: Any) -> None:
        self._generations.pop(id(generation), None)

    def connections_kept(self) -> int:
        """Connections this drain holds state for (0 outside a drain, whatever was served)."""
        return len(self._last_response.keys() | self._closing)

    def generating(self) -> int:
        return len(self._generations)

    def generations(self) -> list[Any]:
        """The generations in flight (the fatal path ends them all)."""
        return list(self._generations.values())

    # --- the drain ------------------------------------------------------------------------------
    def begin(self) -> None:
        if not self.draining:
            self.draining = True
            self._started = asyncio.get_running_loop().time()

    def _quiet(self, connections: list[Any], now: float) -> bool:
        """Nothing in flight, and no connection that a client may still reuse was active lately."""
        live = set(connections)
        self._closing &= live  # forget closed connections (also while a long request holds the drain)
        self._last_response = {c: t for c, t in self._last_response.items() if c in live}
        if self.in_flight:
            return False
        return all(
            c in self._closing or now - max(self._started, self._last_response.get(c, 0.0)) >= IDLE_GRACE_S
            for c in live
        )

    def _expired_message(self) -> str:
        return f"the server is shutting down: the drain timeout of {self.timeout_s:g}s ended this request"

    async def run(self, connections: Callable[[], list[Any]]) -> bool:
        """Drain; True when everything finished in time, False when the deadline (or a second signal)
        ended what was still running. `connections()`: the open client connections (aiohttp's
        `runner.server.connections`)."""
        loop = asyncio.get_running_loop()
        self.begin()
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal: stop waiting
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._hurry.set)
        start = loop.time()
        deadline = start + self.timeout_s
        log.info(
            "draining: %d generations in flight (%d requests, bound %gs)",
            len(self._generations),
            self.in_flight,
            self.timeout_s,
        )
        while True:
            now = loop.time()
            if self._quiet(connections(), now):
                log.info(
                    "drained in %.1fs (%d generation requests answered meanwhile, %d of them arrived meanwhile)",
                    now - start,
                    self.answered,
                    self.late,
                )
                return True
            if now >= deadline or self._hurry.is_set():
                break
            await asyncio.sleep(POLL_S)
        self.expired = True
        running = list(self._generations.values())
        log.warning(
            "drain %s after %.1fs: ending %d generations (%d requests in flight)",
            "interrupted" if self._hurry.is_set() else "timeout",
            loop.time() - start,
            len(running),
            self.in_flight,
        )
        if self.abort is not None:
            for generation in running:
                self.abort(generation, self._expired_message())
        end = loop.time() + FINISH_S
        while self.in_flight and loop.time() < end:
            await asyncio.sleep(POLL_S)
        return False
