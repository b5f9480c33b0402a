"""Drift of a child (pure): what the apiserver holds against what the spec renders.

Level-triggered healing compares the live object itself, never an annotation of it:

- `differences(desired, live)`: the paths where `live` does not hold what `desired` says. A map of the
  desired object may gain keys in the live one (apiserver defaults, other controllers' annotations such
  as `kubectl rollout restart`'s); a list must hold exactly the desired items, in order (an env var,
  port or volume added by hand is drift), each item again compared as above. Selectors are compared
  exactly (a label added to a Service's selector by hand cuts its traffic). Quantities under
  `resources` are compared by value (the apiserver writes `1000m` back as `1`).
- `healed(desired, live)`: `live` with every drifted value replaced by the desired one, keeping what the
  apiserver and others added to maps. Server-side apply reverts a managed value someone changed, but not
  a list item another field manager added: the operator writes this value back for those.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

# maps compared exactly: keys the live object has and the desired one lacks are drift
EXACT_MAPS = frozenset({("spec", "selector"), ("spec", "selector", "matchLabels")})


def _quantity(value: Any) -> Decimal | None:
    try:
        from kubernetes.utils import parse_quantity

        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, InvalidOperation, ImportError):
        return None


def _in_resources(path: tuple[str, ...]) -> bool:
    return len(path) >= 2 and path[-2] in ("requests", "limits") and "resources" in path


def _leaf_equal(path: tuple[str, ...], desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    if _in_resources(path) and isinstance(desired, (str, int, float)) and isinstance(live, (str, int, float)):
        a, b = _quantity(desired), _quantity(live)
        return a is not None and a == b
    return False


def _walk(path: tuple[str, ...], desired: Any, live: Any, out: list[str]) -> None:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            out.append(".".join(path))
            return
        for k, v in desired.items():
            if k not in live:
                if v not in (None, {}, []):
                    out.append(".".join((*path, str(k))))
                continue
            _walk((*path, str(k)), v, live[k], out)
        if path in EXACT_MAPS:
            out.extend(".".join((*path, str(k))) for k in live if k not in desired)
        return
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            out.append(".".join(path))
            return
        for i, (d, lv) in enumerate(zip(desired, live, strict=True)):
            _walk((*path, str(i)), d, lv, out)
        return
    if not _leaf_equal(path, desired, live):
        out.append(".".join(path))


def differences(desired: Mapping[str, Any], live: Mapping[str, Any] | None, *, under: str = "spec") -> list[str]:
    """Paths (dotted) under `under` where `live` differs from `desired`; ["<missing>"] when there is no live object."""
    if live is None:
        return ["<missing>"]
    out: list[str] = []
    _walk((under,), desired.get(under) or {}, live.get(under), out)
    labels = (desired.get("metadata") or {}).get("labels") or {}
    _walk(("metadata", "labels"), labels, (live.get("metadata") or {}).get("labels") or {}, out)
    return out


def _merge(path: tuple[str, ...], desired: Any, live: Any) -> Any:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return desired
        keep = {} if path in EXACT_MAPS else {k: v for k, v in live.items() if k not in desired}
        return {**keep, **{k: _merge((*path, str(k)), v, live.get(k)) for k, v in desired.items()}}
    if isinstance(desired, list):
        if not isinstance(live, list):
            return list(desired)
        # item by item: the live item keeps its defaults when it is the same item (same name, or same place)
        by_name = {i.get("name"): i for i in live if isinstance(i, Mapping) and i.get("name") is not None}
        merged = []
        for i, d in enumerate(desired):
            if isinstance(d, Mapping) and d.get("name") is not None:
                match = by_name.get(d["name"])
            else:
                match = live[i] if i < len(live) else None
            merged.append(_merge((*path, str(i)), d, match) if match is not None else d)
        return merged
    return live if _leaf_equal(path, desired, live) else desired


def healed(desired: Mapping[str, Any], live: Mapping[str, Any], *, under: str = "spec") -> Any:
    """The value of `live[under]` that holds what `desired[under]` says and keeps what others added to maps."""
    return _merge((under,), desired.get(under) or {}, live.get(under))


def pod_matches(desired_template: Mapping[str, Any], pod_containers: list[Mapping[str, Any]]) -> bool:
    """Whether a pod's containers run what the desired template says (image, command, args, env of each
    rendered container): pods made from a hand-edited template are not of the current spec."""
    live = {c.get("name"): c for c in pod_containers}
    for c in (desired_template.get("spec") or {}).get("containers") or []:
        got = live.get(c.get("name"))
        if got is None:
            return False
        want = {k: c[k] for k in ("image", "command", "args", "env") if k in c}
        have = {k: got.get(k) for k in want}
        if differences({"spec": want}, {"spec": have}):
            return False
    return True


__all__ = ["differences", "healed", "pod_matches"]
