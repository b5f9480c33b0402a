"""No takeover: a child is written only when it is absent or controlled by its LLMServing (pure).

Server-side apply with force would otherwise take over a user's Service or Deployment that happens to
carry the LLMServing's name: rewrite its selector, and garbage-collect it with the LLMServing. Such an
object is left alone and reported as NameConflict, naming it and its controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def conflict(existing: Mapping[str, Any] | None, owner_uid: str) -> str | None:
    """Why `existing` (the live object of a child's name, or None) must not be written; None = ours or absent."""
    if existing is None:
        return None
    meta = existing.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    controller = next((r for r in refs if r.get("controller")), None)
    if controller is not None and controller.get("uid") == owner_uid:
        return None
    what = f"{existing.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")
    if controller is None:
        return f"{what} already exists and is not controlled by this LLMServing: left alone; rename one of them"
    by = f"{controller.get('kind', '?')} {controller.get('name', '?')}"
    same_kind = controller.get("kind") == "LLMServing"
    hint = " (an LLMServing of the same name that was deleted and re-created: its old child is being removed)"
    return f"{what} is controlled by {by}, not by this LLMServing: left alone{hint if same_kind else ''}"
