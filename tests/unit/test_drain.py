"""The drain logic (runtime/ovserve_runtime/drain.py) on a real aiohttp server with stand-in handlers:
headers, the quiet condition, the deadline ending tracked generations, refusals after it.
(The whole runtime under SIGTERM: tests/runtime/test_drain.py.)"""

from __future__ import annotations

import asyncio
import gc
import json

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from ovserve_runtime.drain import IDLE_GRACE_S, Drain, shutting_down_body
from ovserve_runtime.http import App, ServerConfig
from ovserve_runtime.report import PipelineReport, PipelineType, Reason, RuntimeReport, State


class Generation:
    """A stand-in for an in-flight generation: the handler waits until it ends or is aborted."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()
        self.aborted: str | None = None


async def serve(drain: Drain) -> tuple[web.AppRunner, str, dict]:
    state: dict = {"release": asyncio.Event(), "gens": []}
    app = web.Application()
    drain.install(app)

    async def slow(_req: web.Request) -> web.Response:
        await state["release"].wait()
        return web.json_response({"ok": True})

    async def fast(_req: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def gen(_req: web.Request) -> web.Response:
        g = Generation()
        state["gens"].append(g)
        drain.track(g)
        try:
            await g.ended.wait()
        finally:
            drain.untrack(g)
        if g.aborted:
            return web.json_response(shutting_down_body(g.aborted), status=503)
        return web.json_response({"ok": True})

    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    app.router.add_post("/gen", gen)
    app.router.add_post("/slow", slow)
    app.router.add_post("/fast", fast)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}", state


def connections(runner: web.AppRunner):
    return lambda: runner.server.connections if runner.server else []


def live_handlers() -> int:
    """aiohttp's per-connection objects still alive (a closed connection's should be garbage)."""
    gc.collect()
    return sum(isinstance(o, RequestHandler) for o in gc.get_objects())


async def one_connection(url: str, method: str, path: str) -> bytes:
    """A connection of its own: one request, the answer read, closed by the client (a kubelet probe)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()
    return head


def test_closed_connections_leave_nothing_behind():
    """Regression: the drain kept every connection's RequestHandler from its first response until SIGTERM
    (~2 KB each; a pod's probes and readback open ~70,000 connections a day). Outside a drain nothing is
    kept per connection; during it, a closed connection is forgotten. (RSS per connection over 20,000
    connections on a real runtime: benchmarks/soak_bench.py --short-connections.)"""

    async def main():
        drain = Drain(timeout_s=30)
        runner, url, state = await serve(drain)
        baseline = live_handlers()
        for i in range(300):
            head = await one_connection(url, ("GET", "POST")[i % 2], "/fast")
            assert head.startswith(b"HTTP/1.1 200")
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        while runner.server.connections and loop.time() < end:  # the server sees the closes
            await asyncio.sleep(0.01)
        assert not runner.server.connections
        assert drain.connections_kept() == 0
        assert live_handlers() <= baseline  # not held anywhere else either

        # during the drain (held by a slow request): a connection answered with Connection: close is
        # forgotten once it is closed
        async with aiohttp.ClientSession() as s:
            slow = asyncio.ensure_future(s.get(url + "/slow"))
            await asyncio.sleep(0.2)
            run = asyncio.ensure_future(drain.run(connections(runner)))
            for _ in range(20):
                assert b"Connection: close" in await one_connection(url, "GET", "/fast")
            await asyncio.sleep(0.3)  # a few of the drain's checks
            assert not run.done() and drain.connections_kept() == 0
            state["release"].set()
            assert (await slow).status == 200
            assert await asyncio.wait_for(run, 10) is True
        await runner.cleanup()
        assert live_handlers() <= baseline

    asyncio.run(main())


def test_the_runtime_app_keeps_nothing_per_closed_connection():
    """The whole HTTP app (no model: its probes, status, metrics, and refused generation requests) behind
    the same short connections: no connection's handler outlives it, whatever middleware or route is added."""

    async def main():
        report = RuntimeReport(
            state=State.LOADING,
            model="m",
            device="CPU",
            pipeline=PipelineReport(requested=PipelineType.AUTO, reason=Reason.LOADING),
        )
        app = App(ServerConfig(served_name="m"), report)
        runner = web.AppRunner(app.web, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        baseline = live_handlers()
        requests = [
            ("GET", "/v2/health/ready"),
            ("GET", "/v2/health/live"),
            ("GET", "/v1/status"),
            ("GET", "/metrics"),
            ("POST", "/v3/chat/completions"),
        ]
        for i in range(300):
            assert (await one_connection(url, *requests[i % len(requests)])).startswith(b"HTTP/1.1 ")
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        while runner.server.connections and loop.time() < end:
            await asyncio.sleep(0.01)
        assert not runner.server.connections and app.drain.connections_kept() == 0
        assert live_handlers() <= baseline
        await runner.cleanup()

    asyncio.run(main())


def test_generation_requests_answered_during_the_drain_are_counted_wherever_they_began():
    """Regression: the count the drain logs ("N generation requests answered meanwhile") once left out a POST
    that was in flight at SIGTERM but not yet a generation (its body still being prepared)."""

    async def main():
        drain = Drain(timeout_s=30)
        runner, url, state = await serve(drain)
        async with aiohttp.ClientSession() as s:
            before = await s.post(url + "/fast")  # before the drain: not counted
            await before.read()
            preparing = asyncio.ensure_future(s.post(url + "/slow"))
            await asyncio.sleep(0.2)
            assert drain.in_flight == 1 and drain.generating() == 0
            run = asyncio.ensure_future(drain.run(connections(runner)))
            await asyncio.sleep(0.1)
            assert (await s.get(url + "/fast")).status == 200  # a probe: not a generation request
            assert (await s.post(url + "/fast")).status == 200  # arrives during the drain
            state["release"].set()
            assert (await preparing).status == 200
            assert await asyncio.wait_for(run, 10) is True
            assert (drain.answered, drain.late) == (2, 1)
        await runner.cleanup()

    asyncio.run(main())


def test_in_flight_requests_finish_and_new_ones_get_connection_close():
    async def main():
        drain = Drain(timeout_s=30)
        runner, url, state = await serve(drain)
        async with aiohttp.ClientSession() as s, aiohttp.ClientSession() as pooled:
            before = await pooled.get(url + "/fast")
            assert before.headers.get("Connection") != "close"  # keep-alive outside a drain
            await before.read()  # back in its pool: an idle keep-alive connection
            slow = asyncio.ensure_future(s.get(url + "/slow"))
            await asyncio.sleep(0.2)
            assert drain.in_flight == 1
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            run = asyncio.ensure_future(drain.run(connections(runner)))
            await asyncio.sleep(0.3)
            assert not run.done()  # the slow request holds the drain
            during = await s.get(url + "/fast")  # a request arriving during the drain is served
            assert during.status == 200 and during.headers.get("Connection") == "close"
            state["release"].set()
            assert (await slow).status == 200
            assert (await slow).headers.get("Connection") == "close"  # answered during the drain
            # nothing in flight, but a pooled connection answered before the drain is open (its client was not
            # told to close it): the drain gives it the idle grace (a client reusing it now is served), then ends
            assert await asyncio.wait_for(run, 10) is True
            assert IDLE_GRACE_S <= loop.time() - t0 < IDLE_GRACE_S + 2
            assert not drain.expired and not state["gens"]
        await runner.cleanup()

    asyncio.run(main())


def test_probes_during_the_drain_do_not_hold_it():
    """Regression: the kubelet's probes (a new connection every 2 s, answered with Connection: close) once
    kept a global idle timer from ever expiring; the drain then waited for its full bound."""

    async def main():
        drain = Drain(timeout_s=30)
        runner, url, _state = await serve(drain)
        stop = asyncio.Event()

        async def probe():
            while not stop.is_set():
                async with aiohttp.ClientSession() as s, s.get(url + "/fast") as r:
                    assert r.headers.get("Connection") == "close"
                await asyncio.sleep(0.3)

        async with aiohttp.ClientSession() as pooled:
            await (await pooled.get(url + "/fast")).read()  # an idle keep-alive connection from before
            prober = asyncio.ensure_future(probe())
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await asyncio.wait_for(drain.run(connections(runner)), 10) is True
            assert loop.time() - t0 < IDLE_GRACE_S + 1.5
            stop.set()
            await prober
        await runner.cleanup()

    asyncio.run(main())


def test_no_connection_ends_the_drain_at_once():
    async def main():
        drain = Drain(timeout_s=30)
        runner, _url, _state = await serve(drain)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await drain.run(connections(runner)) is True
        assert loop.time() - t0 < 0.5
        await runner.cleanup()

    asyncio.run(main())


def test_the_deadline_aborts_tracked_generations_and_refuses_new_ones():
    def abort(g: Generation, message: str) -> None:
        g.aborted = message
        g.ended.set()

    async def main():
        drain = Drain(timeout_s=0.5, abort=abort)
        runner, url, state = await serve(drain)
        async with aiohttp.ClientSession() as s:
            posts = [asyncio.ensure_future(s.post(url + "/gen")) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert len(state["gens"]) == 3
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await drain.run(connections(runner)) is False
            assert 0.5 <= loop.time() - t0 < 3
            for p in posts:
                r = await p
                body = await r.json()
                assert r.status == 503 and body["error"]["code"] == "server_shutting_down"
                assert "drain timeout of 0.5s" in body["error"]["message"]
                assert r.headers.get("Connection") == "close"
            assert all(g.aborted for g in state["gens"])
            # after the deadline: a generation request is refused at once, in the OpenAI error format
            late = await s.post(url + "/gen")
            assert late.status == 503 and late.headers["Retry-After"] == "1"
            assert json.loads(await late.text())["error"]["type"] == "server_error"
            assert len(state["gens"]) == 3  # it never reached the handler
            assert (await s.get(url + "/fast")).status == 200  # probes and metrics still answer
        await runner.cleanup()

    asyncio.run(main())
