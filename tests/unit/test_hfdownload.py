"""The Hugging Face init-container downloader against a local fake hub."""

from __future__ import annotations

import pytest
from ovserve_operator import hfdownload

from tests.fakehub import fake_hub

FILES = {"openvino_model.xml": b"<net/>", "openvino_model.bin": b"\0" * 10, "sub/tokenizer.json": b"{}"}
TOKEN = "hf_secret_token_value"


@pytest.fixture
def hub():
    with fake_hub("org/m", {rel: (lambda d=data: d) for rel, data in FILES.items()}, TOKEN) as (port, seen):
        yield f"http://127.0.0.1:{port}", seen


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
