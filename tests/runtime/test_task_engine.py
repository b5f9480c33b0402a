"""Faults in the task engine (tasks/worker.py) with the real TextEmbeddingPipeline behind a proxy that raises
where a broken device would: no job hangs, a bad input fails alone, a broken pipeline fails everything and
turns the engine fatal."""

from __future__ import annotations

import asyncio
import threading

import openvino_genai as g
import pytest
from ovserve_runtime.engine import EngineError, Events
from ovserve_runtime.tasks.embeddings import make_engine
from ovserve_runtime.tasks.worker import Job

pytestmark = pytest.mark.runtime


class Faulty:
    """The real pipeline; `embed_documents` raises for texts containing `poison`, or always once `broken`."""

    def __init__(self, real) -> None:
        self.real = real
        self.broken = threading.Event()
        self.gate = threading.Event()  # set: calls proceed
        self.gate.set()

    def embed_documents(self, texts):
        self.gate.wait(30)
        if self.broken.is_set():
            raise RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp: device lost (injected)")
        if any("poison" in t for t in texts):
            raise RuntimeError("tokenizer refused the input (injected)")
        return self.real.embed_documents(texts)


@pytest.fixture
def faulty(encoder_models):
    path = str(encoder_models / "tiny-embed")
    pipe = Faulty(g.TextEmbeddingPipeline(path, "CPU", INFERENCE_NUM_THREADS=1))
    engine = make_engine(pipe, g.Tokenizer(path), max_batch=8)
    fatal: list[str] = []
    engine.on_fatal = fatal.append
    engine.start()
    yield pipe, engine, fatal
    engine.stop()


async def _run(engine, texts_per_job: list[list[str]]) -> list[tuple[str, object]]:
    loop = asyncio.get_running_loop()
    jobs = [Job(texts=t, loop=loop, events=Events()) for t in texts_per_job]
    for j in jobs:
        engine.submit(j)
    return await asyncio.wait_for(asyncio.gather(*(j.events.get() for j in jobs)), 30)


def test_a_bad_input_fails_alone(faulty):
    pipe, engine, fatal = faulty
    pipe.gate.clear()  # hold the worker so that all jobs land in one call
    engine.submit(Job(texts=["warm"]))

    async def go():
        task = asyncio.ensure_future(_run(engine, [["a"], ["poison"], ["b", "c"]]))
        await asyncio.sleep(0.2)
        pipe.gate.set()
        return await task

    out = asyncio.run(go())
    assert [k for k, _ in out] == ["done", "error", "done"]
    assert len(out[2][1][0]) == 2 and out[2][1][1] > 0 and not fatal and engine.fatal is None


def test_a_broken_pipeline_fails_every_job_and_turns_fatal(faulty):
    pipe, engine, fatal = faulty
    pipe.gate.clear()
    pipe.broken.set()
    engine.submit(Job(texts=["running"]))  # taken by the worker, held at the gate

    async def go():
        task = asyncio.ensure_future(_run(engine, [["q1"], ["q2"], ["q3"] * 20]))
        await asyncio.sleep(0.2)
        pipe.gate.set()
        return await task

    out = asyncio.run(go())
    assert all(kind == "error" and "device lost" in str(v) for kind, v in out), out
    assert engine.fatal and fatal and "device lost" in fatal[0]
    with pytest.raises(EngineError):
        engine.submit(Job(texts=["late"]))
