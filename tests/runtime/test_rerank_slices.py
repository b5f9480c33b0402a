"""Rerank scores a request's documents in slices (issue 38, item 2): one pipeline call never takes more than
SLICE documents, whatever the request's size, and the scores are the unsliced pipeline's. The real
TextRerankPipeline on the tiny model, behind a proxy that records each call's size."""

from __future__ import annotations

import asyncio

import openvino_genai as g
import pytest
from ovserve_runtime.engine import Events
from ovserve_runtime.tasks import rerank
from ovserve_runtime.tasks.worker import Job

pytestmark = pytest.mark.runtime

DOCUMENTS = 300


class Recording:
    """The real pipeline; the number of documents of each `rerank` call is kept."""

    def __init__(self, real) -> None:
        self.real = real
        self.calls: list[int] = []

    def rerank(self, query, documents):
        self.calls.append(len(documents))
        return self.real.rerank(query, documents)


@pytest.fixture
def pipeline(encoder_models):
    c = g.TextRerankPipeline.Config()
    c.top_n = DOCUMENTS  # every score back, as rerank.load constructs it
    path = str(encoder_models / "tiny-rerank")
    return g.TextRerankPipeline(path, "CPU", c, INFERENCE_NUM_THREADS=1), g.Tokenizer(path)


def test_a_large_request_is_scored_in_slices_with_the_scores_of_one_call(pipeline):
    real, tokenizer = pipeline
    docs = [f"document {i} about {'paris' if i % 7 == 0 else 'rivers'} " + "word " * (i % 13) for i in range(DOCUMENTS)]
    whole = {int(i): s for i, s in real.rerank("capital of france", docs)}
    rec = Recording(real)
    engine = rerank.make_engine(rec, tokenizer)
    engine.start()
    try:

        async def run():
            job = Job(texts=docs, query="capital of france", loop=asyncio.get_running_loop(), events=Events())
            engine.submit(job)
            return await asyncio.wait_for(job.events.get(), 60), job

        (kind, scored), job = asyncio.run(run())
    finally:
        engine.stop()
    assert kind == "done", scored
    assert rec.calls and max(rec.calls) <= rerank.SLICE and sum(rec.calls) == DOCUMENTS, rec.calls
    assert sorted(i for i, _ in scored) == list(range(DOCUMENTS))
    for i, s in scored:
        assert s == pytest.approx(whole[i], abs=1e-5)
    assert job.generated == DOCUMENTS  # the slices count as progress for the liveness watchdog
