"""A Hugging Face Hub stand-in: the two endpoints ovserve's downloader uses, behind a bearer token."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def fake_hub(
    repo: str,
    files: Mapping[str, Callable[[], bytes]],
    token: str,
    host: str = "127.0.0.1",
    fail_first: int = 0,
) -> Iterator[tuple[int, list[tuple[str, bool]]]]:
    """Serve `files` (path -> content loader) as `repo` at revision main; yields (port, requests seen),
    each request as (path, whether it carried the right token). The first `fail_first` requests are
    answered 503 (a Hub having a bad moment)."""
    seen: list[tuple[str, bool]] = []
    failures = [fail_first]
    lock = threading.Lock()
    listing = f"/api/models/{repo}/revision/main"
    prefix = f"/{repo}/resolve/main/"

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.headers.get("Authorization") == f"Bearer {token}"
            seen.append((self.path, ok))
            rel = urllib.parse.unquote(self.path.removeprefix(prefix)) if self.path.startswith(prefix) else None
            with lock:
                fail = failures[0] > 0
                failures[0] -= fail
            if fail:
                self._send(503)
            elif not ok:
                self._send(401)
            elif self.path == listing:
                self._send(200, json.dumps({"siblings": [{"rfilename": f} for f in files]}).encode())
            elif rel in files:
                self._send(200, files[rel]())
            else:
                self._send(404)

        def _send(self, code: int, body: bytes = b"") -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer((host, 0), Hub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1], seen
    finally:
        srv.shutdown()
