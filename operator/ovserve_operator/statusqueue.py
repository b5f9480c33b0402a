"""The status work queue: which LLMServing to refresh when, and what is remembered between cycles.

Kept out of the controller (controller.py) so that it can be tested alone: the clock and the caches are injected.

- `WorkQueue`: dirty marks (a watch event) and due times (every `interval`); forgets deleted objects. The
  periodic resync has a budget (`resync_per_s`, a token bucket): at thousands of objects the period grows to
  objects / budget instead of the operator's CPU; marks and an object's first refresh are never held back.
- `needs_patch`: write only when the status changed (never a heartbeat: an object whose facts did not
  change is not written); `stored_status`: what is stored, when the cache has not caught up with our write.
- `StatusController`: the loop: take what is marked or due, start its refresh (bounded concurrency, each
  refresh time-boxed; a marked object ahead of those only due for the resync), sleep until the next due
  time or a wake-up. A pass never waits for the refreshes it started, so the loop's liveness beat
  (`on_cycle`) tells that the loop runs, not how slow the slowest pod answers; an object whose refresh is
  still running is not started twice (a mark meanwhile refreshes it after).
- `fair_pick`: which waiting objects take the free refresh slots: shared fairly between namespaces, so one
  tenant whose pods are slow to answer (each refresh waiting out its readback deadline) cannot hold every
  slot while another tenant's objects wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from . import status
from .memory import Memory

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
RESYNC_BATCH_S = 0.5  # resyncs held by the budget go in batches of this many seconds' worth of tokens
Clock = Callable[[], float]


class WorkQueue:
    """Dirty and due bookkeeping (no I/O). `clock` is monotonic seconds."""

    def __init__(self, interval_s: float, clock: Clock = time.monotonic, resync_per_s: float = 0.0) -> None:
        self.interval = interval_s
        self.clock = clock
        self.rate = resync_per_s  # resync refreshes a second at most; 0: no budget
        self.tokens = max(1.0, resync_per_s)  # a second's worth may go at once
        self.filled_at = clock()
        self.active: set[Key] = set()  # seen by the LLMServings' reflector
        self.dirty: set[Key] = set()
        self.due: dict[Key, float] = {}
        self.wake = asyncio.Event()

    def activate(self, key: Key) -> None:
        self.active.add(key)

    def mark(self, key: Key) -> None:
        """Refresh `key` at the next cycle (call from the event loop only)."""
        self.dirty.add(key)
        self.wake.set()

    def take_marked(
        self, present: Collection[Key], held: Collection[Key] = ()
    ) -> tuple[list[Key], list[Key], list[Key]]:
        """(keys marked dirty, keys only due for the resync, keys gone since the last call). Schedules the
        next due time of the first two. `held` keys are present but not to be refreshed yet (their cache is
        not in sync, cache.ListGate): neither taken nor gone, their mark kept."""
        now = self.clock()
        here = {k for k in self.active if k in present}
        gone = sorted(self.active - here)
        for k in gone:
            self.active.discard(k)
            self.dirty.discard(k)
            self.due.pop(k, None)
        here.difference_update(held)
        marked = sorted(k for k in here if k in self.dirty)
        due = sorted(k for k in here if k not in self.dirty and self.due.get(k, 0.0) <= now)
        if self.rate > 0:
            # never refreshed: not a resync, not budgeted; the rest oldest first, as many as the budget allows
            first = [k for k in due if k not in self.due]
            later = sorted((k for k in due if k in self.due), key=lambda k: (self.due[k], k))
            self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.filled_at) * self.rate)
            self.filled_at = now
            n = min(len(later), int(self.tokens))
            self.tokens -= n
            due = sorted(first + later[:n])  # the others stay overdue: taken when the budget allows
        self.dirty.difference_update(marked)
        for k in marked + due:
            self.due[k] = now + self.interval
        return marked, due, gone

    def take(self, present: Collection[Key]) -> tuple[list[Key], list[Key]]:
        """(keys to refresh now, marked ones first; keys gone since the last call)."""
        marked, due, gone = self.take_marked(present)
        return marked + due, gone

    def wait_s(self) -> float:
        """Seconds until the next due time, or, while resyncs wait for the budget, until half a second's
        worth of tokens has refilled (at most `interval`, at least 50 ms). In batches: a pass costs a walk
        of every object, so one pass per token (50 a second) cost 38 % of a core at 5,000 objects for the
        same 50 refreshes a second. A mark wakes the loop at once whatever this says."""
        now = self.clock()
        waits = [d - now for d in self.due.values()]
        if self.rate > 0 and any(w <= 0 for w in waits):
            batch = min(max(1.0, self.rate), max(1.0, self.rate * RESYNC_BATCH_S))
            waits = [w for w in waits if w > 0] + [(batch - self.tokens) / self.rate]
        return max(0.05, min([*waits, self.interval]))


def needs_patch(new: Mapping[str, Any], current: Mapping[str, Any], last: Mapping[str, Any] | None) -> bool:
    """Write when `new` differs from what is stored (or from what we last wrote), `computedAt` aside: an
    object whose facts did not change is never written, however long it stays so (docs/operator.md, status
    freshness). A stored status never stamped is stamped once."""
    if not status.same(new, current) or (last is not None and not status.same(new, last)):
        return True
    return not current.get("computedAt")


def stored_status(snapshot: Mapping[str, Any], memory: Memory) -> dict[str, Any]:
    """What the apiserver stores as the status of `snapshot` (a cached snapshot), as far as is known: the
    status we last wrote when the snapshot is still the very version that write was computed from (the
    cache has not seen our write's echo yet: comparing with it would write the same status twice)."""
    meta = snapshot.get("metadata") or {}
    rv = meta.get("resourceVersion")
    if memory.last_status is not None and rv is not None and rv == memory.patched_over:
        return copy.deepcopy(memory.last_status)
    return copy.deepcopy(dict(snapshot.get("status") or {}))


def fair_pick(pending: Sequence[Key], running: Collection[Key], slots: int, reserve: int) -> list[Key]:
    """The pending keys to start now, in start order (pure).

    At most `slots` run at once. A namespace may run at most its fair share, ceil(slots / namespaces with
    work, pending or running), and never more than slots - reserve: a slot or more always stays free for
    another namespace's objects, however slow one namespace's refreshes are. Free slots go round-robin,
    to the namespace running fewest first (ties: the one that has waited longest), each namespace's keys
    in their pending order."""
    by_ns: dict[str, list[Key]] = {}
    for k in pending:
        if k not in running:
            by_ns.setdefault(k[0], []).append(k)
    load = Counter(k[0] for k in running)
    namespaces = set(by_ns) | set(load)
    if not namespaces:
        return []
    cap = max(1, min(-(-slots // len(namespaces)), slots - reserve))
    order = {ns: i for i, ns in enumerate(by_ns)}
    free = slots - len(running)
    out: list[Key] = []
    while free > 0:
        candidates = [ns for ns, keys in by_ns.items() if keys and load[ns] < cap]
        if not candidates:
            break
        ns = min(candidates, key=lambda n: (load[n], order[n]))
        out.append(by_ns[ns].pop(0))
        load[ns] += 1
        free -= 1
    return out


Refresh = Callable[[Key, dict[str, Any]], Awaitable[Any]]


class StatusController:
    """Refresh dirty LLMServings at once and every one at least every `queue.interval` seconds.

    `index` maps a key to its snapshots (a cache.Cache, or a dict in tests); `refresh(key, snapshot)`
    does one object's cycle (at most `refresh_timeout_s`); `on_gone(key)` is told about deleted objects;
    a key that is not `ready(key)` (its children not all in the cache yet) waits, its mark kept;
    `on_cycle(count)` after each pass. At most `concurrency` refreshes run at once, shared between
    namespaces by `fair_pick` (`reserve` slots never go to a single namespace); the rest wait, in order.
    """

    def __init__(
        self,
        queue: WorkQueue,
        index: Mapping[Key, Any],
        refresh: Refresh,
        *,
        on_gone: Callable[[Key], None] = lambda _k: None,
        on_cycle: Callable[[int], None] = lambda _n: None,
        on_error: Callable[[Key, BaseException], None] = lambda _k, _e: None,
        ready: Callable[[Key], bool] = lambda _k: True,
        concurrency: int = 16,
        reserve: int | None = None,
        coalesce_s: float = 0.2,
        refresh_timeout_s: float = 60.0,
    ) -> None:
        self.queue, self.index, self.refresh = queue, index, refresh
        self.on_gone, self.on_cycle, self.on_error, self.ready = on_gone, on_cycle, on_error, ready
        self.concurrency = concurrency
        self.reserve = max(1, concurrency // 4) if reserve is None else reserve
        self.pending: dict[Key, None] = {}  # due or marked, waiting for a slot (ordered)
        self.coalesce_s = coalesce_s
        self.refresh_timeout_s = refresh_timeout_s
        self.in_flight: dict[Key, asyncio.Task] = {}
        self._again: set[Key] = set()  # due or marked while in flight: refresh once more when done

    async def _one(self, key: Key) -> None:
        snaps = list(self.index.get(key, []))
        if not snaps:
            return
        try:
            await asyncio.wait_for(self.refresh(key, snaps[0]), self.refresh_timeout_s)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self.on_error(key, TimeoutError(f"status refresh took more than {self.refresh_timeout_s:g} s"))
        except Exception as e:
            self.on_error(key, e)

    def _done(self, key: Key) -> None:
        self.in_flight.pop(key, None)
        if key in self._again:
            self._again.discard(key)
            self.queue.mark(key)
        if self.pending:
            self._dispatch()  # a slot freed: the next waiting object takes it now, not at the next pass

    def _dispatch(self) -> list[Key]:
        started = []
        for k in fair_pick(list(self.pending), self.in_flight.keys(), self.concurrency, self.reserve):
            del self.pending[k]
            task = asyncio.create_task(self._one(k), name=f"status {k[0]}/{k[1]}")
            task.add_done_callback(lambda _t, k=k: self._done(k))
            self.in_flight[k] = task
            started.append(k)
        return started

    async def cycle(self) -> list[Key]:
        """One pass: start the refresh of what is dirty or due. Returns the keys started."""
        self.queue.wake.clear()
        present = {k for k in self.queue.active if k in self.index}
        held = {k for k in present if not self.ready(k)}
        marked, due, gone = self.queue.take_marked(present, held)
        for k in gone:
            self.pending.pop(k, None)
            self.on_gone(k)
        # Something changed for a marked object: it goes ahead of every object waiting only for its resync
        # (when the resyncs of many objects exceed what the slots refresh in an interval, an edit or a pod
        # event must not wait behind that backlog).
        if urgent := [k for k in marked if k not in self.in_flight]:
            self.pending = {**dict.fromkeys(urgent), **{k: None for k in self.pending if k not in urgent}}
        for k in marked + due:
            if k in self.in_flight:
                self._again.add(k)
            else:
                self.pending.setdefault(k)
        started = self._dispatch()
        await asyncio.sleep(0)  # let the new refreshes start before the liveness beat
        self.on_cycle(len(present))
        return started

    async def drain(self) -> None:
        """Until every started refresh, and every one waiting for a slot, has finished (tests, shutdown)."""
        while self.in_flight:
            await asyncio.gather(*list(self.in_flight.values()), return_exceptions=True)

    async def sleep(self) -> None:
        """Until the next due time, or a wake-up (then a short pause that coalesces a burst)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.wake.wait(), self.queue.wait_s())
            await asyncio.sleep(self.coalesce_s)

    async def run(self) -> None:
        while True:
            try:
                await self.cycle()
                await self.sleep()
            except asyncio.CancelledError:
                for task in self.in_flight.values():
                    task.cancel()
                raise
            except Exception:  # never let one bad cycle stop the controller
                log.exception("status controller cycle failed")
                await asyncio.sleep(1)
