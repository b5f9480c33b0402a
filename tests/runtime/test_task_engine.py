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


def test_a_broken_pipeline_over_http_answers_every_request_and_fails_liveness(encoder_models):
    """The server's fatal path for a task serving (what cli.serve wires): every request in flight and every
    later one gets an error, never a hang; readiness and liveness turn 503; the report says failed."""
    from aiohttp.test_utils import TestClient, TestServer
    from ovserve_runtime.http.app import App, ServerConfig, failed_state
    from ovserve_runtime.report import (
        Decision,
        EmbeddingsReport,
        PipelineReport,
        RuntimeReport,
        State,
        Task,
        TaskReport,
    )
    from ovserve_runtime.tasks.embeddings import Embeddings

    path = str(encoder_models / "tiny-embed")
    pipe = Faulty(g.TextEmbeddingPipeline(path, "CPU", INFERENCE_NUM_THREADS=1))
    engine = make_engine(pipe, g.Tokenizer(path), max_batch=4, limit=128)
    rep = EmbeddingsReport(pooling=Decision(value="CLS"), normalize=Decision(value="true"), dimensions=32)
    service = Embeddings(engine, rep, "e", 128)
    task = TaskReport(requested=Task.AUTO, resolved=Task.EMBEDDINGS, source="test")

    async def go():
        report = RuntimeReport(state=State.READY, model="e", pipeline=PipelineReport(), task=task)
        app = App(ServerConfig(served_name="e"), report)
        loop = asyncio.get_running_loop()

        def on_fatal(message: str) -> None:
            loop.call_soon_threadsafe(lambda: (app.set_report(failed_state(app.report, message)), app.fail(message)))

        engine.on_fatal = on_fatal
        engine.start()
        app.attach(engine, 128)
        app.attach_service(task.resolved, engine, service)
        async with TestClient(TestServer(app.web)) as client:
            ok = await client.post("/v3/embeddings", json={"input": "hello"})
            assert ok.status == 200
            pipe.gate.clear()
            pipe.broken.set()
            in_flight = [
                asyncio.ensure_future(client.post("/v3/embeddings", json={"input": f"x {i}"})) for i in range(6)
            ]
            await asyncio.sleep(0.2)
            pipe.gate.set()
            answers = await asyncio.wait_for(asyncio.gather(*in_flight), 30)
            assert all(r.status >= 500 for r in answers), [r.status for r in answers]
            late = await client.post("/v3/embeddings", json={"input": "late"})
            assert late.status == 503
            assert (await client.get("/v2/health/live")).status == 503
            assert (await client.get("/v2/health/ready")).status == 503
            status = await (await client.get("/v1/status")).json()
            assert status["state"] == "failed" and "device lost" in status["pipeline"]["message"]
        engine.stop()

    asyncio.run(go())
