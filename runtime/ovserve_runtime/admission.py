"""Admission control of the HTTP side: a bounded number of requests accepted but not yet generating.

A request is admitted (counted in `inflight`) when its handler starts and released when the handler ends.
The engine generates for at most `capacity` of them at once (max_num_seqs for continuous batching, one for
the legacy pipeline); the rest wait: being parsed or tokenized, or in the engine's queue. At most
`max_queued` may wait: beyond `capacity + max_queued` in flight the server answers 429 with Retry-After
instead of letting latency grow without bound. The bound is exact (counted here, on the event loop); the
queue-depth metric is the engine's own count (`inflight - running`). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Retry-After bounds, seconds: at least one (clients must not spin), at most a minute (a stale estimate
# must not park clients for long)
RETRY_AFTER_MIN = 1
RETRY_AFTER_MAX = 60
# weight of the newest request duration in the moving mean that Retry-After is estimated from
DURATION_EWMA = 0.2


def retry_after_seconds(queued: int, running: int, mean_duration_s: float | None) -> int:
    """Seconds until a place in the queue is likely free: the queue ahead drains `running` at a time,
    one mean request duration per round."""
    if mean_duration_s is None or mean_duration_s <= 0:
        return RETRY_AFTER_MIN
    rounds = (queued + 1) / max(running, 1)
    return max(RETRY_AFTER_MIN, min(RETRY_AFTER_MAX, math.ceil(rounds * mean_duration_s)))


@dataclass
class Admission:
    """Counts admitted requests; at most `capacity + max_queued` at once (max_queued 0: no waiting room)."""

    max_queued: int
    capacity: int = 1
    inflight: int = 0
    mean_duration_s: float | None = None

    @property
    def limit(self) -> int:
        return max(1, self.capacity) + max(0, self.max_queued)

    def queued(self, running: int) -> int:
        return max(0, self.inflight - running)

    def try_admit(self) -> bool:
        if self.inflight >= self.limit:
            return False
        self.inflight += 1
        return True

    def release(self) -> None:
        self.inflight = max(0, self.inflight - 1)

    def observe(self, duration_s: float) -> None:
        """The duration of a request that generated (refusals and errors would skew the estimate)."""
        if duration_s > 0:
            m = self.mean_duration_s
            self.mean_duration_s = duration_s if m is None else m + DURATION_EWMA * (duration_s - m)

    def retry_after(self, running: int) -> int:
        return retry_after_seconds(self.queued(running), running, self.mean_duration_s)
