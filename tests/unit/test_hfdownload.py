"""The Hugging Face init-container downloader (huggingface_hub) against a local fake hub: the token stays
with the hub, nothing escapes the destination, interrupted files resume, plain http needs a setting."""

from __future__ import annotations

import os
import re

import pytest
from ovserve_operator import hfdownload

from tests.fakehub import HubState, fake_hub, header_recorder

# Larger than huggingface_hub's 10 MiB write chunk, so that a cut after half leaves a partial file to resume.
BIG = os.urandom(24 * 2**20 + 7)
FILES = {
    "openvino_model.xml": b"<net/>",
    "openvino_model.bin": b"\0" * 10,
    "sub/tokenizer.json": b"{}",
    "big.bin": BIG,
}
TOKEN = "hf_secret_token_value"


@pytest.fixture
def state() -> HubState:
    return HubState()


@pytest.fixture
def hub(state):
    with fake_hub("org/m", {rel: (lambda d=data: d) for rel, data in FILES.items()}, TOKEN, state=state) as (port, _):
        yield f"http://127.0.0.1:{port}"


def fetch(endpoint: str, dest, token: str | None = TOKEN, **kw) -> list[str]:
    return hfdownload.download("org/m", "main", dest, token=token, endpoint=endpoint, allow_http=True, **kw)


def assert_files(dest) -> None:
    for rel, data in FILES.items():
        assert (dest / rel).read_bytes() == data, rel


def test_download_sends_the_token_to_the_hub_only(hub, state, tmp_path):
    lines: list[str] = []
    files = fetch(hub, tmp_path / "m", say=lines.append)
    assert sorted(files) == sorted(FILES)
    assert_files(tmp_path / "m")
    assert state.seen and all(ok for _, ok in state.seen)
    assert lines[0] == f"org/m@main: {len(FILES)} files, 24.0 MiB, {len(FILES)} to download"
    # A second run finds everything in place and downloads nothing.
    lines.clear()
    fetch(hub, tmp_path / "m", say=lines.append)
    assert lines[0].endswith(", 0 to download")


def test_redirect_to_another_host_carries_no_token(hub, state, tmp_path):
    with header_recorder({rel: (lambda d=data: d) for rel, data in FILES.items()}) as (cdn, cdn_seen):
        state.redirect_files_to = cdn
        fetch(hub, tmp_path / "m")
    assert_files(tmp_path / "m")
    assert len(cdn_seen) == len(FILES)
    assert all("authorization" not in headers for headers in cdn_seen), cdn_seen
    assert not any(TOKEN in value for headers in cdn_seen for value in headers.values())


def test_interrupted_file_resumes_where_it_stopped(hub, state, tmp_path):
    state.truncate_once = {"big.bin"}
    fetch(hub, tmp_path / "m")
    assert_files(tmp_path / "m")
    assert [r.split(":")[0] for r in state.ranges] == ["big.bin"]
    resumed_at = int(state.ranges[0].split("bytes=")[1].rstrip("-"))
    assert 0 < resumed_at < len(BIG)
    # The cut sent half the file; the retry fetched only what was not written yet.
    assert state.served_bytes["big.bin"] == len(BIG) // 2 + (len(BIG) - resumed_at)


@pytest.mark.parametrize("name", ["../escape.bin", "sub/../../escape.bin"])
def test_file_names_cannot_escape_the_destination(tmp_path, name):
    dest = tmp_path / "deep" / "m"
    with fake_hub("org/m", {name: lambda: b"x", "ok.json": lambda: b"{}"}, TOKEN) as (port, _):
        with pytest.raises(hfdownload.DownloadError):
            fetch(f"http://127.0.0.1:{port}", dest)
    assert not (tmp_path / "escape.bin").exists() and not (tmp_path / "deep" / "escape.bin").exists()


@pytest.mark.parametrize(
    ("endpoint", "allow_http", "expect"),
    [
        ("https://huggingface.co/", False, "https://huggingface.co"),
        ("https://mirror.example:8443", False, "https://mirror.example:8443"),
        ("http://mirror.local:8080/", True, "http://mirror.local:8080"),
        ("http://mirror.local:8080", False, "plain http"),
        ("ftp://mirror.local", True, "expected an http(s) URL"),
        ("huggingface.co", False, "expected an http(s) URL"),
    ],
)
def test_check_endpoint(endpoint, allow_http, expect):
    if expect.startswith(("http://", "https://")):
        assert hfdownload.check_endpoint(endpoint, allow_http) == expect
    else:
        with pytest.raises(hfdownload.DownloadError, match=re.escape(expect)):
            hfdownload.check_endpoint(endpoint, allow_http)


def test_main_keeps_token_out_of_output(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hfdownload, "TERMINATION_LOG", tmp_path / "termination-log")
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.setenv("HF_TOKEN", "wrong-" + TOKEN)
    argv = ["--repo", "org/m", "--dest", str(tmp_path / "m")]
    # Plain http is refused without the setting, before any request carries the token.
    monkeypatch.delenv(hfdownload.ALLOW_HTTP_ENV, raising=False)
    assert hfdownload.main(argv) == 1
    assert "plain http" in capsys.readouterr().err
    monkeypatch.setenv(hfdownload.ALLOW_HTTP_ENV, "true")
    assert hfdownload.main(argv) == 1
    out = capsys.readouterr()
    reason = "HTTP 401 from /api/models/org/m/revision/main (the token is wrong)"
    assert f"model download failed: org/m@main: {reason}" in out.err
    assert TOKEN not in out.err + out.out
    assert (tmp_path / "termination-log").read_text().startswith("model download failed: org/m@main")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert hfdownload.main(argv) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.err + out.out
    assert_files(tmp_path / "m")
