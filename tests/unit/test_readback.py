"""Readback: running pods over HTTP, exited ones from the termination message."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from ovserve_operator import readback

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


def test_termination_report_from_last_state_and_state():
    p = pod("a", waiting=("CrashLoopBackOff", ""), last_terminated_message="log line\n" + REFUSED.to_line())
    assert readback.termination_report(p) == REFUSED
    p2 = pod("b", running=False)
    p2["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = REFUSED.to_line() + "\n"
    assert readback.termination_report(p2) == REFUSED
    assert readback.termination_report(pod("c")) is None
    assert readback.termination_report({"metadata": {"name": "d"}, "status": {}}) is None


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
    assert readback.is_running(p) is running


def test_read_reports_over_http():
    async def scenario():
        async def status(_request):
            return web.Response(text=CB_READY.model_dump_json(), content_type="application/json")

        app = web.Application()
        app.router.add_get("/v1/status", status)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            pods = [
                pod("up", ip="127.0.0.1"),
                pod("down", ip="127.0.0.2"),  # nothing listens: error, no report
                pod("crashed", waiting=("CrashLoopBackOff", ""), last_terminated_message=REFUSED.to_line()),
            ]
            return await readback.read_reports(pods, timeout=1.0, port=port)
        finally:
            await runner.cleanup()

    got = asyncio.run(scenario())
    assert got["up"].report == CB_READY and got["up"].source == "http"
    assert got["down"].report is None and "GET /v1/status" in got["down"].error
    assert got["crashed"].report == REFUSED and got["crashed"].source == "terminationMessage"


def test_status_url_ipv6():
    assert readback.status_url(pod("a", ip="fd00::1")) == "http://[fd00::1]:8000/v1/status"
