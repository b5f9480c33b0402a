"""The operator's own caches of what a status is computed from, and the gate that keeps a refresh off a
partial cache.

Why not kopf indexes: kopf 1.45 holds every handler of every resource until every indexed object has been
indexed, and that barrier (an `asyncio.Condition` whose predicate walks a toggle per object, woken once per
object) costs about the square of the objects listed: a new leader with 5,000 LLMServings (~21,000 objects
with pods and children) refreshed nothing within 600 s (docs/operator.md, Scale). Here kopf only feeds events
(`@kopf.on.event`, no index, hence no barrier) into plain dicts, and the operator gates itself:

- `Cache`: snapshots by key (an LLMServing's `(namespace, name)`, or the owner a child names), by uid; an
  event puts or deletes (a DELETED event, or an object that stopped matching the selector).
- `SyncGate`: before kopf starts watching, one paginated LIST per child kind records which uids exist
  (`seed`) and under which owner. A key is ready once every child seeded under it has come through kopf
  (`confirm`): its refresh then reads exactly what kopf's watch says, never a cache that still lacks a pod
  kopf has not listed yet (which would write a wrong status, e.g. 1/2 ready). A seeded child deleted before
  kopf's own list is never confirmed: `sweep` drops the seeded uids a later LIST no longer returns.
Keys are ready independently: one LLMServing is refreshed as soon as its own children are in, not after
every object of the cluster is.

A watch that kopf must restart from a fresh LIST (a 410 Gone after a long disconnect) delivers no DELETED event
for what was deleted in the gap: `Cache.prune` drops the entries that a LIST no longer returns, once that LIST
started after their last event (`stamp`), so an entry a newer event put is never dropped by an older LIST.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

Key = tuple[str, str]  # (namespace, name) of the LLMServing
Snapshot = dict[str, Any]


class Cache(Mapping[Key, list[Snapshot]]):
    """Snapshots by key, each key holding the snapshots of its objects by uid: `cache[key]` is the list of
    them (what the StatusController and the refresh read, as they read kopf's indexes before)."""

    def __init__(self) -> None:
        self._by_key: dict[Key, dict[str, Snapshot]] = {}
        self._key_of: dict[str, Key] = {}  # uid -> key
        self._put_at: dict[str, int] = {}  # uid -> the stamp of its last put
        self._stamp = 0

    def put(self, uid: str, key: Key, snapshot: Snapshot) -> None:
        old = self._key_of.get(uid)
        if old is not None and old != key:  # its owner label changed
            self.delete(uid)
        self._key_of[uid] = key
        self._by_key.setdefault(key, {})[uid] = snapshot
        self._stamp += 1
        self._put_at[uid] = self._stamp

    def stamp(self) -> int:
        """Taken right before a LIST starts: `prune` spares what was put after it."""
        return self._stamp

    def prune(self, listed: Collection[str], stamp: int) -> list[Key]:
        """Drop the uids that a LIST started at `stamp` did not return, unless an event put them after that
        stamp (they were created or changed since). Returns the keys that lost an object (sorted, once each)."""
        gone = [uid for uid, at in self._put_at.items() if at <= stamp and uid not in listed]
        return sorted({key for uid in gone if (key := self.delete(uid)) is not None})

    def delete(self, uid: str) -> Key | None:
        """Forget `uid`; returns the key it was under (None: unknown)."""
        key = self._key_of.pop(uid, None)
        self._put_at.pop(uid, None)
        if key is not None:
            objs = self._by_key.get(key, {})
            objs.pop(uid, None)
            if not objs:
                self._by_key.pop(key, None)
        return key

    def __getitem__(self, key: Key) -> list[Snapshot]:
        return list(self._by_key[key].values())

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._by_key))

    def __len__(self) -> int:
        return len(self._by_key)


class SyncGate:
    """Which keys still wait for kopf to deliver a child that existed when the operator started."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, Key]] = {}  # kind -> uid -> key, seeded and not yet confirmed
        self._count: Counter[Key] = Counter()

    def seed(self, kind: str, items: Iterable[tuple[str, Key]]) -> None:
        """Record the (uid, key) pairs a LIST of `kind` returned, before kopf's watch of it starts."""
        pending = self._pending.setdefault(kind, {})
        for uid, key in items:
            if uid not in pending:
                pending[uid] = key
                self._count[key] += 1

    def confirm(self, kind: str, uid: str) -> Key | None:
        """kopf delivered `uid` (any event). Returns its key when that made the key ready."""
        key = self._pending.get(kind, {}).pop(uid, None)
        return self._release(key)

    def sweep(self, kind: str, listed: Collection[str]) -> list[Key]:
        """A LIST of `kind` started after the seed returned the uids `listed`: a seeded uid not among them was
        deleted and kopf will never deliver it. Returns the keys that became ready."""
        pending = self._pending.get(kind, {})
        gone = [uid for uid in pending if uid not in listed]
        return [k for uid in gone if (k := self._release(pending.pop(uid))) is not None]

    def _release(self, key: Key | None) -> Key | None:
        if key is None:
            return None
        self._count[key] -= 1
        if self._count[key] > 0:
            return None
        del self._count[key]
        return key

    def ready(self, key: Key) -> bool:
        return key not in self._count

    def waiting(self, kind: str | None = None) -> int:
        """Seeded uids not yet confirmed (of `kind`, or of all kinds)."""
        kinds = [kind] if kind is not None else list(self._pending)
        return sum(len(self._pending.get(k, {})) for k in kinds)


def labels_match(labels: dict[str, str], selector: dict[str, Any], present: object) -> bool:
    """kopf's label filter, here so that an object that stops matching leaves the cache: each selector value
    must equal the label, or be `present` (the label exists)."""
    return all(k in labels and (v is present or labels[k] == v) for k, v in selector.items())


def label_selector(selector: dict[str, Any], present: object) -> str:
    """The same filter as a Kubernetes label selector (for the seed's LIST)."""
    return ",".join(k if v is present else f"{k}={v}" for k, v in selector.items())
