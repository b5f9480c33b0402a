"""The status work queue and controller loop with an injected clock and plain dicts as indexes."""

from __future__ import annotations

import asyncio

import pytest
from ovserve_operator import memory
from ovserve_operator import statusqueue as sq
from ovserve_operator.rules import ApplyError


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


A, B = ("ns", "a"), ("ns", "b")


def test_dirty_due_and_gone():
    clock = FakeClock()
    q = sq.WorkQueue(5.0, clock)
    q.activate(A)
    q.activate(B)
    # first pass: both are due (never refreshed)
    assert q.take({A, B}) == ([A, B], [])
    assert q.take({A, B}) == ([], [])
    clock.t += 2.0
    q.mark(A)
    assert q.wake.is_set()
    assert q.take({A, B}) == ([A], [])
    clock.t += 3.0
    assert q.take({A, B}) == ([B], [])  # A was refreshed later, B is due
    assert q.wait_s() == pytest.approx(2.0)
    # B deleted: forgotten, reported once
    assert q.take({A}) == ([], [B])
    assert B not in q.active and B not in q.due
    assert q.take({A}) == ([], [])


def test_not_activated_is_never_refreshed():
    q = sq.WorkQueue(5.0, FakeClock())
    q.mark(A)  # index event before create/resume ran: wait for the handler
    assert q.take({A}) == ([], [])


def test_wait_is_bounded():
    clock = FakeClock()
    q = sq.WorkQueue(5.0, clock)
    assert q.wait_s() == 5.0
    q.activate(A)
    q.take({A})
    clock.t += 10
    assert q.wait_s() == 0.05


@pytest.mark.parametrize(
    "applied_at,drifted,now,want",
    [
        (None, True, 100.0, False),  # first look: start counting
        (60.0, True, 100.0, True),
        (80.0, True, 100.0, False),
        (10.0, False, 100.0, False),
    ],
)
def test_reapply_due(applied_at, drifted, now, want):
    m = memory.Memory(readback=None)  # type: ignore[arg-type]
    m.applied_at = applied_at
    assert memory.reapply_due(m, drifted, now, 30.0) is want


def test_reapply_at_once_when_the_refused_spec_was_changed():
    m = memory.Memory(readback=None)  # type: ignore[arg-type]
    m.applied_at = 95.0
    m.apply_error = ApplyError(2, 422, "Deployment/x", "invalid")
    assert memory.reapply_due(m, True, 100.0, 30.0, generation=2) is False  # same refused spec: wait
    assert memory.reapply_due(m, True, 100.0, 30.0, generation=3) is True  # fixed by the user: now


def refused(attempted: int, at: float) -> dict:
    """Memory fields: generation 2 was refused; `attempted` tried last, at `at`."""
    return {
        "attempted_generation": attempted,
        "applied_at": at,
        "apply_error": ApplyError(2, 422, "Deployment/x", "no"),
    }


# memory fields, the generation seen now, then whether the sync pass applies that generation's children at t=100
# (a refusal retried after 60 s, any other failure after 5 s, both counted from the try)
GENERATION_APPLY = {
    "never looked at (a create, or a new leader's first look)": ({}, 1, True),
    "applied: nothing to do": ({"applied_generation": 1, "attempted_generation": 1, "applied_at": 10.0}, 1, False),
    "a new spec: at once, however recent the last apply": (
        {"applied_generation": 1, "attempted_generation": 1, "applied_at": 99.0},
        2,
        True,
    ),
    "an apply queued or running": ({"applying": 1, "applied_generation": 1, "attempted_generation": 1}, 2, False),
    "failed 2 s ago: wait": ({"attempted_generation": 2, "applied_at": 98.0}, 2, False),
    "failed 6 s ago: again": ({"attempted_generation": 2, "applied_at": 94.0}, 2, True),
    "refused 30 s ago: wait": (refused(attempted=2, at=70.0), 2, False),
    "refused 61 s ago: again": (refused(attempted=2, at=39.0), 2, True),
    "refused, then the user fixed the spec: at once": (refused(attempted=2, at=99.0), 3, True),
    "an older refusal does not slow a later failure's retry": (refused(attempted=3, at=94.0), 3, True),
}


@pytest.mark.parametrize("fields,generation,want", list(GENERATION_APPLY.values()), ids=list(GENERATION_APPLY))
def test_generation_apply_due(fields, generation, want):
    m = memory.Memory(readback=None, **fields)  # type: ignore[arg-type]
    assert memory.generation_apply_due(m, generation, 100.0, 60.0, 5.0) is want


BASE = {"phase": "Ready", "computedAt": "2026-12-03T07:00:00Z"}
LATER = "2026-12-04T07:00:00Z"  # a day later: no heartbeat, however long nothing changes


@pytest.mark.parametrize(
    "new,current,last,want",
    [
        ({**BASE, "computedAt": LATER}, BASE, None, False),  # nothing changed: no write, ever
        ({**BASE, "computedAt": LATER}, BASE, BASE, False),  # ... also after a write of ours
        ({**BASE, "previous": None}, BASE, None, False),  # a null field is an absent one
        ({**BASE, "phase": "Failed"}, BASE, None, True),  # changed
        ({**BASE, "computedAt": LATER}, {"phase": "Ready"}, None, True),  # never stamped: once
        ({**BASE, "computedAt": LATER}, BASE, {"phase": "Loading"}, True),  # our write was lost
    ],
)
def test_needs_patch(new, current, last, want):
    assert sq.needs_patch(new, current, last) is want


def snapshot(rv: str, status: dict) -> dict:
    return {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv}, "status": status}


@pytest.mark.parametrize(
    "rv,last,patched_over,want",
    [
        ("7", None, None, {"phase": "Loading"}),  # nothing written yet: the snapshot
        ("7", {"phase": "Ready"}, "7", {"phase": "Ready"}),  # the index has not seen our write yet: our write
        ("8", {"phase": "Ready"}, "7", {"phase": "Loading"}),  # a later version (ours or anyone's): the snapshot
        ("7", None, "7", {"phase": "Loading"}),  # our write failed since (forgotten): the snapshot
    ],
)
def test_stored_status(rv, last, patched_over, want):
    m = memory.Memory(readback=None, last_status=last, patched_over=patched_over)  # type: ignore[arg-type]
    assert sq.stored_status(snapshot(rv, {"phase": "Loading"}), m) == want


def test_memories_created_and_forgotten():
    ms = memory.Memories(30.0)
    ms[A].last_status = {"phase": "Ready"}
    assert ms.get(A).last_status == {"phase": "Ready"}
    ms.forget(A)
    assert ms.get(A) is None and ms[A].last_status is None


@pytest.mark.parametrize("applying,want", [(0, True), (1, False), (2, False)])
def test_no_reapply_or_revert_while_an_apply_is_queued(applying, want):
    m = memory.Memory(readback=None)  # type: ignore[arg-type]
    m.applied_at, m.applying = 60.0, applying
    assert memory.reapply_due(m, True, 100.0, 30.0) is want
    assert memory.revert_due(m, 100.0, 30.0) is want
    assert (m.reverted_at is not None) is want  # a revert not done is not recorded


def test_a_hand_edit_is_reverted_at_once_then_at_most_every_30_s():
    m = memory.Memories(30.0).of(A, "u")
    assert memory.revert_due(m, 100.0, 30.0) is True
    assert memory.revert_due(m, 110.0, 30.0) is False  # someone keeps editing: not a tight fight
    assert memory.revert_due(m, 131.0, 30.0) is True


def test_memory_is_per_uid_a_namesake_starts_afresh():
    ms = memory.Memories(30.0)
    old = ms.of(A, "uid-1")
    old.last_status = {"phase": "Failed"}
    old.apply_error = ApplyError(1, 422, "Deployment/a", "bad")
    assert ms.of(A, "uid-1") is old
    new = ms.of(A, "uid-2")  # deleted and re-created under the same name
    assert new is not old and new.last_status is None and new.apply_error is None and new.uid == "uid-2"


def test_missing_children_only_once_seen_or_applied_long_ago():
    m = memory.Memories(30.0).of(A, "u")
    m.applied_at = 100.0
    # right after the first apply, before the watch shows them: not missing yet
    assert memory.missing_children(m, ["Deployment", "Service"], now=101.0) == []
    assert memory.missing_children(m, ["Deployment", "Service"], now=111.0) == ["Deployment", "Service"]
    m2 = memory.Memories(30.0).of(A, "u")
    m2.applied_at = 100.0
    assert memory.missing_children(m2, [], now=101.0) == []  # both seen
    assert memory.missing_children(m2, ["Service"], now=102.0) == ["Service"]  # deleted: at once


def test_controller_cycle_refreshes_due_and_survives_errors():
    async def scenario():
        clock = FakeClock()
        q = sq.WorkQueue(5.0, clock)
        index = {A: [{"n": "a"}], B: [{"n": "b"}]}
        seen: list[tuple] = []
        errors: list = []
        gone: list = []
        counts: list[int] = []

        async def refresh(key, snap):
            seen.append((key, snap["n"]))
            if key == B:
                raise RuntimeError("boom")

        c = sq.StatusController(
            q,
            index,
            refresh,
            on_gone=gone.append,
            on_cycle=counts.append,
            on_error=lambda k, e: errors.append((k, str(e))),
            coalesce_s=0,
        )
        q.activate(A)
        q.activate(B)
        assert await c.cycle() == [A, B]
        await c.drain()
        assert seen == [(A, "a"), (B, "b")] and errors == [(B, "boom")] and counts == [2]
        # nothing due: nothing refreshed; a mark wakes the sleeper at once
        assert await c.cycle() == []
        q.mark(A)
        await asyncio.wait_for(c.sleep(), 1.0)
        assert await c.cycle() == [A]
        await c.drain()
        del index[B]
        await c.cycle()
        assert gone == [B]

    asyncio.run(scenario())


async def settle() -> None:
    """Let started refreshes (and their done callbacks) run: a few loop iterations."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_slow_refresh_never_holds_the_loop_or_runs_twice():
    """A pod that never answers makes its object's refresh slow: the passes (and so the heartbeat) go on,
    other objects are refreshed, the slow one is not started again while running, and a mark that came
    meanwhile refreshes it once more when it finishes. A refresh past its time box is an error."""

    async def scenario():
        clock = FakeClock()
        q = sq.WorkQueue(5.0, clock)
        index = {A: [{"n": "a"}], B: [{"n": "b"}]}
        release = asyncio.Event()
        started: list = []
        errors: list = []
        beats: list[int] = []

        async def refresh(key, _snap):
            started.append(key)
            if key == A:
                await release.wait()

        c = sq.StatusController(
            q, index, refresh, on_cycle=beats.append, on_error=lambda k, e: errors.append((k, str(e))), coalesce_s=0
        )
        q.activate(A)
        q.activate(B)
        assert await c.cycle() == [A, B]
        for _ in range(3):  # A hangs; B is due again every interval; every pass beats
            await settle()
            clock.t += 5.0
            assert await c.cycle() == [B]
        await settle()
        assert started.count(A) == 1 and started.count(B) == 4 and len(beats) == 4
        release.set()
        await settle()
        assert A not in c.in_flight and q.wake.is_set()  # it was due meanwhile: marked again
        assert await c.cycle() == [A]
        await c.drain()
        # a refresh beyond its time box is reported, and the key is free again
        release.clear()
        c.refresh_timeout_s = 0.05
        q.mark(A)
        assert await c.cycle() == [A]
        await c.drain()
        assert errors and errors[-1][0] == A and "more than 0.05 s" in errors[-1][1]
        assert not c.in_flight

    asyncio.run(scenario())


def keys(spec: str) -> list[tuple[str, str]]:
    """'a1 a2 b1' -> [('a', 'a1'), ('a', 'a2'), ('b', 'b1')]: the namespace is the first letter."""
    return [(k[0], k) for k in spec.split()]


@pytest.mark.parametrize(
    "pending,running,slots,reserve,want",
    [
        # one namespace alone: all slots but the reserve
        ("a1 a2 a3 a4 a5", "", 4, 1, "a1 a2 a3"),
        ("a1 a2", "", 4, 1, "a1 a2"),
        # a slow tenant already holds its cap: the other tenant gets the free slots at once
        ("a4 a5 b1 b2", "a1 a2 a3", 4, 1, "b1"),
        ("a9 b1 b2 b3", "a1 a2 a3 a4 a5 a6 a7 a8 a9", 16, 4, "b1 b2 b3"),
        # two tenants share fairly: round-robin, the one running fewest first
        ("a1 a2 a3 b1 b2 b3", "", 4, 1, "a1 b1 a2 b2"),
        ("a2 a3 b1 b2 b3", "a1", 4, 1, "b1 a2 b2"),
        # three tenants, 16 slots: ceil(16/3) = 6 each at most
        (" ".join(f"a{i}" for i in range(10)) + " b1 c1", "", 16, 4, "a0 b1 c1 a1 a2 a3 a4 a5"),
        # full: nothing starts; running keys are never started twice
        ("b1", "a1 a2 a3 b2", 4, 1, ""),
        ("a1 b1", "a1", 4, 1, "b1"),
        ("", "a1", 4, 1, ""),
        # a reserve as large as the slots still lets one run
        ("a1 a2", "", 2, 2, "a1"),
    ],
)
def test_fair_pick(pending, running, slots, reserve, want):
    assert sq.fair_pick(keys(pending), set(keys(running)), slots, reserve) == keys(want)


def test_one_tenants_slow_pods_cannot_hold_every_slot():
    """16 slow refreshes in namespace `slow` (pods that never answer) take 12 slots; `fast`'s objects
    are refreshed meanwhile, and a waiting slow object takes a slot as soon as one frees."""

    async def scenario():
        clock = FakeClock()
        q = sq.WorkQueue(5.0, clock)
        slow = [("slow", f"s{i:02}") for i in range(16)]
        fast = [("fast", f"f{i}") for i in range(3)]
        index = {k: [{}] for k in slow + fast}
        release = asyncio.Event()
        done: list = []

        async def refresh(key, _snap):
            if key[0] == "slow":
                await release.wait()
            done.append(key)

        c = sq.StatusController(q, index, refresh, concurrency=16, coalesce_s=0)
        for k in slow:
            q.activate(k)
        started = await c.cycle()
        assert started == slow[:12] and list(c.pending) == slow[12:]
        for k in fast:
            q.activate(k)
            q.mark(k)
        assert await c.cycle() == fast
        await settle()
        assert done == fast  # refreshed while every slow one still waits for its pods
        release.set()
        await c.drain()
        assert sorted(done[3:]) == sorted(slow) and not c.pending and not c.in_flight

    asyncio.run(scenario())


def test_a_marked_object_goes_ahead_of_the_resync_backlog():
    """More objects due for their resync than the slots refresh: an object marked meanwhile (an edit, a pod
    event) takes the next free slot, ahead of every object only due; the backlog keeps its order."""

    async def scenario():
        q = sq.WorkQueue(5.0, FakeClock())
        objs = [("a", f"a{i}") for i in range(8)]
        index = {k: [{}] for k in objs}
        release = asyncio.Event()
        started: list = []

        async def refresh(key, _snap):
            started.append(key)
            await release.wait()

        c = sq.StatusController(q, index, refresh, concurrency=4, reserve=1, coalesce_s=0)
        for k in objs:
            q.activate(k)
        assert await c.cycle() == objs[:3]  # three slots (one is the reserve); five wait, only due
        q.mark(objs[7])
        assert await c.cycle() == []  # no slot free yet
        assert list(c.pending) == [objs[7], *objs[3:7]]
        release.set()
        await c.drain()
        assert started == [*objs[:3], objs[7], *objs[3:7]]

    asyncio.run(scenario())


def _refresh_gaps(n: int, interval: float, rate: float, horizon: float = 200.0) -> tuple[float, int]:
    """Drive a WorkQueue the way the controller does (take, then sleep wait_s) for `horizon` seconds:
    (the mean gap between two resyncs of one object, the most resyncs taken in any one second)."""
    clock = FakeClock()
    q = sq.WorkQueue(interval, clock, resync_per_s=rate)
    keys = [("ns", f"o{i:05d}") for i in range(n)]
    for k in keys:
        q.activate(k)
    present = set(keys)
    assert sorted(q.take(present)[0]) == keys  # first refreshes: all at once, never budgeted
    start, last, gaps, per_second = clock.t, {k: clock.t for k in keys}, [], {}
    while clock.t < start + horizon:
        clock.t += q.wait_s()
        taken, _ = q.take(present)
        second = int(clock.t - start)
        per_second[second] = per_second.get(second, 0) + len(taken)
        for k in taken:
            gaps.append(clock.t - last[k])
            last[k] = clock.t
    return sum(gaps) / len(gaps), max(per_second.values())


@pytest.mark.parametrize(
    "n,interval,rate,period,burst",
    [
        (10, 5.0, 50.0, 5.0, 10),  # few objects: the interval, the budget does not bind
        (1000, 5.0, 50.0, 20.0, 50),  # 1,000 objects at 50 a second: every 20 s, never more than 50 a second
        (200, 5.0, 20.0, 10.0, 20),
        (1000, 5.0, 0.0, 5.0, 1000),  # no budget: the interval, in bursts of every object
    ],
)
def test_resync_budget_grows_the_period_not_the_rate(n, interval, rate, period, burst):
    mean_gap, most = _refresh_gaps(n, interval, rate)
    assert mean_gap == pytest.approx(period, rel=0.1)
    assert most <= burst + (rate or 0)  # a second's worth of budget, plus what refilled within that second


@pytest.mark.parametrize("rate,wait", [(1.0, 1.0), (4.0, 0.5), (50.0, 0.5), (500.0, 0.5)])
def test_resyncs_held_by_the_budget_go_in_batches(rate, wait):
    clock = FakeClock()
    q = sq.WorkQueue(5.0, clock, resync_per_s=rate)
    keys = [("ns", f"k{i}") for i in range(2000)]
    for k in keys:
        q.activate(k)
    q.take(set(keys))  # first refreshes: not budgeted
    clock.t += 5.0
    q.take(set(keys))  # the budget's first second
    assert q.wait_s() == pytest.approx(wait)  # not one pass per token: each pass walks every object
    clock.t += q.wait_s()
    taken, _ = q.take(set(keys))
    assert len(taken) == max(1, int(rate * wait))


def test_marks_and_first_refreshes_are_not_held_back_by_the_budget():
    clock = FakeClock()
    q = sq.WorkQueue(5.0, clock, resync_per_s=1.0)
    for k in (A, B):
        q.activate(k)
    assert q.take({A, B}) == ([A, B], [])
    clock.t += 5.0
    assert q.take({A, B}) == ([A], [])  # both due, one token: the older (then by name) goes
    assert q.wait_s() == pytest.approx(1.0)  # B waits for the next token, not the next interval
    q.mark(B)
    assert q.take({A, B}) == ([B], [])  # a mark is taken with no budget left
    C = ("ns", "c")
    q.activate(C)
    assert q.take({A, B, C}) == ([C], [])  # so is a new object's first refresh
