"""engine.Events: a request's event queue on the loop (order, waiting, a cancelled handler, emptiness)."""

from __future__ import annotations

import asyncio

import pytest
from ovserve_runtime.engine import Events


def test_order_waiting_and_emptiness():
    async def main():
        ev = Events()
        assert ev.empty()
        with pytest.raises(asyncio.QueueEmpty):
            ev.get_nowait()
        ev.put_nowait(1)
        ev.put_nowait(2)
        assert not ev.empty() and await ev.get() == 1 and ev.get_nowait() == 2 and ev.empty()
        waiting = asyncio.ensure_future(ev.get())
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing queued: it waits
        asyncio.get_running_loop().call_later(0.01, ev.put_nowait, "late")
        assert await asyncio.wait_for(waiting, 1) == "late"

    asyncio.run(main())


def test_a_cancelled_getter_does_not_lose_the_next_event():
    async def main():
        ev = Events()
        gone = asyncio.ensure_future(ev.get())
        await asyncio.sleep(0)
        gone.cancel()  # the client went away while its handler waited
        await asyncio.gather(gone, return_exceptions=True)
        ev.put_nowait("x")  # its waiter is cancelled: no error, the event stays queued
        assert await asyncio.wait_for(ev.get(), 1) == "x"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("accepts", "events", "sunk", "queued"),
    [
        # the sink takes tokens while nothing is queued; the end is always queued (it wakes the handler)
        ([True, True], [("tokens", [1]), ("tokens", [2]), ("done", "stop")], [[1], [2]], [("done", "stop")]),
        # a decline queues the tokens, and everything after them queues too until the handler empties the queue
        (
            [False, True],
            [("tokens", [1]), ("tokens", [2]), ("done", "length")],
            [],
            [("tokens", [1]), ("tokens", [2]), ("done", "length")],
        ),
        (
            [True, False, True],
            [("tokens", [1]), ("tokens", [2]), ("tokens", [3])],
            [[1]],
            [("tokens", [2]), ("tokens", [3])],
        ),
        # errors never go through the sink
        ([True], [("error", "boom")], [], [("error", "boom")]),
    ],
)
def test_deliver_keeps_a_requests_order_through_its_sink(accepts, events, sunk, queued):
    from ovserve_runtime.engine import GenRequest, deliver

    answers, got = iter(accepts), []

    def sink(ids):
        ok = next(answers)
        if ok:
            got.append(ids)
        return ok

    req = GenRequest(config=None, max_new_tokens=4, events=Events(), sink=sink)
    for kind, value in events:
        deliver(req, kind, value)
    assert got == sunk
    assert [req.events.get_nowait() for _ in range(len(queued))] == queued and req.events.empty()
