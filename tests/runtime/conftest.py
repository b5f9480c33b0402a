"""Fixtures of the runtime tests: the tiny models and real ovserve-runtime servers as subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "models" / "build.sh"


def _models_dir() -> Path:
    out = subprocess.run(
        ["bash", "-c", f". {ROOT / 'hack' / 'versions.env'} && echo $OVSERVE_MODELS"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out or "/var/cache/ovserve/models")


@pytest.fixture(scope="session")
def tiny_models() -> Path:
    """The tiny test models of hack/models/build.sh (built once, cached outside git)."""
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3000)
    if proc.returncode != 0:
        pytest.fail(f"hack/models/build.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return _models_dir()


@pytest.fixture(scope="session")
def encoder_models() -> Path:
    """The tiny encoder models of hack/models/encoders/build.sh (tiny-embed, tiny-rerank), built once."""
    build = ROOT / "hack" / "models" / "encoders" / "build.sh"
    proc = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"{build} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return _models_dir()


@pytest.fixture(scope="session")
def chat_models(tiny_models) -> Path:
    """tiny-llm copies with real tool-calling chat templates (hack/models/chat/build.sh; seconds)."""
    build = ROOT / "hack" / "models" / "chat" / "build.sh"
    proc = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=3000)
    if proc.returncode != 0:
        pytest.fail(f"{build} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return tiny_models


@pytest.fixture(scope="session")
def draft_models(tiny_models) -> Path:
    """tiny-llm-draft and tiny-llm-draft-othertok (hack/models/draft/build.sh) beside the tiny models."""
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "models" / "draft" / "build.sh")], capture_output=True, text=True, timeout=1200
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/models/draft/build.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return tiny_models


def wait_until(pred, timeout: float = 20.0, interval: float = 0.1) -> bool:
    """Poll pred() until it is truthy or `timeout` passes; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runtime_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVSERVE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def runtime_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ovserve_runtime", *args]


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Server:
    """One ovserve-runtime process on a free port; `url` is http://127.0.0.1:PORT."""

    def __init__(self, model: Path, *args: str, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"runtime-{self.port}.log"
        self.termination_log = tmp / f"termination-{self.port}.log"
        self._log = open(self.log, "w")
        cmd = runtime_cmd(
            "--model-path",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--inference-threads",
            "1",
            "--termination-log",
            str(self.termination_log),
            *args,
        )
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=runtime_env())

    def wait_ready(self, timeout: float = 120) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"runtime exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}", pytrace=False)
            try:
                code, _ = http_get(self.url + "/v2/health/ready", timeout=2)
            except OSError:
                code = 0
            if code == 200:
                return self
            time.sleep(0.2)
        pytest.fail(f"runtime not ready after {timeout}s:\n{self.log.read_text()[-4000:]}", pytrace=False)

    def status(self) -> dict:
        return json.loads(http_get(self.url + "/v1/status")[1])

    def metrics(self) -> str:
        return http_get(self.url + "/metrics")[1]

    def metric(self, name: str, labels: str = "") -> float:
        """The value of one sample, e.g. metric('ovserve_requests_total', 'endpoint="chat",status="200"')."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#") or " " not in line:
                continue
            key, value = line.rsplit(" ", 1)
            base, _, rest = key.partition("{")
            if base == name and all(part in rest for part in labels.split(",") if part):
                total += float(value)
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def server_factory(tmp_path_factory) -> Iterator:
    started: list[Server] = []
    tmp = tmp_path_factory.mktemp("runtime")

    def start(model: Path, *args: str, ready: bool = True) -> Server:
        s = Server(model, *args, tmp=tmp)
        started.append(s)
        return s.wait_ready() if ready else s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def cb_server(tiny_models, server_factory) -> Server:
    """AUTO on the SDPA model: continuous batching."""
    return server_factory(tiny_models / "tiny-llm", "--max-prompt-tokens", "256", "--max-num-seqs", "32")


@pytest.fixture(scope="session")
def legacy_server(tiny_models, server_factory) -> Server:
    """AUTO on the SDPA-free model: the legacy fallback."""
    return server_factory(tiny_models / "tiny-llm-nosdpa", "--served-name", "nosdpa")


@pytest.fixture(scope="session")
def vlm_server(tiny_models, server_factory) -> Server:
    return server_factory(tiny_models / "tiny-vlm")
