"""The echo of the operator's own status patch schedules no refresh; every other LLMServing event does.

Driven through the real LLMServing event path (intake.serving_change in the reflector's thread, then
Controller.apply_serving_change on the loop, which feeds the cache) and the real work queue: each case is the
sequence of watch events and status writes one object sees, and whether its last event marks it dirty.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ovserve_operator import echo, intake, statusqueue
from ovserve_operator.controller import Controller
from ovserve_operator.memory import Memories
from ovserve_operator.settings import Settings
from ovserve_operator.status import stored_form

KEY = ("team-a", "llm")

# What refresh() writes: nulls included (the merge patch drops them, so the apiserver stores them absent).
WRITTEN = {
    "observedGeneration": 1,
    "phase": "Ready",
    "pipeline": {"requested": "AUTO", "resolved": "LM_CB", "fallback": False, "fallbackReason": None},
    "readyReplicas": 1,
    "previous": None,
    "computedAt": "2026-12-04T21:00:00Z",
    "conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "1/1 ready"}],
}
STORED = stored_form(WRITTEN)


def event(rv: int, status: dict | None = None, **meta: Any) -> dict[str, Any]:
    """An LLMServing as a watch event carries it (resourceVersion and managedFields move with every write)."""
    spec = meta.pop("spec", {"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 1})
    return {
        "apiVersion": "ovserve.dev/v1alpha1",
        "kind": "LLMServing",
        "metadata": {
            "name": KEY[1],
            "namespace": KEY[0],
            "uid": "uid-1",
            "generation": 1,
            "resourceVersion": str(rv),
            "labels": {"team": "a"},
            "managedFields": [{"manager": "ovserve-operator", "subresource": "status", "time": f"t{rv}"}],
            **meta,
        },
        "spec": spec,
        "status": copy.deepcopy(status if status is not None else {}),
    }


WROTE, FAILED = ("wrote",), ("failed",)
OTHER = {**STORED, "phase": "Failed"}

CASES = {
    "the echo of our own patch": ([event(10), WROTE, event(11, STORED)], False),
    "the same echo again (a watch re-list)": ([event(10), WROTE, event(11, STORED), event(11, STORED)], False),
    "spec changed (with our status)": ([event(10), WROTE, event(11, STORED, generation=2, spec={"replicas": 2})], True),
    "a label changed": ([event(10), WROTE, event(11, STORED, labels={"team": "b"})], True),
    "an annotation added": ([event(10), WROTE, event(11, STORED, annotations={"x": "1"})], True),
    "status written by someone else": ([event(10), WROTE, event(11, OTHER)], True),
    "our status with another computedAt": (
        [event(10), WROTE, event(11, {**STORED, "computedAt": "2026-12-04T21:05:00Z"})],
        True,
    ),
    "our patch failed": ([event(10), WROTE, FAILED, event(11, STORED)], True),
    "first event after a start": ([event(11, STORED)], True),
    "a namesake re-created": ([event(10), WROTE, event(12, STORED, uid="uid-2")], True),
    "someone else's write after our echo": ([event(10), WROTE, event(11, STORED), event(12, OTHER)], True),
    "no write of ours, nothing changed": ([event(10), event(10)], True),
}


@pytest.fixture
def ctx():
    ctl = Controller(Settings(), kube=None)  # type: ignore[arg-type]
    ctl.queue = statusqueue.WorkQueue(5.0)
    return ctl


@pytest.mark.parametrize("steps,marked", list(CASES.values()), ids=list(CASES))
def test_own_patch_echo_schedules_no_refresh(ctx, steps, marked):
    for step in steps:
        if step == WROTE:
            ctx.memories[KEY].echo.writing(WRITTEN)  # what act records before it sends the patch
        elif step == FAILED:
            ctx.memories[KEY].echo.failed()
        else:
            ctx.queue.dirty.clear()
            ctx.apply_serving_change(intake.serving_change("MODIFIED", step))
            snapshot = ctx.llmservings[KEY][-1]
            assert snapshot["status"] == step["status"]  # the cache holds the event either way
    assert (KEY in ctx.queue.dirty) is marked


def test_forgotten_object_starts_afresh():
    """The digests are a field of the object's memory record: its one `forget` drops them too."""
    memories = Memories(30.0)
    memories[KEY].echo.is_echo(*echo.digests(event(10)))
    memories[KEY].echo.writing(WRITTEN)
    memories.forget(KEY)
    assert not memories[KEY].echo.is_echo(*echo.digests(event(11, STORED)))
    assert memories[KEY].echo.seen is not None and len(memories) == 1
