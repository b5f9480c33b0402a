"""The rollout budget: an operator upgrade does not roll every LLMServing at once (pure; the clock injected).

A new operator version or setting (runtime image, default requests, probes, ...) changes the rendered pod
template of every LLMServing while none of their specs changed. Applied at once, every model in the cluster
would reload at the same moment (and a bad new image would break them all). So a template change that does
not come from the spec takes one of `slots` rollout slots first; without a free slot the Deployment is left
on its current template (held) and status.rollout says so, until a slot frees: when the LLMServing's rollout
finished (every pod of the new template ready, no older pod left), after `timeout_s`, or when it is deleted.
With 0 slots such changes wait for the next spec change of each LLMServing (opt-in upgrades).

Where the change comes from is told by the annotation ovserve.dev/generation the operator writes on the
Deployment: the LLMServing generation it was rendered from. Same generation (or none: a Deployment of an
older operator) and another template hash = an operator change; a new generation = a spec change, applied
at once. The slots are the leader's memory: after a failover up to `slots` more may start. The slots are one
table shared by every object (`RolloutBudget`); a hold is the held object's own (`Hold`, in its memory record).
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

Key = tuple[str, str]  # (namespace, name)
ANNOTATION_GENERATION = "ovserve.dev/generation"


class Decision(enum.Enum):
    APPLY = "apply"  # the spec changed, nothing to roll, or a new Deployment
    GRANTED = "granted"  # an operator change, holding a slot: apply
    HELD = "held"  # an operator change without a free slot: leave the Deployment as it is


@dataclasses.dataclass(frozen=True)
class Live:
    """What the live Deployment says about itself."""

    template_hash: str
    generation: str | None  # ovserve.dev/generation; None on a Deployment of an older operator

    @classmethod
    def of(cls, deployment: Mapping[str, Any] | None, hash_annotation: str) -> Live | None:
        if deployment is None:
            return None
        annotations = (deployment.get("metadata") or {}).get("annotations") or {}
        return cls(annotations.get(hash_annotation, ""), annotations.get(ANNOTATION_GENERATION))


@dataclasses.dataclass(frozen=True)
class Hold:
    """An LLMServing held by the budget: the live template hash its pods stay on, and the desired hash it waits to
    roll to. Kept in its memory record (memory.Memory.rollout_hold): it concerns that object alone."""

    live_hash: str
    desired_hash: str

    @classmethod
    def after(cls, decision: Decision, live: Live | None, desired_hash: str) -> Hold | None:
        """The hold a `RolloutBudget.decide` leaves: one when HELD, none otherwise."""
        return cls(live.template_hash, desired_hash) if decision == Decision.HELD and live is not None else None

    def held_hash(self, desired_hash: str) -> str | None:
        """The live template hash the LLMServing stays on (its pods are the current ones), while it waits for
        `desired_hash`; None once the spec renders another."""
        return self.live_hash if self.desired_hash == desired_hash else None


@dataclasses.dataclass(frozen=True)
class View:
    """The budget as one LLMServing's sync pass sees it: its hold (live hash, desired hash), whether it holds a
    slot, whether a slot is free, and its status.rollout."""

    held: tuple[str, str] | None = None
    granted: bool = False
    free: bool = False
    status: dict[str, Any] | None = None

    def held_hash(self, desired_hash: str) -> str | None:
        """As Hold.held_hash."""
        return self.held[0] if self.held is not None and self.held[1] == desired_hash else None


class RolloutBudget:
    """The slots, shared by every LLMServing (their count is what the budget bounds, so it cannot live in any one
    object's memory record): which hold one, since when. Thread-safe: applies run in worker threads, the status
    cycle in the event loop. An object's hold is its own (Hold, in its record)."""

    def __init__(self, slots: int, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.timeout_s = timeout_s
        self.clock = clock
        self._granted: dict[Key, tuple[float, str]] = {}  # key -> (monotonic when granted, desired hash)
        self._lock = threading.Lock()

    def decide(self, key: Key, live: Live | None, desired_hash: str, generation: int | None) -> Decision:
        """Whether `key`'s Deployment is applied now (APPLY, GRANTED: it takes or keeps a slot) or HELD
        (Hold.after records it)."""
        with self._lock:
            self._expire()
            operator_change = (
                live is not None
                and live.template_hash != desired_hash
                and (live.generation is None or live.generation == str(generation))
            )
            if not operator_change:
                return Decision.APPLY
            if key in self._granted or len(self._granted) < self.slots:
                self._granted.setdefault(key, (self.clock(), desired_hash))
                return Decision.GRANTED
            return Decision.HELD

    def free(self) -> bool:
        """A slot is free: a held LLMServing should try again."""
        with self._lock:
            self._expire()
            return len(self._granted) < self.slots

    def finished(self, key: Key) -> None:
        """Its rollout is over (or it is gone): the slot frees."""
        with self._lock:
            self._granted.pop(key, None)

    def granted(self, key: Key) -> bool:
        with self._lock:
            return key in self._granted

    def view(self, key: Key, hold: Hold | None) -> View:
        """What the budget says of `key` (held by `hold`, from its record) now, for a pure decision (`decide`)."""
        with self._lock:
            self._expire()
            granted, free = key in self._granted, len(self._granted) < self.slots
        return View(
            held=None if hold is None else (hold.live_hash, hold.desired_hash),
            granted=granted,
            free=free,
            status=self.status(key, hold),
        )

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, (at, _h) in self._granted.items() if now - at > self.timeout_s]:
            del self._granted[key]

    def status(self, key: Key, hold: Hold | None) -> dict[str, Any] | None:
        """status.rollout: absent unless an operator change waits for (`hold`), or holds, a slot."""
        with self._lock:
            self._expire()
            in_use = len(self._granted)
            if hold is not None:
                return {
                    "held": True,
                    "message": "the operator changed the rendered pod template (an upgrade or a setting), not the "
                    f"spec: waiting for a rollout slot ({in_use} of {self.slots} in use, OVSERVE_ROLLOUT_BUDGET); "
                    "the pods stay on their current template meanwhile",
                }
            if key in self._granted:
                return {
                    "held": False,
                    "message": f"rolling to the operator's new pod template (a rollout slot: {in_use} of "
                    f"{self.slots} in use, OVSERVE_ROLLOUT_BUDGET)",
                }
            return None


def rollout_done(status: Mapping[str, Any], replicas: int) -> bool:
    """Every wanted pod of the current template is ready and no pod of an earlier one is left."""
    return int(status.get("readyReplicas") or 0) >= replicas and not status.get("previous")


__all__ = ["ANNOTATION_GENERATION", "Decision", "Hold", "Live", "RolloutBudget", "View", "rollout_done"]
