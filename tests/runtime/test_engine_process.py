"""The engine-core process: one copy of the weights, it dies with the runtime, and its death is visible."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import openai
import pytest

from .conftest import http_get, wait_until

pytestmark = pytest.mark.runtime


def _engine_pid(server) -> int:
    """The runtime's engine-core child: the multiprocessing spawn_main child that maps the weights (the grammar
    worker is another spawn_main child)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server.proc.pid and b"spawn_main" in cmd and _maps_weights(int(d.name)):
            found.append(int(d.name))
    assert len(found) == 1, f"expected one engine process, got {found}"
    return found[0]


def _maps_weights(pid: int) -> bool:
    try:
        return "openvino_model.bin" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_killed_engine_turns_readiness_503_and_fails_requests(tiny_models, server_factory):
    srv = server_factory(tiny_models / "tiny-llm", "--served-name", "doomed")
    c = openai.OpenAI(base_url=srv.url + "/v3", api_key="x", max_retries=0, timeout=30)
    assert c.completions.create(model="doomed", prompt="hello", max_tokens=4).usage.completion_tokens >= 1
    engine = _engine_pid(srv)
    # the weights live in the engine process only
    assert "openvino_model.bin" in Path(f"/proc/{engine}/maps").read_text()
    assert "openvino_model.bin" not in Path(f"/proc/{srv.proc.pid}/maps").read_text()
    stream = c.completions.create(
        model="doomed", prompt="hello", max_tokens=400, stream=True, extra_body={"ignore_eos": True}
    )
    next(iter(stream))
    os.kill(engine, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - the stream ends with an error event, not a hang
        for _ in stream:
            pass
    assert time.monotonic() - t0 < 20
    assert wait_until(lambda: http_get(srv.url + "/v2/health/ready")[0] == 503)
    with pytest.raises(openai.APIStatusError) as err:
        c.completions.create(model="doomed", prompt="hello", max_tokens=4)
    assert err.value.status_code == 503
    assert srv.status()["state"] == "failed"


def test_engine_process_dies_with_the_runtime(tiny_models, server_factory):
    srv = server_factory(tiny_models / "tiny-llm", "--served-name", "orphan")
    engine = _engine_pid(srv)
    srv.proc.kill()  # SIGKILL: no cleanup code runs in the parent
    srv.proc.wait()
    assert wait_until(lambda: not _alive(engine)), f"engine process {engine} outlived its parent"


def _policies(pid: int) -> set[int]:
    """The scheduling policy of every thread of a process."""
    out = set()
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.add(os.sched_getscheduler(int(t.name)))
        except OSError:  # the thread ended meanwhile
            pass
    return out


def test_http_threads_yield_to_the_engine_process(cb_server):
    """The event loop's thread (and what it starts) runs SCHED_BATCH, the engine process SCHED_OTHER: a step's
    pipe write must not hand the engine's core to the HTTP process it wakes. Requests served after the pipe
    moved from the reader thread to the event loop stream every token."""
    srv = cb_server
    c = openai.OpenAI(base_url=srv.url + "/v3", api_key="x", max_retries=0, timeout=30)
    for _ in range(2):  # the request pool's and encoder's threads exist now
        chunks = list(
            c.completions.create(
                model="tiny-llm", prompt="hello", max_tokens=12, stream=True, extra_body={"ignore_eos": True}
            )
        )
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].text) >= 1
        assert chunks[-1].choices[0].finish_reason == "length"
    assert os.sched_getscheduler(srv.proc.pid) == os.SCHED_BATCH  # the main thread runs the event loop
    assert _policies(_engine_pid(srv)) == {os.SCHED_OTHER}
    assert "HTTP threads: SCHED_BATCH" in srv.log.read_text()


def test_the_engine_gives_back_the_mapped_weights_once_compiled(cb_server, tiny_models):
    """The weights were resident twice in the engine: the plugin's own (repacked) copy and every page of the
    mapped .bin it read while compiling (bench-qwen, int8: 472 of 1,134 MiB; docs/benchmarks.md). engine/pages.py
    drops the mapped pages after compiling, and generation goes on: what inference reads from the mapping
    itself (tiny-llm's f32 weights are used in place) faults back in from the page cache."""
    size_kib = (tiny_models / "tiny-llm" / "openvino_model.bin").stat().st_size // 1024
    given = [int(m) for m in re.findall(r"gave back (\d+) KiB of mapped model pages", cb_server.log.read_text())]
    assert given and given[0] >= size_kib, (given, size_kib)
    out = openai.OpenAI(base_url=cb_server.url + "/v3", api_key="x").completions.create(
        model=cb_server.status()["model"], prompt="hello", max_tokens=8
    )
    assert out.usage.completion_tokens == 8
