"""kopf hosts the process: its startup handler builds the Controller from kopf's memo and starts it, its cleanup
handler stops it, and kopf itself lists and watches nothing (the Controller's reflectors do).

Run for real: kopf.run with the operator's startup and cleanup handlers and kopf settings, logged in to a local
HTTP server that counts what reaches it, the Controller given a fake API client whose LISTs are refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import kopf
from ovserve_operator import handlers
from ovserve_operator.controller import Controller
from ovserve_operator.health import HealthState
from ovserve_operator.settings import Settings, configure_kopf


class Refused(Exception):
    status = 403


class FakeKube:
    """What the Controller's reflectors and Events use: every LIST is refused (403), every Event recorded."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.events: list[str] = []
        self.dyn = SimpleNamespace(request=self._request)

    def resource(self, api_version: str, kind: str) -> Any:
        return SimpleNamespace(path=lambda namespace=None: f"{kind}/{namespace}")

    def _request(self, method: str, path: str, **_: Any) -> None:
        self.listed.append(path)
        raise Refused("forbidden")

    def create_event(self, namespace: str, body: dict) -> None:
        self.events.append(body["reason"])


# kopf's API discovery (what resources exist: any authenticated identity may ask), answered empty
DISCOVERY = {"/api": b'{"kind": "APIVersions", "versions": []}', "/apis": b'{"kind": "APIGroupList", "groups": []}'}


def api_server() -> tuple[ThreadingHTTPServer, list[str]]:
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = DISCOVERY.get(self.path)
            self.send_response(404 if body is None else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        do_POST = do_PATCH = do_GET

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asked


def test_kopf_runs_the_controller_from_its_memo_and_watches_nothing_itself():
    server, asked = api_server()
    registry = kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(handlers.startup)
    kopf.on.cleanup(registry=registry)(handlers.cleanup)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=f"http://127.0.0.1:{server.server_address[1]}")

    settings = Settings(identity="op-1", watch_namespaces=("ns",))
    kube, health = FakeKube(), HealthState()
    memo = kopf.Memo(settings=settings, kube=kube, health=health)
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings, settings)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    seen: dict[str, Any] = {}

    async def until_started() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ctl = memo.get("controller")
            if ctl is not None and len(set(kube.listed)) == 6 and kube.events:
                seen.update(controller=ctl, running=not ctl.task.done(), alive=health.kopf_running)
                break
            await asyncio.sleep(0.05)
        stop.set()

    watcher = loop.create_task(until_started())  # held: a task nobody holds may be collected
    try:
        kopf.run(
            registry=registry,
            settings=kopf_settings,
            standalone=True,
            namespaces=["ns"],
            memo=memo,
            stop_flag=stop,
            loop=loop,
        )
    finally:
        loop.close()
        server.shutdown()
    assert watcher.done()

    ctl = seen["controller"]
    assert isinstance(ctl, Controller) and seen["running"] and seen["alive"]
    # the Controller's own reflectors listed each kind in the watched namespace, and the Nodes (cluster-wide); the
    # refusal was told on the Lease
    assert set(kube.listed) == {
        "LLMServing/ns",
        "Pod/ns",
        "Deployment/ns",
        "Service/ns",
        "PodDisruptionBudget/ns",
        "Node/None",
    }
    assert kube.events[0] == "NamespaceUnreadable"
    # cleanup stopped it
    assert ctl.task is None and ctl.reflectors == [] and not health.kopf_running
    assert set(asked) <= set(DISCOVERY)  # kopf itself listed and watched nothing: its discovery only


def test_configure_kopf():
    """What the settings do: no peering objects, no cluster scanning (least-privilege RBAC)."""
    ks = kopf.OperatorSettings()
    configure_kopf(ks, Settings(identity="op-1", watch_namespaces=("a",)))
    assert ks.peering.standalone is True and ks.peering.clusterwide is False and ks.scanning.disabled is True
