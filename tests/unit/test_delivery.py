"""A step's events reach each request on its own: an exception while delivering one request's output fails
that request only; the rest of the batch (a `done`, an `error`) is still delivered (issue 38, item 2).

Real GenRequests and the server's Events queue on a real event loop; the sinks are what StreamOutput.sink
would be, one of them failing as a broken writer or parser would.
"""

from __future__ import annotations

import asyncio
import threading

from ovserve_runtime.engine.request import Events, GenRequest, deliver, deliver_batch


def _req(loop: asyncio.AbstractEventLoop, sink=None) -> GenRequest:
    return GenRequest(config=None, max_new_tokens=8, loop=loop, events=Events(), sink=sink)


def _drain(req: GenRequest) -> list:
    out = []
    while not req.events.empty():
        out.append(req.events.get_nowait())
    return out


def _broken_sink(ids: list[int]) -> bool:
    raise RecursionError("maximum recursion depth exceeded (a sink's parser)")


async def _batch_with_a_broken_sink() -> tuple[list[GenRequest], threading.Event, list[list[int]]]:
    loop = asyncio.get_running_loop()
    taken: list[list[int]] = []
    ok, bad, other, failed = (
        _req(loop, lambda ids: taken.append(ids) or True),
        _req(loop, _broken_sink),
        _req(loop),
        _req(loop),
    )
    ev = threading.Event()
    batch = [
        (ok, "tokens", [1]),
        (bad, "tokens", [2]),
        (other, "tokens", [3]),
        (ok, "done", "stop"),
        (bad, "done", "stop"),
        (other, "done", "length"),
        (failed, "error", "pipeline failed: device lost"),  # a fatal's errors come in the same batch
    ]
    deliver_batch(loop, batch, ev)
    await asyncio.sleep(0)  # ev is set by a callback after the batch
    return [ok, bad, other, failed], ev, taken


def test_a_sink_that_raises_fails_its_request_only_and_the_batch_goes_on():
    (ok, bad, other, failed), ev, taken = asyncio.run(_batch_with_a_broken_sink())
    assert taken == [[1]] and _drain(ok) == [("done", "stop")]
    assert _drain(other) == [("tokens", [3]), ("done", "length")]
    assert _drain(failed) == [("error", "pipeline failed: device lost")]
    events = _drain(bad)
    assert events[0][0] == "error" and "RecursionError" in events[0][1], events
    assert bad.sink is None  # nothing more reaches it
    assert ev.is_set()  # the engine thread is told the step is out


def test_deliver_alone_answers_with_an_error_too():
    async def run() -> list:
        r = _req(asyncio.get_running_loop(), _broken_sink)
        deliver(r, "tokens", [1])
        deliver(r, "tokens", [2])
        return _drain(r)

    events = asyncio.run(run())
    assert [kind for kind, _ in events] == ["error"]  # what comes after the failure is dropped
