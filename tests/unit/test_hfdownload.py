"""The Hugging Face init-container downloader against a local fake hub."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ovserve_operator import hfdownload

FILES = {"openvino_model.xml": b"<net/>", "openvino_model.bin": b"\0" * 10, "sub/tokenizer.json": b"{}"}
TOKEN = "hf_secret_token_value"


@pytest.fixture
def hub():
    seen = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_response(401)
                self.end_headers()
                return
            if self.path == "/api/models/org/m/revision/main":
                body = json.dumps({"siblings": [{"rfilename": f} for f in FILES]}).encode()
            elif self.path.startswith("/org/m/resolve/main/"):
                body = FILES[self.path.removeprefix("/org/m/resolve/main/")]
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()


def test_download(hub, tmp_path):
    endpoint, _seen = hub
    files = hfdownload.download("org/m", "main", tmp_path / "m", token=TOKEN, endpoint=endpoint)
    assert sorted(files) == sorted(FILES)
    for rel, data in FILES.items():
        assert (tmp_path / "m" / rel).read_bytes() == data


def test_main_keeps_token_out_of_output(hub, tmp_path, monkeypatch, capsys):
    endpoint, _ = hub
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_TOKEN", "wrong-" + TOKEN)
    rc = hfdownload.main(["--repo", "org/m", "--dest", str(tmp_path / "m")])
    out = capsys.readouterr()
    assert rc == 1
    assert "HTTP 401" in out.err
    assert TOKEN not in out.err + out.out
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert hfdownload.main(["--repo", "org/m", "--dest", str(tmp_path / "m")]) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.err + out.out
