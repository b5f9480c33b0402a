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
