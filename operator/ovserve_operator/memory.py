"""What the controller remembers about each LLMServing between sync passes: one record per object, one `forget`.

- `Memory`: the record: the last status written and the echo digests of our writes (echo.OwnWrites, consulted for
  every watch event), the children's applies (when, which generation, the last refusal), its rollout hold, the
  readback grace of its pods, their mount-failure Events and when each pod's Events were last read, which children
  were seen, and the ScaledObject's last refusal. Written by the intake (the echo), by `act` (what `decide`
  decided, and the outcome of its writes), never by `observe`.
- `Memories`: the records by key, and the rollout budget's slots (rolloutbudget.RolloutBudget): a count across
  objects, the one piece that cannot be a field of a record. `forget` drops the record and frees its slot.
- the small pure judgements on a record that `decide` and the sync pass use (`generation_apply_due`,
  `reapply_due`, `revert_due`, `missing_children`, `remember_mount_failures`), each tested alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from . import podview
from .echo import OwnWrites
from .readback import ReadbackMemory
from .rolloutbudget import Hold, RolloutBudget
from .rules import ApplyError

Key = tuple[str, str]  # (namespace, name)


@dataclasses.dataclass
class Memory:
    """What the controller remembers about one LLMServing between cycles."""

    readback: ReadbackMemory
    uid: str = ""  # of the object remembered: a namesake re-created meanwhile starts afresh
    last_status: dict[str, Any] | None = None
    echo: OwnWrites = dataclasses.field(default_factory=OwnWrites)  # the digests of our last status patch
    patched_over: str | None = None  # the resourceVersion our last status patch was computed from
    applied_at: float | None = None  # monotonic
    reverted_at: float | None = None  # monotonic: the last re-apply for a hand edit of a live child
    applied_generation: int | None = None  # the generation whose children were last applied
    attempted_generation: int | None = None  # the generation of the last apply tried (None: none by this leader)
    apply_error: ApplyError | None = None
    mount_failures: dict[str, str] = dataclasses.field(default_factory=dict)  # pod name -> message
    events_read_at: dict[str, float] = dataclasses.field(default_factory=dict)  # pod uid -> monotonic
    # pods a node fault or a drain evicted, named until the replicas are all Ready again (a drained pod is gone
    # long before its replacement has loaded): pod name -> why (nodes.eviction)
    evictions: dict[str, str] = dataclasses.field(default_factory=dict)
    children_seen: set[str] = dataclasses.field(default_factory=set)  # kinds of children seen live
    applying: int = 0  # applies of its children queued or running (a generation's, a re-apply)
    rollout_hold: Hold | None = None  # an operator change of its pod template waiting for a rollout slot
    # the ScaledObject (spec.autoscaling): why it was last refused or not taken over, when the apiserver last
    # refused it (retried every REFUSED_RETRY_S), the last re-apply for a hand edit (monotonic)
    scaler_error: str | None = None
    scaler_refused_at: float | None = None
    scaler_reverted_at: float | None = None
    # the InferencePool (spec.routing), as the ScaledObject: why it was last refused or not taken over, when the
    # apiserver last refused it, the last re-apply for a hand edit, the last write of it (monotonic)
    pool_error: str | None = None
    pool_refused_at: float | None = None
    pool_reverted_at: float | None = None
    pool_written_at: float | None = None


class Memories:
    """Memory per key, created on first use, dropped when the object is gone."""

    def __init__(self, readback_grace_s: float, budget: RolloutBudget | None = None) -> None:
        self.grace = readback_grace_s
        # the slots are counted across objects (the budget bounds how many roll at once), so they are one shared
        # table, not a field of each record; an object's own hold is in its record (Memory.rollout_hold)
        self.budget = budget if budget is not None else RolloutBudget(0, 0.0)
        self._by_key: dict[Key, Memory] = {}

    def __getitem__(self, key: Key) -> Memory:
        if key not in self._by_key:
            self._by_key[key] = Memory(readback=ReadbackMemory(self.grace))
        return self._by_key[key]

    def of(self, key: Key, uid: str) -> Memory:
        """The memory of the object `uid` at `key`: what was remembered of a deleted namesake is dropped
        (its last status, refused apply and pods must never speak for the new object)."""
        memory = self._by_key.get(key)
        if memory is None or (memory.uid and uid and memory.uid != uid):
            memory = self._by_key[key] = Memory(readback=ReadbackMemory(self.grace), uid=uid)
        memory.uid = memory.uid or uid
        return memory

    def get(self, key: Key) -> Memory | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def forget(self, key: Key) -> None:
        """A deleted LLMServing: its record (one deletion: everything remembered of it), and the slot it may hold
        in the shared rollout budget frees."""
        self._by_key.pop(key, None)
        self.budget.finished(key)


def generation_apply_due(
    memory: Memory, generation: int | None, now: float, refused_after_s: float, failed_after_s: float
) -> bool:
    """Whether the sync pass applies the children of `generation` now (the first apply of a spec, a create's or
    an edit's, or a new leader's first look): not when that generation was applied, nor while an apply is
    queued or running; a generation not tried yet at once; one whose apply failed after `refused_after_s` (the
    apiserver or the policy refused it) or `failed_after_s` (any other failure), counted from that try."""
    if memory.applying or memory.applied_generation == generation:
        return False
    if memory.attempted_generation != generation or memory.applied_at is None:
        return True
    refused = memory.apply_error is not None and memory.apply_error.generation == generation
    return now - memory.applied_at > (refused_after_s if refused else failed_after_s)


def reapply_due(memory: Memory, drifted: bool, now: float, after_s: float, generation: int | None = None) -> bool:
    """Children missing or outdated: re-apply, at most every `after_s` (counted from the last apply);
    at once when the spec changed since the apiserver refused an apply (the user fixed it). Never while an
    apply is queued or running: it writes the children anyway (during a bulk create, a second apply queued
    behind it held the status refresh that waited for it past its 60 s bound)."""
    if memory.applied_at is None:
        memory.applied_at = now
    if not drifted or memory.applying:
        return False
    refused = memory.apply_error
    return now - memory.applied_at > after_s or (refused is not None and refused.generation != generation)


def revert_due(memory: Memory, now: float, after_s: float) -> bool:
    """A live child edited by hand: revert at once, then at most every `after_s` (another controller that keeps
    writing the same fields is fought only that often); not while an apply is queued or running. Records the
    revert."""
    if memory.applying:
        return False
    if memory.reverted_at is not None and now - memory.reverted_at <= after_s:
        return False
    memory.reverted_at = now
    return True


MISSING_AFTER_S = 10.0  # a child never seen counts as missing once its apply is this old


def missing_children(
    memory: Memory, absent: Collection[str], now: float, after_s: float = MISSING_AFTER_S
) -> list[str]:
    """The kinds of children to report missing: absent now, and either seen before (deleted) or still absent
    `after_s` after the last apply (never a missing child in the moment between a first apply and its watch
    event). Remembers which kinds were seen."""
    all_kinds = {"Deployment", "Service"}  # always rendered (a PodDisruptionBudget only with replicas > 1)
    memory.children_seen |= all_kinds - set(absent)
    applied_long_ago = memory.applied_at is not None and now - memory.applied_at > after_s
    return sorted(k for k in absent if k in memory.children_seen or applied_long_ago)


def remember_mount_failures(
    memory: Memory, pods: Collection[dict[str, Any]], read: dict[str, tuple[str, str | None]], read_at: float
) -> dict[str, str]:
    """pod name -> the kubelet's latest volume failure, of the pods still creating: what the record held, with the
    pod Events `observe` read this pass (`read`: pod uid -> (pod name, its mount failure or None); a read that
    failed counts as read, so each pod's Events are listed at most every observe.EVENTS_EVERY_S). Pods no longer
    creating are dropped. Records in `memory` (new dicts: a copy made with dataclasses.replace stays apart)."""
    creating = [p for p in pods if podview.is_creating(p)]
    names, uids = {podview.name(p) for p in creating}, {podview.uid(p) for p in creating}
    memory.mount_failures = {k: v for k, v in memory.mount_failures.items() if k in names}
    memory.events_read_at = {k: v for k, v in memory.events_read_at.items() if k in uids}
    for uid, (name, message) in read.items():
        memory.events_read_at[uid] = read_at
        if message is not None:
            memory.mount_failures[name] = message
    return dict(memory.mount_failures)
