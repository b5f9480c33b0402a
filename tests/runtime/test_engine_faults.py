"""Fault injection on the engines: when the pipeline breaks, no request hangs and no slot leaks.

The pipelines are the real ones on the tiny model, behind a thin proxy that raises where a broken device or
model would (step(), add_request(), a legacy generate()); everything else goes to the real pipeline.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from ovserve_runtime.engine import EngineError, GenRequest, construct_cb, construct_legacy
from ovserve_runtime.engine import SchedulerOptions as Sched
from ovserve_runtime.engine.inprocess import cb_client, legacy_client
from ovserve_runtime.report import PipelineType as P

from .conftest import wait_until

pytestmark = pytest.mark.runtime

THREADS = {"INFERENCE_NUM_THREADS": 1}


class Faulty:
    """The real pipeline, except that `step`/`add_request`/`generate` raise once `armed` says so."""

    def __init__(self, real) -> None:
        self._real = real
        self.fail_step = threading.Event()
        self.fail_add = threading.Event()
        self.fail_generate = threading.Event()
        self.steps = 0

    def __getattr__(self, name):
        return getattr(self._real, name)

    def step(self):
        if self.fail_step.is_set():
            raise RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp: device lost (injected)")
        self.steps += 1
        return self._real.step()

    def add_request(self, *args):
        if self.fail_add.is_set():
            raise RuntimeError("add_request failed (injected)")
        return self._real.add_request(*args)

    def generate(self, *args, **kwargs):
        if self.fail_generate.is_set():
            raise RuntimeError("Exception from infer_request.cpp: device lost (injected)")
        return self._real.generate(*args, **kwargs)


def _request(engine, max_new: int, text: str = "hello") -> GenRequest:
    cfg = engine.new_config()
    cfg.max_new_tokens = max_new
    cfg.ignore_eos = True
    return GenRequest(config=cfg, max_new_tokens=max_new, input_ids=engine.tokenizer.encode(text).input_ids)


async def _drive(engine, reqs: list[GenRequest], arm, arm_when) -> list[list]:
    """Submit every request, arm the fault once `arm_when()` holds, and collect each request's events."""
    loop = asyncio.get_running_loop()
    for r in reqs:
        r.loop, r.events = loop, asyncio.Queue()
        engine.submit(r)

    async def events(r):
        out = []
        while True:
            kind, value = await asyncio.wait_for(r.events.get(), 30)  # a hang fails here
            out.append((kind, value))
            if kind != "tokens":
                return out

    async def trigger():
        while not arm_when():
            await asyncio.sleep(0.001)
        arm()

    results = await asyncio.gather(*(events(r) for r in reqs), trigger())
    return results[:-1]


@pytest.fixture
def cb(tiny_models):
    pipe = Faulty(construct_cb(str(tiny_models / "tiny-llm"), "CPU", Sched(), THREADS))
    fatal: list[str] = []
    engine = cb_client(pipe, P.LM_CB, max_active=20)
    engine.on_fatal = fatal.append
    engine.start()
    yield engine, pipe, fatal
    engine.stop()


def test_step_raising_answers_20_active_and_20_queued(cb):
    engine, pipe, fatal = cb
    reqs = [_request(engine, 400, f"number {i}") for i in range(40)]
    t0 = time.monotonic()
    results = asyncio.run(
        _drive(
            engine,
            reqs,
            pipe.fail_step.set,
            lambda: engine.waiting == 20 and sum(r.generated > 0 for r in reqs) == 20,
        )
    )
    assert time.monotonic() - t0 < 30
    ends = [ev[-1] for ev in results]
    assert all(kind == "error" and "device lost" in msg for kind, msg in ends), ends
    # the 20 that generated got tokens first; the 20 queued ones got nothing but the error
    assert sum(1 for ev in results if len(ev) > 1) == 20
    assert (engine.waiting, engine.running) == (0, 0)
    wait_until(lambda: fatal, 10, 0.01)  # on_fatal runs on the core's thread right after the errors went out
    assert len(fatal) == 1 and "device lost" in fatal[0] and engine.fatal == fatal[0]
    with pytest.raises(EngineError):
        engine.submit(_request(engine, 4))


def test_add_request_raising_fails_only_those_requests(cb):
    engine, pipe, fatal = cb
    pipe.fail_add.set()
    reqs = [_request(engine, 8, f"number {i}") for i in range(40)]
    results = asyncio.run(_drive(engine, reqs, lambda: None, lambda: True))
    assert all(ev == [("error", "add_request failed (injected)")] for ev in results)
    assert (engine.waiting, engine.running, engine.fatal, fatal) == (0, 0, None, [])
    pipe.fail_add.clear()
    ok = asyncio.run(_drive(engine, [_request(engine, 4)], lambda: None, lambda: True))
    assert ok[0][-1] == ("done", "length")


def test_max_num_seqs_bounds_what_generates(cb):
    """openvino-genai ignores max_num_seqs under dynamic split-fuse; the engine holds the rest back."""
    engine, _pipe, _ = cb
    reqs = [_request(engine, 64, f"number {i}") for i in range(30)]
    seen: list[tuple[int, int]] = []

    def sample():
        seen.append((engine.running, engine.waiting))
        return False

    async def main():
        task = asyncio.ensure_future(_drive(engine, reqs, lambda: None, lambda: True))
        while not task.done():
            sample()
            await asyncio.sleep(0.002)
        return await task

    results = asyncio.run(main())
    assert all(ev[-1] == ("done", "length") for ev in results)
    assert max(r for r, _w in seen) == 20 and max(w for _r, w in seen) >= 10
    assert (engine.waiting, engine.running) == (0, 0)


def test_legacy_generate_breaking_answers_the_queue(tiny_models):
    pipe = Faulty(construct_legacy(str(tiny_models / "tiny-llm"), "CPU", False, THREADS))
    fatal: list[str] = []
    engine = legacy_client(pipe, P.LM)
    engine.on_fatal = fatal.append
    engine.start()
    try:
        first = _request(engine, 400)
        reqs = [first] + [_request(engine, 8, f"number {i}") for i in range(20)]

        def arm():
            pipe.fail_generate.set()
            engine.cancel(first)  # the running one ends; the next generate() raises the fatal error

        results = asyncio.run(_drive(engine, reqs, arm, lambda: first.generated > 0))
        assert results[0][-1] == ("done", "cancelled")
        assert all(ev == [("error", ev[-1][1])] and "device lost" in ev[-1][1] for ev in results[1:]), results
        assert (engine.waiting, engine.running) == (0, 0)
        wait_until(lambda: fatal, 10, 0.01)
        assert len(fatal) == 1
        with pytest.raises(EngineError):
            engine.submit(_request(engine, 4))
    finally:
        engine.stop()
