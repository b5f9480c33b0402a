"""The operator's own caches of what a status is computed from, and the gate that keeps a refresh off a
partial cache.

Why not kopf indexes: kopf 1.45 holds every handler of every resource until every indexed object has been
indexed, and that barrier (an `asyncio.Condition` whose predicate walks a toggle per object, woken once per
object) costs about the square of the objects listed: a new leader with 5,000 LLMServings (~21,000 objects
with pods and children) refreshed nothing within 600 s (docs/operator.md, Scale). The LLMServings and the
children come from the operator's own list and watch (reflector.py), into plain dicts:

- `Cache`: snapshots by key (an LLMServing's `(namespace, name)`, or the owner a child names), by uid; an
  event puts or deletes (a DELETED event, or an object that stopped matching the selector). Each snapshot is
  kept pickled, one bytes object instead of hundreds of small dicts and strings: at 1,000 LLMServings the
  four caches held ~50 KiB of Python objects per LLMServing (a Deployment's spec alone ~22 KiB), ~9 KiB
  pickled; a read unpickles (tens of microseconds) and returns a copy the reader may change.
- `ListGate`: no LLMServing is refreshed before every child reflector of its namespace completed its first LIST:
  a refresh on a cache that still lacks a pod would write a wrong status (e.g. 1/2 ready). A namespace whose
  LIST or watch is refused degrades that namespace only (its statuses say NamespaceUnreadable); the others go on.

A watch restarted from a fresh LIST (a 410 Gone after a long disconnect) delivers no DELETED event for what was
deleted in the gap: `Cache.prune` drops the entries that a LIST no longer returns, once that LIST started after
their last event (`stamp`), so an entry a newer event put is never dropped by an older LIST.
"""

from __future__ import annotations

import pickle
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

Key = tuple[str, str]  # (namespace, name) of the LLMServing
Snapshot = dict[str, Any]


def pack(snapshot: Snapshot) -> bytes:
    """A snapshot as the cache keeps it: one bytes object instead of hundreds of small dicts and strings."""
    return pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)


class Cache(Mapping[Key, list[Snapshot]]):
    """Snapshots by key, each key holding the snapshots of its objects by uid: `cache[key]` is the list of
    them (what the StatusController and the refresh read, as they read kopf's indexes before)."""

    def __init__(self) -> None:
        self._by_key: dict[Key, dict[str, bytes]] = {}  # pickled snapshots
        self._key_of: dict[str, Key] = {}  # uid -> key
        self._put_at: dict[str, int] = {}  # uid -> the stamp of its last put
        self._stamp = 0

    def put(self, uid: str, key: Key, snapshot: Snapshot) -> None:
        self.put_packed(uid, key, pack(snapshot))

    def put_packed(self, uid: str, key: Key, packed: bytes) -> None:
        """`put` of a snapshot already `pack`ed (by the reflector's thread)."""
        old = self._key_of.get(uid)
        if old is not None and old != key:  # its owner label changed
            self.delete(uid)
        self._key_of[uid] = key
        self._by_key.setdefault(key, {})[uid] = packed
        self._stamp += 1
        self._put_at[uid] = self._stamp

    def packed(self, uid: str) -> bytes | None:
        """The packed snapshot held for `uid`, or None."""
        key = self._key_of.get(uid)
        return None if key is None else self._by_key.get(key, {}).get(uid)

    def stamp(self) -> int:
        """Taken right before a LIST starts: `prune` spares what was put after it."""
        return self._stamp

    def prune(self, listed: Collection[str], stamp: int, namespace: str | None = None) -> list[Key]:
        """Drop the uids that a LIST started at `stamp` did not return, unless an event put them after that
        stamp (they were created or changed since); with `namespace`, a LIST of that namespace only: the other
        namespaces' entries are not judged. Returns the keys that lost an object (sorted, once each)."""
        gone = [
            uid
            for uid, at in self._put_at.items()
            if at <= stamp and uid not in listed and (namespace is None or self._key_of[uid][0] == namespace)
        ]
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
        return [pickle.loads(b) for b in self._by_key[key].values()]

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._by_key))

    def __len__(self) -> int:
        return len(self._by_key)


class ListGate:
    """Per namespace, which child reflectors (by name) have not completed their first LIST yet, and which
    reflectors are refused (401/403: a namespace deleted with its RoleBinding refuses for ever).

    A key is ready when every reflector of its namespace and every cluster-wide one ("") has listed once, or
    when one of them is refused: a refresh that cannot read the children says so (`unreadable`, the reason
    NamespaceUnreadable) instead of waiting. A namespace never waits for another's reflectors."""

    def __init__(self) -> None:
        self._waiting: dict[str, str] = {}  # reflector name -> its namespace ("": every namespace)
        self._refused: dict[str, tuple[str, str]] = {}  # reflector name -> (its namespace, the apiserver's message)

    def expect(self, names: Iterable[str], namespace: str = "") -> None:
        self._waiting.update(dict.fromkeys(names, namespace))

    def listed(self, name: str) -> bool:
        """`name` completed a LIST (so it is not refused either). True when that opened its namespace's gate (it
        was the last reflector of that namespace awaited, or a cluster-wide one was)."""
        self._refused.pop(name, None)
        if name not in self._waiting:
            return False
        namespace = self._waiting.pop(name)
        return not any(namespace == "" or ns in ("", namespace) for ns in self._waiting.values())

    def refuse(self, name: str, namespace: str, message: str) -> bool:
        """`name`'s LIST or watch is refused. True when it was not refused before."""
        new = name not in self._refused
        self._refused[name] = (namespace, message)
        return new

    def readable(self, name: str) -> bool:
        """`name`'s LIST or watch went through again. True when it was refused."""
        return self._refused.pop(name, None) is not None

    def unreadable(self, namespace: str) -> str:
        """Why the objects of `namespace` cannot be read (the refused reflectors and the apiserver's messages);
        "" when they can."""
        return "; ".join(f"{n}: {m}" for n, (ns, m) in sorted(self._refused.items()) if ns in ("", namespace))

    def ready(self, key: Key | None = None) -> bool:
        """Whether a refresh of `key` may run (None: of every key): nothing it depends on is still waiting for a
        first LIST, except a refused reflector (the refresh says so)."""
        return not any(
            name not in self._refused and (key is None or ns in ("", key[0])) for name, ns in self._waiting.items()
        )

    def waiting(self) -> int:
        return len(self._waiting)

    def refused(self) -> list[str]:
        """The refused reflectors' names (sorted)."""
        return sorted(self._refused)


def labels_match(labels: dict[str, str], selector: dict[str, Any], present: object) -> bool:
    """kopf's label filter, here so that an object that stops matching leaves the cache: each selector value
    must equal the label, or be `present` (the label exists)."""
    return all(k in labels and (v is present or labels[k] == v) for k, v in selector.items())


def label_selector(selector: dict[str, Any], present: object) -> str:
    """The same filter as a Kubernetes label selector (for the seed's LIST)."""
    return ",".join(k if v is present else f"{k}={v}" for k, v in selector.items())
