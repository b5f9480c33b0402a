"""The runtime's HTTP error surface, in process (no model): nothing leaves as aiohttp's plain text."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from ovserve_runtime.http import App, ServerConfig
from ovserve_runtime.report import PipelineReport, PipelineType, Reason, RuntimeReport, State

KEYS = {"message", "type", "param", "code"}


def _app(**cfg) -> App:
    report = RuntimeReport(
        state=State.LOADING,
        model="m",
        device="CPU",
        pipeline=PipelineReport(requested=PipelineType.AUTO, reason=Reason.LOADING),
    )
    app = App(ServerConfig(served_name="m", **cfg), report)

    async def boom(_req: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app.web.router.add_get("/boom", boom)
    return app


async def _exchange(app: App, method: str, path: str, data: bytes | None) -> tuple[int, str, dict]:
    async with TestClient(TestServer(app.web)) as client:
        resp = await client.request(method, path, data=data)
        return resp.status, resp.headers.get("Content-Type", ""), json.loads(await resp.read())


def run(app: App, method: str, path: str, data: bytes | None = None) -> tuple[int, dict]:
    status, ctype, body = asyncio.run(_exchange(app, method, path, data))
    assert ctype.startswith("application/json")
    assert set(body["error"]) == KEYS
    return status, body["error"]


def test_unexpected_exception_is_a_json_500(caplog):
    status, err = run(_app(), "GET", "/boom")
    assert (status, err["type"], err["code"]) == (500, "server_error", "internal_error")
    assert "a bug" not in err["message"]  # internals stay in the log
    assert "a bug" in caplog.text


def test_route_and_method_errors_are_json():
    assert run(_app(), "GET", "/nope")[1]["code"] == "not_found"
    status, err = run(_app(), "DELETE", "/v3/completions")
    assert (status, err["code"]) == (405, "method_not_allowed")


def test_body_over_the_limit_is_a_json_413():
    status, err = run(_app(max_body_bytes=100), "POST", "/v3/completions", b"x" * 101)
    assert (status, err["code"]) == (413, "request_too_large")


def test_not_ready_is_a_json_503_after_validation():
    status, err = run(_app(), "POST", "/v3/completions", b'{"prompt": "x"}')
    assert (status, err["code"]) == (503, "model_not_ready")
    status, err = run(_app(), "POST", "/v3/completions", b'{"prompt": 1}')
    assert (status, err["param"], err["code"]) == (400, "prompt", "invalid_type")
    status, err = run(_app(), "POST", "/v3/completions", b'{"prompt": "x", "model": "other"}')
    assert (status, err["param"], err["code"]) == (404, "model", "model_not_found")
