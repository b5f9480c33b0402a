"""A new leader writes only the statuses whose facts changed: nothing it computes may differ per leader.

Each case: the old leader computes a status from the same pods and runtime answers until it settles (that is
what the apiserver stores); an hour later a new leader, with none of the old one's memory, computes it again
from the same facts. Its status must be no write (statusqueue.needs_patch), whatever its clock says.
"""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import podview, statusqueue
from ovserve_operator import spec as api
from ovserve_operator import status as st
from ovserve_operator.readback import ReadbackMemory, Reading, choose

from .podfixtures import CB_READY, FALLBACK_READY, LOADING, REFUSED, pod, report

T0 = dt.datetime(2026, 12, 4, 7, 0, 0, tzinfo=dt.UTC)
SPEC = api.parse_spec({"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 2})
LOAD_FAILED = report("failed", resolved=None, reason="ModelLoadFailed", message="cannot compile the model")
TIMEOUT = "GET /v1/status: no answer in time"
CRASHING = pod(
    "b", ready=False, waiting=("CrashLoopBackOff", "back-off"), last_terminated_message=LOAD_FAILED.to_line()
)


def http(rep):
    return Reading(rep, "http")


def termination(p):
    rep, source = choose(None, podview.termination_report(p), podview.container_ready(p))
    return Reading(rep, source)


CASES = {
    "Ready": ([pod("a"), pod("b", ip="10.244.0.11")], {"a": http(CB_READY), "b": http(CB_READY)}),
    "Ready after a fallback": ([pod("a"), pod("b")], {"a": http(FALLBACK_READY), "b": http(FALLBACK_READY)}),
    "Loading": ([pod("a", ready=False), pod("b", ready=False)], {"a": http(LOADING), "b": http(LOADING)}),
    "Unschedulable": ([pod("a", unschedulable="0/1 nodes are available"), pod("b", unschedulable="0/1")], {}),
    "Degraded (one crash-looping)": ([pod("a"), CRASHING], {"a": http(CB_READY), "b": termination(CRASHING)}),
    "Failed (a pinned CB refused)": ([pod("a", ready=False)], {"a": http(REFUSED)}),
    "no pods yet": ([], {}),
    # a Ready pod whose /v1/status never answers: each leader measures its own first failed read
    "ReadbackFailed": ([pod("a"), pod("b")], {"a": http(CB_READY), "b": Reading(None, "none", TIMEOUT)}),
}


def leader_computes(pods, readings, previous, now, memory: ReadbackMemory) -> dict:
    return st.compute(
        name="llm",
        namespace="ns",
        generation=1,
        spec=SPEC,
        pods=pods,
        readings=memory.apply(pods, dict(readings), now),
        previous=previous,
        desired_hash="h1",
        now=now,
    ).status


@pytest.mark.parametrize("pods,readings", list(CASES.values()), ids=list(CASES))
def test_a_new_leader_rewrites_no_unchanged_status(pods, readings):
    old = ReadbackMemory(grace_s=30)
    stored: dict = {}
    for minute in range(3):  # the old leader's cycles: what it writes is what the apiserver stores
        new = leader_computes(pods, readings, stored or None, T0 + dt.timedelta(minutes=minute), old)
        if statusqueue.needs_patch(new, stored, None):
            stored = st.stored_form(new)
    assert stored.get("computedAt")
    later = T0 + dt.timedelta(hours=1)
    recomputed = leader_computes(pods, readings, stored, later, ReadbackMemory(grace_s=30))
    assert recomputed["computedAt"] != stored["computedAt"]  # the new leader's own clock ...
    assert not statusqueue.needs_patch(recomputed, stored, None)  # ... is no write
