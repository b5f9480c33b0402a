"""Liveness endpoint (GET /healthz) and a few operator metrics (GET /metrics) on OVSERVE_HEALTH_PORT.

Served from a thread so that it answers while the replica is a standby (kopf not started yet) too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)


class HealthState:
    """Shared between the kopf loop (heartbeat) and the health thread."""

    def __init__(self, *, stale_after: float = 60.0) -> None:
        self.role = "starting"  # starting | standby | leader | stopping
        self.kopf_running = False
        self.heartbeat = time.monotonic()
        self.stale_after = stale_after
        self.counters: dict[str, float] = {}
        # reflectors refused (401/403): their namespaces are degraded, not the operator (a restart cannot help, so
        # liveness stays green; /healthz names them)
        self.unreadable: list[str] = []
        self.lock = threading.Lock()

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def inc(self, name: str, value: float = 1.0) -> None:
        with self.lock:
            self.counters[name] = self.counters.get(name, 0.0) + value

    def healthy(self) -> tuple[bool, dict]:
        age = time.monotonic() - self.heartbeat
        ok = not (self.role == "leader" and self.kopf_running and age > self.stale_after)
        info = {"role": self.role, "kopf": self.kopf_running, "heartbeatAgeSeconds": round(age, 1)}
        return ok, {**info, "unreadable": list(self.unreadable)} if self.unreadable else info


def serve(
    state: HealthState,
    port: int,
    *,
    host: str = "0.0.0.0",
    extra: Callable[[], dict[str, float]] | None = None,
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] in ("/healthz", "/livez"):
                ok, info = state.healthy()
                self._send(200 if ok else 503, json.dumps({"ok": ok, **info}) + "\n", "application/json")
            elif self.path.split("?")[0] == "/metrics":
                lines = [
                    "# HELP ovserve_operator_leader 1 while this replica holds the lease and reconciles.",
                    "# TYPE ovserve_operator_leader gauge",
                    f"ovserve_operator_leader {1 if state.role == 'leader' else 0}",
                ]
                with state.lock:
                    counters = dict(state.counters)
                if extra:
                    counters.update(extra())
                for name, value in sorted(counters.items()):
                    lines.append(f"{name} {value}")
                self._send(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")
            else:
                self._send(404, "not found\n", "text/plain")

        def _send(self, code: int, text: str, ctype: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    log.info("health endpoint on http://%s:%d/healthz", host, server.server_address[1])
    return server
