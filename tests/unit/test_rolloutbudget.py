"""The rollout budget (pure): operator changes of the pod template roll a few LLMServings at a time."""

from __future__ import annotations

import pytest
from ovserve_operator import rolloutbudget as rb

A, B, C = ("ns", "a"), ("ns", "b"), ("other", "c")
APPLY, GRANTED, HELD = rb.Decision.APPLY, rb.Decision.GRANTED, rb.Decision.HELD


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    "live,desired,generation,want",
    [
        (None, "new", 1, APPLY),  # a new Deployment
        (rb.Live("h1", "3"), "h1", 3, APPLY),  # nothing to roll
        (rb.Live("h1", "2"), "h2", 3, APPLY),  # the spec changed since: at once
        (rb.Live("h1", "3"), "h2", 3, GRANTED),  # same generation, other template: the operator changed it
        (rb.Live("h1", None), "h2", 3, GRANTED),  # a Deployment of an older operator: counted as an upgrade
    ],
)
def test_what_counts_as_an_operator_change(live, desired, generation, want):
    assert rb.RolloutBudget(1, 900).decide(A, live, desired, generation) == want


class Records:
    """The budget as the controller uses it: each object's hold kept in its own record (memory.Memory.rollout_hold),
    the slots shared."""

    def __init__(self, budget: rb.RolloutBudget) -> None:
        self.budget, self.holds = budget, {}

    def decide(self, key, live, desired, generation):
        decision = self.budget.decide(key, live, desired, generation)
        self.holds[key] = rb.Hold.after(decision, live, desired)
        return decision

    def held_hash(self, key, desired):
        hold = self.holds.get(key)
        return hold.held_hash(desired) if hold is not None else None

    def status(self, key):
        return self.budget.status(key, self.holds.get(key))

    def forget(self, key):  # memory.Memories.forget: the record goes, its slot frees
        self.holds.pop(key, None)
        self.budget.finished(key)


def test_slots_hold_the_rest_until_one_frees():
    clock = Clock()
    budget = Records(rb.RolloutBudget(1, 900, clock))
    upgrade = rb.Live("old", "1")
    assert budget.decide(A, upgrade, "new", 1) == GRANTED
    assert budget.decide(B, upgrade, "new", 1) == HELD
    assert budget.decide(C, upgrade, "new", 1) == HELD
    assert budget.decide(A, upgrade, "new", 1) == GRANTED  # asked again: keeps its slot
    assert not budget.budget.free()
    # a held one stays on its live template: its pods are the current ones
    assert budget.held_hash(B, "new") == "old" and budget.held_hash(A, "new") is None
    assert budget.status(B)["held"] is True and "1 of 1 in use" in budget.status(B)["message"]
    assert budget.status(A)["held"] is False
    # a spec change of a held one applies at once and needs no slot
    assert budget.decide(C, rb.Live("old", "1"), "new2", 2) == APPLY and budget.status(C) is None
    # A finished: B takes the slot
    budget.budget.finished(A)
    assert budget.budget.free() and budget.status(A) is None
    assert budget.decide(B, upgrade, "new", 1) == GRANTED and budget.held_hash(B, "new") is None
    # the view a sync pass decides from
    view = budget.budget.view(C, rb.Hold("old", "new"))
    assert view.held_hash("new") == "old" and view.held_hash("newer") is None and view.status["held"] is True


def test_a_rollout_that_cannot_finish_frees_its_slot_after_the_timeout():
    clock = Clock()
    budget = rb.RolloutBudget(1, 600, clock)
    upgrade = rb.Live("old", "1")
    assert budget.decide(A, upgrade, "new", 1) == GRANTED
    clock.t += 599
    assert budget.decide(B, upgrade, "new", 1) == HELD
    clock.t += 2
    assert budget.decide(B, upgrade, "new", 1) == GRANTED and not budget.granted(A)


def test_zero_slots_means_only_at_the_next_spec_change():
    budget = rb.RolloutBudget(0, 900)
    assert budget.decide(A, rb.Live("old", "4"), "new", 4) == HELD
    assert budget.decide(A, rb.Live("old", "4"), "new", 5) == APPLY


def test_forget_drops_slot_and_hold():
    budget = Records(rb.RolloutBudget(1, 900))
    upgrade = rb.Live("old", "1")
    budget.decide(A, upgrade, "new", 1)
    budget.decide(B, upgrade, "new", 1)
    budget.forget(A)
    budget.forget(B)
    assert budget.budget.free() and budget.held_hash(B, "new") is None and budget.status(B) is None


@pytest.mark.parametrize(
    "status,replicas,done",
    [
        ({"readyReplicas": 2}, 2, True),
        ({"readyReplicas": 1}, 2, False),
        ({"readyReplicas": 2, "previous": {"replicas": 1}}, 2, False),  # an old pod still there
        ({}, 0, True),
    ],
)
def test_rollout_done(status, replicas, done):
    assert rb.rollout_done(status, replicas) is done


def test_live_of_a_deployment():
    dep = {"metadata": {"annotations": {"ovserve.dev/template-hash": "h", rb.ANNOTATION_GENERATION: "7"}}}
    assert rb.Live.of(dep, "ovserve.dev/template-hash") == rb.Live("h", "7")
    assert rb.Live.of({"metadata": {}}, "ovserve.dev/template-hash") == rb.Live("", None)
    assert rb.Live.of(None, "x") is None
