"""The engines with the real pipelines: failed starts and cancellations give capacity back."""

from __future__ import annotations

import asyncio

import pytest
from ovserve_runtime.engine import GenRequest
from ovserve_runtime.loader import LoadOptions, load
from ovserve_runtime.report import PipelineType as P

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module", params=[("tiny-llm", P.LM_CB), ("tiny-llm", P.LM)], ids=["cb", "legacy"])
def engine(request, tiny_models):
    model, ptype = request.param
    eng, _, _ = load(
        LoadOptions(model_path=str(tiny_models / model), pipeline_type=ptype, properties={"INFERENCE_NUM_THREADS": 1})
    )
    yield eng
    eng.stop()


def _request(engine, max_new: int, input_ids="hello") -> GenRequest:
    cfg = engine.new_config()
    cfg.max_new_tokens = max_new
    cfg.ignore_eos = True
    if isinstance(input_ids, str):
        input_ids = engine.tokenizer.encode(input_ids).input_ids
    return GenRequest(config=cfg, max_new_tokens=max_new, input_ids=input_ids)


async def _run(engine, req: GenRequest, cancel_after: int | None = None) -> list:
    req.loop = asyncio.get_running_loop()
    req.events = asyncio.Queue()
    engine.submit(req)
    events, tokens = [], 0
    while True:
        kind, value = await asyncio.wait_for(req.events.get(), 60)
        events.append((kind, value))
        if kind == "tokens":
            tokens += len(value)
            if cancel_after is not None and tokens >= cancel_after:
                engine.cancel(req)
            continue
        return events


def test_failed_start_does_not_leak_capacity(engine):
    async def main():
        # the real pipeline rejects an input that is not a token tensor
        bad = await _run(engine, _request(engine, 4, input_ids=[[1, 2, 3]]))
        good = await _run(engine, _request(engine, 4))
        return bad, good

    bad, good = asyncio.run(main())
    assert bad[-1][0] == "error" and bad[-1][1]
    assert good[-1] == ("done", "length")
    assert sum(len(v) for k, v in good if k == "tokens") == 4
    assert (engine.waiting, engine.running, engine.fatal) == (0, 0, None)


def test_cancel_stops_generation_and_frees_the_slot(engine):
    async def main():
        req = _request(engine, 480)
        events = await _run(engine, req, cancel_after=1)
        return req, events

    req, events = asyncio.run(main())
    assert events[-1] == ("done", "cancelled")
    assert 1 <= req.generated < 480
    assert (engine.waiting, engine.running) == (0, 0)


def test_concurrent_requests_all_complete(engine):
    async def main():
        reqs = [_request(engine, 8, f"number {i}") for i in range(12)]
        return await asyncio.gather(*(_run(engine, r) for r in reqs)), reqs

    results, reqs = asyncio.run(main())
    assert all(ev[-1] == ("done", "length") for ev in results)
    assert [r.generated for r in reqs] == [8] * 12
    assert (engine.waiting, engine.running) == (0, 0)
