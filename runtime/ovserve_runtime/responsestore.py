"""The per-pod store of Responses (`store: true`, the default): what `previous_response_id` continues from and
`GET` / `DELETE /v1/responses/{id}` read.

Bounded three ways (flags): entries (--responses-store-entries), bytes (--responses-store-bytes: the JSON of
the kept conversation items and response objects) and age (--responses-store-ttl-seconds); the oldest entry
goes first. An id that was never stored here, or was evicted, is a miss: the caller answers 404 naming
`previous_response_id`, never a silent fresh start. Behind a Service with several replicas the store is per
pod: docs/runtime.md says what that means (route a conversation to one pod, or send the history itself with
`store: false`).

Each entry keeps the conversation up to and including that response (its input items after the history of
its own previous_response_id, then its output items), so a chain of ids costs no lookups of older entries.
No I/O, no locks: it lives on the event loop.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]  # the response object as answered
    conversation: tuple[dict[str, Any], ...]  # input items, history first, then this response's output items
    size: int
    at: float


class ResponseStore:
    def __init__(
        self, max_entries: int, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries, self.max_bytes, self.ttl_s = max_entries, max_bytes, ttl_s
        self.clock = clock
        self._entries: OrderedDict[str, Stored] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, rid: str, response: dict[str, Any], conversation: list[dict[str, Any]]) -> bool:
        """Keep a response; False when it alone is larger than the store (it is then not kept)."""
        size = len(json.dumps(response)) + len(json.dumps(conversation))
        self._expire()
        if size > self.max_bytes or self.max_entries <= 0:
            return False
        self.delete(rid)
        self._entries[rid] = Stored(response, tuple(conversation), size, self.clock())
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def get(self, rid: str) -> Stored | None:
        self._expire()
        return self._entries.get(rid)

    def delete(self, rid: str) -> bool:
        if rid not in self._entries:
            return False
        self._drop(rid)
        return True

    def _drop(self, rid: str) -> None:
        self._bytes -= self._entries.pop(rid).size

    def _expire(self) -> None:
        cutoff = self.clock() - self.ttl_s
        while self._entries and next(iter(self._entries.values())).at < cutoff:
            self._drop(next(iter(self._entries)))
