"""Admission control (pure): the in-flight bound and the Retry-After estimate."""

from __future__ import annotations

import pytest
from ovserve_runtime.admission import RETRY_AFTER_MAX, RETRY_AFTER_MIN, Admission, retry_after_seconds


@pytest.mark.parametrize(
    "queued,running,mean,expected",
    [
        (0, 0, None, RETRY_AFTER_MIN),  # nothing measured yet: the minimum
        (10, 2, 0.0, RETRY_AFTER_MIN),
        (0, 1, 0.3, 1),  # a place frees within one request duration, rounded up
        (3, 2, 2.0, 4),  # (3 + 1) / 2 rounds of 2 s
        (7, 0, 1.5, 12),  # nothing running counts as one at a time
        (1000, 1, 10.0, RETRY_AFTER_MAX),  # capped: a stale estimate must not park clients for long
    ],
)
def test_retry_after_seconds(queued, running, mean, expected):
    assert retry_after_seconds(queued, running, mean) == expected


@pytest.mark.parametrize(
    "max_queued,capacity,admitted",
    [(4, 2, 6), (0, 2, 2), (0, 1, 1), (3, 0, 4), (-1, 5, 5)],  # capacity is at least one; a negative queue is none
)
def test_admission_bound_is_capacity_plus_queue(max_queued, capacity, admitted):
    a = Admission(max_queued=max_queued, capacity=capacity)
    results = [a.try_admit() for _ in range(admitted + 3)]
    assert results == [True] * admitted + [False] * 3
    assert a.inflight == admitted
    a.release()
    assert a.try_admit() and not a.try_admit()


def test_release_tracks_mean_duration_and_queue():
    a = Admission(max_queued=8, capacity=2)
    for _ in range(5):
        a.try_admit()
    assert a.queued(running=2) == 3 and a.queued(running=9) == 0
    a.release()
    a.observe(1.0)
    a.release()
    a.observe(2.0)
    assert a.inflight == 3 and a.mean_duration_s == pytest.approx(1.2)
    a.observe(0.0)  # nothing measured
    assert a.mean_duration_s == pytest.approx(1.2)
    assert a.retry_after(running=2) == 2  # (1 queued + 1) / 2 running = one round of 1.2 s
