"""A Hugging Face Hub stand-in speaking the protocol huggingface_hub's snapshot_download uses.

Endpoints: the revision info (`/api/models/{repo}/revision/{rev}`), the recursive tree listing
(`/api/models/{repo}/tree/{sha}`) and file resolution (`HEAD`/`GET /{repo}/resolve/{sha}/{path}`, with
ETag, X-Repo-Commit and Range). Everything sits behind one bearer token. Fault knobs for tests:
`unavailable` answers that many requests 503 first; `truncate_once` sends half of each named file once
and drops the connection; `redirect_files_to` sends file GETs to another host (a CDN stand-in, see
`header_recorder`), as the real Hub does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = hashlib.sha1(b"ovserve fake hub").hexdigest()


@dataclasses.dataclass
class HubState:
    """Requests seen as (path, carried the right token), and the fault knobs (mutable while serving)."""

    seen: list[tuple[str, bool]] = dataclasses.field(default_factory=list)
    unavailable: int = 0
    truncate_once: set[str] = dataclasses.field(default_factory=set)
    redirect_files_to: str = ""
    served_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    ranges: list[str] = dataclasses.field(default_factory=list)


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, code: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _serve(handler: type[BaseHTTPRequestHandler], host: str) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer((host, 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@contextmanager
def fake_hub(
    repo: str,
    files: Mapping[str, Callable[[], bytes]],
    token: str,
    host: str = "127.0.0.1",
    state: HubState | None = None,
    fail_first: int = 0,
) -> Iterator[tuple[int, list[tuple[str, bool]]]]:
    """Serve `files` (path -> content loader) as `repo` at revision main; yields (port, requests seen),
    each request as (path, whether it carried the right token). Pass a HubState to inject faults;
    `fail_first` answers the first requests 503 (a Hub having a bad moment)."""
    st = state or HubState()
    st.unavailable += fail_first
    lock = threading.Lock()
    sizes: dict[str, int] = {}
    etags: dict[str, str] = {}
    for rel, load in files.items():  # each file read once here, again only when it is served
        data = load()
        sizes[rel], etags[rel] = len(data), hashlib.sha256(data).hexdigest()
    api_prefix = f"/api/models/{repo}/"

    class Hub(_Quiet):
        def do_HEAD(self):
            self._handle()

        def do_GET(self):
            self._handle()

        def _handle(self) -> None:
            ok = self.headers.get("Authorization") == f"Bearer {token}"
            path = urllib.parse.urlsplit(self.path).path
            with lock:
                st.seen.append((self.path, ok))
                fail = st.unavailable > 0
                st.unavailable -= fail
            if fail:
                return self._send(503, b'{"error": "unavailable"}')
            if not ok:
                return self._send(401, b'{"error": "Invalid credentials in Authorization header"}')
            if path.startswith(api_prefix + "revision/"):
                info = {"id": repo, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]}
                return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
            if path.startswith(api_prefix + "tree/"):
                tree = [{"type": "file", "path": f, "size": sizes[f], "oid": etags[f]} for f in files]
                return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
            for rev in ("main", COMMIT):
                prefix = f"/{repo}/resolve/{rev}/"
                if path.startswith(prefix) and (rel := urllib.parse.unquote(path.removeprefix(prefix))) in files:
                    return self._file(rel)
            return self._send(404, b'{"error": "not found"}')

        def _file(self, rel: str) -> None:
            meta = {"ETag": f'"{etags[rel]}"', "X-Repo-Commit": COMMIT}
            if self.command == "HEAD":
                self.send_response(200)
                for k, v in meta.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(sizes[rel]))
                return self.end_headers()
            if st.redirect_files_to:
                location = f"{st.redirect_files_to}/{COMMIT}/{urllib.parse.quote(rel)}"
                return self._send(302, b"", {**meta, "Location": location})
            body = files[rel]()
            start = 0
            if rng := self.headers.get("Range"):
                with lock:
                    st.ranges.append(f"{rel}: {rng}")
                start = int(rng.removeprefix("bytes=").split("-")[0])
            with lock:
                cut = rel in st.truncate_once
                st.truncate_once.discard(rel)
            part = body[start:]
            self.send_response(206 if start else 200)
            for k, v in meta.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(part)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.end_headers()
            sent = part[: len(part) // 2] if cut else part
            self.wfile.write(sent)
            with lock:
                st.served_bytes[rel] = st.served_bytes.get(rel, 0) + len(sent)
            if cut:  # an interrupted transfer: the client sees a short body
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)

    srv = _serve(Hub, host)
    try:
        yield srv.server_address[1], st.seen
    finally:
        srv.shutdown()


@contextmanager
def header_recorder(
    files: Mapping[str, Callable[[], bytes]], host: str = "127.0.0.2"
) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A second host (a CDN stand-in) that serves `{COMMIT}/{path}` without auth and records every request's
    headers; yields (base URL, headers seen)."""
    seen: list[dict[str, str]] = []

    class Cdn(_Quiet):
        def do_GET(self):
            seen.append({k.lower(): v for k, v in self.headers.items()})
            rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.removeprefix(f"/{COMMIT}/"))
            if rel in files:
                return self._send(200, files[rel]())
            return self._send(404)

    srv = _serve(Cdn, host)
    try:
        yield f"http://{host}:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
