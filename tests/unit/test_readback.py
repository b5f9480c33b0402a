"""Readback: running pods over HTTP, exited ones from the termination message."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import pytest
from aiohttp import web
from ovserve_operator import podview, readback

from .podfixtures import CB_READY, LOADING, REFUSED, pod


@pytest.mark.parametrize(
    "http,terminated,want,source",
    [
        (CB_READY, None, CB_READY, "http"),
        (CB_READY, REFUSED, CB_READY, "http"),  # ready now wins over an old failure
        (LOADING, REFUSED, REFUSED, "terminationMessage"),  # crash-looping: keep showing the failure
        (None, REFUSED, REFUSED, "terminationMessage"),
        (LOADING, None, LOADING, "http"),
        (None, None, None, "none"),
    ],
)
def test_choose(http, terminated, want, source):
    assert readback.choose(http, terminated) == (want, source)


@pytest.mark.parametrize(
    "http,terminated,want,source",
    [
        (None, REFUSED, None, "none"),  # ready now: an old failure is not its report (unreadable for a moment)
        (LOADING, REFUSED, LOADING, "http"),
        (CB_READY, REFUSED, CB_READY, "http"),
    ],
)
def test_choose_when_the_container_is_ready_now(http, terminated, want, source):
    assert readback.choose(http, terminated, container_ready=True) == (want, source)


T0 = dt.datetime(2026, 12, 3, 7, 0, 0, tzinfo=dt.UTC)
GRACE = dt.timedelta(seconds=30)
OK = readback.Reading(CB_READY, "http")
FAIL = readback.Reading(None, "none", "GET /v1/status: TimeoutError: ")


# each row: a sequence of (seconds after T0, reading, pod Ready now) -> (source, has report, failing since s)
@pytest.mark.parametrize(
    "steps,want",
    [
        pytest.param([(0, OK, True)], [("http", True, None)], id="read"),
        pytest.param(
            [(0, OK, True), (5, FAIL, True), (20, FAIL, True), (36, FAIL, True), (40, OK, True), (41, FAIL, True)],
            [
                ("http", True, None),
                ("remembered", True, 5),  # one failed GET: the last good report stays
                ("remembered", True, 5),
                ("none", False, 5),  # beyond the grace: no report, the error and since when
                ("http", True, None),  # read again: forgiven
                ("remembered", True, 41),
            ],
            id="grace-then-expired-then-recovered",
        ),
        pytest.param(
            [(0, OK, True), (5, FAIL, False)], [("http", True, None), ("none", False, 5)], id="not-ready-no-grace"
        ),
        pytest.param([(0, FAIL, True), (1, FAIL, True)], [("none", False, 0), ("none", False, 0)], id="never-read"),
    ],
)
def test_with_grace(steps, want):
    memory = None
    got = []
    for at, reading, ready in steps:
        now = T0 + dt.timedelta(seconds=at)
        out, memory = readback.with_grace(reading, memory, ready_now=ready, now=now, grace=GRACE)
        since = None if out.failing_since is None else int((out.failing_since - T0).total_seconds())
        got.append((out.source, out.report is not None, since))
        if out.source == "remembered":
            assert out.error  # the error travels with the remembered report
    assert got == want


def test_readback_memory_keys_by_pod_uid_and_forgets():
    mem = readback.ReadbackMemory(30)
    p = pod("a")
    p["metadata"]["uid"] = "u1"
    mem.apply([p], {"a": OK}, T0)
    assert mem.apply([p], {"a": FAIL}, T0 + dt.timedelta(seconds=1))["a"].source == "remembered"
    mem.forget_except(set())
    assert mem.apply([p], {"a": FAIL}, T0 + dt.timedelta(seconds=2))["a"].source == "none"


def test_termination_report_from_last_state_and_state():
    p = pod("a", waiting=("CrashLoopBackOff", ""), last_terminated_message="log line\n" + REFUSED.to_line())
    assert podview.termination_report(p) == REFUSED
    p2 = pod("b", running=False)
    p2["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = REFUSED.to_line() + "\n"
    assert podview.termination_report(p2) == REFUSED
    assert podview.termination_report(pod("c")) is None
    assert podview.termination_report({"metadata": {"name": "d"}, "status": {}}) is None


@pytest.mark.parametrize(
    "p,running",
    [
        (pod("a"), True),
        (pod("a", waiting=("CrashLoopBackOff", "")), False),
        (pod("a", unschedulable="no"), False),
        (pod("a", deleting=True), False),
    ],
)
def test_is_running(p, running):
    assert podview.is_running(p) is running


@contextlib.asynccontextmanager
async def serve(handler, *paths: str):
    """A loopback aiohttp server answering GET on `paths` (default /v1/status) with `handler`; yields its port."""
    app = web.Application()
    for path in paths or ("/v1/status",):
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


def test_read_reports_over_http():
    async def scenario():
        async def status(_request):
            return web.Response(text=CB_READY.model_dump_json(), content_type="application/json")

        async with serve(status) as port:
            pods = [
                pod("up", ip="127.0.0.1"),
                pod("down", ip="127.0.0.2"),  # nothing listens: error, no report
                pod("crashed", waiting=("CrashLoopBackOff", ""), last_terminated_message=REFUSED.to_line()),
            ]
            return await readback.read_reports(pods, timeout=1.0, port=port)

    got = asyncio.run(scenario())
    assert got["up"].report == CB_READY and got["up"].source == "http"
    assert got["down"].report is None and "GET /v1/status" in got["down"].error
    assert got["crashed"].report == REFUSED and got["crashed"].source == "terminationMessage"


def test_status_url_ipv6():
    assert readback.status_url(pod("a", ip="fd00::1")) == "http://[fd00::1]:8000/v1/status"


def test_hostile_answers_are_readback_errors():
    """A tenant's image answers /v1/status: a redirect (to a second server that must never be asked), an
    endless body, a huge declared body, a slow trickle, a compressed body, garbage. Each is an error."""
    hit_target: list[str] = []

    async def scenario():
        async def target(request):
            hit_target.append(request.path)
            return web.Response(text=CB_READY.model_dump_json())

        async def endless(request):
            resp = web.StreamResponse()
            await resp.prepare(request)
            for _ in range(4096):  # 64 MiB unless the reader stops first
                await resp.write(b"x" * 16384)
            return resp

        async def trickle(request):
            resp = web.StreamResponse()
            await resp.prepare(request)
            for ch in CB_READY.model_dump_json().encode():
                await resp.write(bytes([ch]))
                await asyncio.sleep(0.05)
            return resp

        async def huge_declared(request):
            return web.Response(body=b"{}", headers={"Content-Length": str(1 << 30)})

        async def gzip(request):
            return web.Response(body=b"\x1f\x8b", headers={"Content-Encoding": "gzip"})

        stack = contextlib.AsyncExitStack()
        target_port = await stack.enter_async_context(serve(target, "/v1/status", "/elsewhere"))

        async def redirect(request):
            raise web.HTTPFound(f"http://127.0.0.1:{target_port}/elsewhere")

        async def garbage(request):
            return web.Response(text='{"state": "ready", "pipeline": 7}')

        handlers = {
            "redirect": redirect,
            "endless": endless,
            "trickle": trickle,
            "huge": huge_declared,
            "gzip": gzip,
            "garbage": garbage,
        }
        async with stack:
            ports = {name: await stack.enter_async_context(serve(h)) for name, h in handlers.items()}
            readings = {}
            for name, port in ports.items():
                got = await readback.read_reports([pod(name, ip="127.0.0.1")], timeout=1.0, port=port)
                readings[name] = got[name]
            return readings

    got = asyncio.run(scenario())
    assert hit_target == []
    expect = {
        "redirect": "HTTP 302 (redirects are not followed)",
        "endless": "body larger than 65536 bytes",
        "trickle": "no answer in time",
        "huge": "more than 65536",
        "gzip": "Content-Encoding 'gzip' refused",
        "garbage": "ValidationError",
    }
    for name, text in expect.items():
        assert got[name].report is None and text in got[name].error, (name, got[name])


def test_reads_are_bounded_in_concurrency():
    in_flight, peak = 0, 0

    async def scenario():
        async def status(_request):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1
            return web.Response(text=CB_READY.model_dump_json())

        async with serve(status) as port:
            pods = [pod(f"p{i}", ip="127.0.0.1") for i in range(20)]
            return await readback.read_reports(pods, timeout=5.0, port=port, concurrency=4)

    got = asyncio.run(scenario())
    assert all(r.report == CB_READY for r in got.values()) and len(got) == 20
    assert peak == 4
