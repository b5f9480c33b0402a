"""SSEWriter: a stream of server-sent events on aiohttp's own StreamResponse.

aiohttp frames the body (chunked transfer encoding); this writer adds none of its own. Two ways to write:
`await write(data)` (waits while the client is behind), and `write_now(data)`, a write that cannot wait,
for the engine's delivery callback (the per-request sink): it writes only when the connection takes the
bytes at once (nothing buffered in aiohttp's transport, no write of the handler pending), through aiohttp's
payload writer with drain=False, whose write completes without suspending.
"""

from __future__ import annotations

from aiohttp import web

HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class SSEWriter:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=HEADERS)
        self.busy = False  # the handler's write is waiting for the client
        self._transport = None
        self._writer = None

    async def open(self) -> None:
        await self.response.prepare(self.request)
        self._transport = self.request.transport
        self._writer = self.request.writer  # aiohttp's payload writer: chunked framing, counters

    def can_write_now(self) -> bool:
        t = self._transport
        # the kernel's buffer is full when aiohttp's transport holds bytes: a write would wait for the client
        return not self.busy and t is not None and not t.is_closing() and not t.get_write_buffer_size()

    def write_now(self, data: bytes) -> None:
        """Write without waiting (call only when can_write_now())."""
        coro = self._writer.write(data, drain=False)
        try:
            coro.send(None)
        except StopIteration:
            return
        coro.close()  # not reached with drain=False; never leave a half-run write behind
        raise RuntimeError("aiohttp's payload write suspended with drain=False")

    async def write(self, data: bytes) -> None:
        self.busy = True
        try:
            await self.response.write(data)  # the first one also sends the headers
        finally:
            self.busy = False

    async def close(self, data: bytes) -> None:
        """The last events and the end of the body, in one write."""
        await self.response.write_eof(data)
