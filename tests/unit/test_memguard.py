"""Table tests of the engine's memory guard (ovserve_runtime.memguard): the growth it bounds and its budget."""

from __future__ import annotations

import pytest
from ovserve_runtime.memguard import Guard, cgroup_limit, rss_bytes

MIB = 1 << 20


@pytest.mark.parametrize(
    ("rss", "cache", "recycles"),
    [
        (1000 * MIB, 0, False),  # as at ready
        (1100 * MIB, 0, False),  # at the budget
        (1101 * MIB, 0, True),  # over it: compiled grammars
        (1600 * MIB, 600 * MIB, False),  # the KV cache grew by 600 MiB: legitimate, not counted
        (1800 * MIB, 600 * MIB, True),  # the cache's growth aside, 200 MiB more
        (900 * MIB, 0, False),  # shrank
        (None, 0, False),  # the process is gone: the engine's own failure path answers that
    ],
)
def test_growth_beyond_ready_less_the_kv_cache(rss, cache, recycles) -> None:
    g = Guard(100 * MIB)
    g.start(1000 * MIB, 0, None, None)
    why = g.check(rss, cache)
    assert (why is not None) is recycles
    if why:
        assert "--engine-memory-growth-bytes" in why and "MiB" in why


def test_off_and_before_ready() -> None:
    off = Guard(0)
    off.start(1000 * MIB, 0, None, None)
    assert off.check(10_000 * MIB, 0) is None
    assert Guard(100 * MIB).check(10_000 * MIB, 0) is None  # no baseline yet


@pytest.mark.parametrize(
    ("budget", "pod", "limit", "expected"),
    [
        (1024 * MIB, 1500 * MIB, None, 1024 * MIB),  # no limit: the flag
        (1024 * MIB, 1500 * MIB, 2000 * MIB, 400 * MIB),  # 0.8 of the 500 MiB the limit leaves
        (1024 * MIB, 1500 * MIB, 8000 * MIB, 1024 * MIB),  # the flag is lower
        (1024 * MIB, 2100 * MIB, 2000 * MIB, 1),  # already over the limit: any growth recycles
    ],
)
def test_a_cgroup_limit_caps_the_budget(budget, pod, limit, expected) -> None:
    g = Guard(budget)
    g.start(1000 * MIB, 0, pod, limit)
    assert g.budget == expected


def test_readers(tmp_path) -> None:
    import os

    assert rss_bytes(os.getpid()) > 0
    assert rss_bytes(2**22 + 12345) is None
    f = tmp_path / "memory.max"
    f.write_text("max\n")
    assert cgroup_limit(str(f)) is None
    f.write_text("2147483648\n")
    assert cgroup_limit(str(f)) == 2147483648
    assert cgroup_limit(str(tmp_path / "missing")) is None
