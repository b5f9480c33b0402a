"""Recognise the watch event of the operator's own status patch (its echo), so that it schedules no refresh.

Every status patch comes back from the apiserver as a watch event of the LLMServing. In that event nothing
a refresh reads has changed: the spec and metadata are those seen before, and the status is the one just
written. Refreshing again would read every pod back only to compute the same status, doubling the cost of
every write. An event is an echo when

- everything but the status (and the resourceVersion and managedFields, which every write changes) equals
  the previous event of that object, and
- its status is, as the apiserver stores it (null fields absent), exactly the one this operator last wrote.

Everything else still refreshes: a spec, label or annotation change, a status written by anyone else (or a
write of ours that was lost), a namesake re-created (another uid), the first event after a start. Children
and pods have indexes of their own, and the periodic resync recomputes every object anyway: the filter only
drops the one event the operator caused itself.

The write is recorded before the patch is sent (its echo may be handled before the patch call returns) and
forgotten when the patch fails. Only digests are kept: a few dozen bytes per object at 10,000 objects, in the
object's memory record (memory.Memory.echo).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .status import stored_form

VOLATILE_METADATA = ("resourceVersion", "managedFields")  # changed by every write, the status's too


def _digest(value: Any) -> bytes:
    return hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(), digest_size=16).digest()


def inputs_digest(body: Mapping[str, Any]) -> bytes:
    """The digest of everything in the object but its status and what every write changes."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in VOLATILE_METADATA}
    rest = {k: v for k, v in body.items() if k not in ("metadata", "status")}
    return _digest({"metadata": meta, **rest})


def status_digest(status: Mapping[str, Any] | None) -> bytes:
    """The digest of a status as the apiserver stores it (null fields are absent there)."""
    return _digest(stored_form(dict(status or {})))


def digests(body: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(inputs, status) digests of one event's object (pure: any thread)."""
    return inputs_digest(body), status_digest(body.get("status"))


@dataclasses.dataclass
class OwnWrites:
    """Of one object (a field of its memory.Memory record, so that forgetting the object forgets them too): the
    digest of its last event's inputs and of the status this operator last wrote."""

    seen: bytes | None = None
    wrote: bytes | None = None

    def writing(self, status: Mapping[str, Any]) -> None:
        """About to patch `status` (call before sending it)."""
        self.wrote = status_digest(status)

    def failed(self) -> None:
        """The patch failed: an event with that status is not ours."""
        self.wrote = None

    def is_echo(self, inputs: bytes, status: bytes) -> bool:
        """Whether a watch event of the object, given as its `digests` (taken where the raw body was decoded: the
        reflector's thread), is only the echo of our own status patch (records its inputs)."""
        before, self.seen = self.seen, inputs
        return before == inputs and self.wrote is not None and status == self.wrote
