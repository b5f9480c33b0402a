"""The I/O of spec.routing (blocking; the controller calls it in a thread): read the LLMServing's InferencePool and
write the one the render produced, the way autoscaling_io does KEDA's ScaledObject. What to write and what
status.routing says is decided elsewhere: `decide` (pure) from `routing.pool_status` (pure).

- `Gie`: whether InferencePools are served (the Gateway API Inference Extension's CRD), asked at most every
  kube.SERVED_TTL_S (installing the CRD later is noticed). One per controller. Not served: status.routing says
  RoutingUnavailable and the serving runs behind its Service (never a silent skip).
- `read`: on every sync pass of a serving with spec.routing (level-triggered; InferencePools are not watched,
  since the CRD may be absent or not granted): the live pool, or why it cannot be used, and with
  spec.routing.picker (or while status says the operator ran one) the picker's six objects. Reads only.
- `write`: apply the rendered pool and picker, or delete ours (by uid) when spec.routing (or its picker) is off. A
  refusal (an operator not granted InferencePools or the picker's kinds: chart `routing.enabled`,
  `routing.picker`; a webhook) is returned for status (PoolRefused), retried every REFUSED_RETRY_S by `decide`,
  never raised into a retry loop. An object of one of those names not controlled by this LLMServing is never
  written (ownership.conflict).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import drift, ownership, routing
from .kube import Kube, ServedCache, error_text, is_refusal

log = logging.getLogger(__name__)

REFUSED_RETRY_S = 60.0  # a refused pool is tried again this often (RBAC or a webhook may change)
REAPPLY_AFTER_S = 30.0  # a pool edited by hand is reverted at once, then at most this often
MISSING_REWRITE_AFTER_S = 5.0  # a pool deleted by hand is re-created at most this often
NOT_OURS = "NameConflict"
# the picker's objects (routing.render_routing's order): kind -> API version, and the field compared for drift
# (None: its existence only)
PICKER_KINDS: dict[str, tuple[str, str | None]] = {
    "ServiceAccount": ("v1", None),
    "Role": ("rbac.authorization.k8s.io/v1", "rules"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "subjects"),
    "ConfigMap": ("v1", "data"),
    "Deployment": ("apps/v1", "spec"),
    "Service": ("v1", "spec"),
}


class Gie(ServedCache):
    """Whether InferencePools are served (kube.ServedCache)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(routing.POOL_API_VERSION, routing.POOL_PLURAL, clock)


@dataclasses.dataclass(frozen=True)
class Seen:
    """What one read found: the CRD served or not; our live pool (None: absent, unreadable or not ours);
    `problem`: why it cannot be used (the read refused, or a pool of that name not ours)."""

    installed: bool = False
    pool: Mapping[str, Any] | None = None
    problem: str | None = None
    # the picker's objects, kind -> ours (None: absent); None: not read
    picker: Mapping[str, Mapping[str, Any] | None] | None = None


def not_ours_message(name: str, kind: str = routing.POOL_KIND) -> str:
    target = routing.pool_name(name) if kind == routing.POOL_KIND else routing.picker_name(name)
    return f"{NOT_OURS}: {kind} {target} is not owned by this LLMServing"


def picker_drift(desired: list[Mapping[str, Any]], live: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """Which of the picker's objects are missing or differ from the render (pure): `Kind: path` each."""
    out = []
    for obj in desired:
        kind = obj["kind"]
        got = live.get(kind)
        if got is None:
            out.append(f"{kind}: missing")
            continue
        under = PICKER_KINDS[kind][1]
        if under is not None:
            out += [f"{kind}: {p}" for p in drift.differences(obj, got, under=under)]
    return out


def picker_available(live: Mapping[str, Mapping[str, Any] | None] | None) -> bool:
    """The picker's Deployment is Available (its one replica Ready: gRPC health answers)."""
    dep = (live or {}).get("Deployment") or {}
    conds = (dep.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)


def refusal_text(e: BaseException) -> str:
    if getattr(e, "status", None) == 403:
        return (
            f"the operator may not manage InferencePools or the endpoint picker ({error_text(e)}): install the chart "
            "with routing.enabled=true (and routing.picker=true for spec.routing.picker; docs/routing.md)"
        )
    return error_text(e)


def read(kube: Kube, gie: Gie, name: str, namespace: str, uid: str, picker: bool = False) -> Seen:
    """The InferencePool of `name`, as it is, and with `picker` the picker's objects (reads only)."""
    if not gie.served(kube):
        return Seen(installed=False)
    try:
        pool = kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, namespace, routing.pool_name(name))
        live: dict[str, Mapping[str, Any] | None] | None = None
        if picker:
            live = {}
            for kind, (api_version, _) in PICKER_KINDS.items():
                obj = kube.get(api_version, kind, namespace, routing.picker_name(name))
                if obj is not None and ownership.conflict(obj, uid) is not None:
                    return Seen(installed=True, problem=not_ours_message(name, kind))
                live[kind] = obj
    except kube.errors.ForbiddenError as e:
        return Seen(installed=True, problem=refusal_text(e))
    if pool is not None and ownership.conflict(pool, uid) is not None:
        return Seen(installed=True, problem=not_ours_message(name))
    return Seen(installed=True, pool=pool, picker=live)


@dataclasses.dataclass(frozen=True)
class Written:
    """What `write` did: `error` (None: done, or nothing to do) and whether the apiserver refused it."""

    error: str | None = None
    refused: bool = False


def write(
    kube: Kube,
    gie: Gie,
    desired: Mapping[str, Any] | None,
    name: str,
    namespace: str,
    uid: str,
    picker: list[Mapping[str, Any]] | None = None,
    remove_picker: bool = False,
) -> Written | None:
    """Make the InferencePool match `desired` (None: routing off, delete ours), then the picker's objects match
    `picker` (none: with `remove_picker`, delete ours). A refusal (4xx) is returned, not raised: the Deployment and
    Service serve meanwhile. None: nothing was tried (the CRD not served); any other failure is raised."""
    if not gie.served(kube):
        return None
    written = _write_pool(kube, desired, name, namespace, uid)
    if written.error is not None:
        return written
    if picker or remove_picker:
        return _write_picker(kube, picker or [], name, namespace, uid)
    return written


def _write_picker(kube: Kube, desired: list[Mapping[str, Any]], name: str, namespace: str, uid: str) -> Written:
    """Apply the picker's objects (all checked before any is written), or delete ours when none is desired."""
    target = routing.picker_name(name)
    try:
        existing = {kind: kube.get(av, kind, namespace, target) for kind, (av, _) in PICKER_KINDS.items()}
        for kind, obj in existing.items():
            if ownership.conflict(obj, uid) is not None:
                return Written(not_ours_message(name, kind)) if desired else Written()
        if not desired:
            for kind, obj in existing.items():
                if obj is not None:
                    kube.delete(PICKER_KINDS[kind][0], kind, namespace, target, uid=obj["metadata"]["uid"])
            log.info("%s/%s: spec.routing.picker off: the endpoint picker deleted", namespace, name)
            return Written()
        for obj in desired:
            _, reverted = kube.apply_exact(dict(obj))
            if reverted:
                log.info(
                    "%s/%s: %s %s: reverted another field manager's change: %s",
                    namespace,
                    name,
                    obj["kind"],
                    target,
                    reverted,
                )
    except Exception as e:
        if is_refusal(e):
            log.warning("%s/%s: the endpoint picker was refused: %s", namespace, name, error_text(e))
            return Written(refusal_text(e), refused=True)
        raise
    return Written()


def _write_pool(kube: Kube, desired: Mapping[str, Any] | None, name: str, namespace: str, uid: str) -> Written:
    """Apply the pool, or delete ours when none is desired; a pool of that name not ours is never written."""
    pool_name = routing.pool_name(name)
    try:
        try:
            existing = kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, namespace, pool_name)
        except kube.errors.ForbiddenError:
            if desired is None:
                return Written()  # an operator not granted InferencePools (chart routing.enabled=false) made none
            raise
        if ownership.conflict(existing, uid) is not None:
            return Written() if desired is None else Written(not_ours_message(name))
        if desired is None:
            if existing is not None:
                kube.delete(
                    routing.POOL_API_VERSION, routing.POOL_KIND, namespace, pool_name, uid=existing["metadata"]["uid"]
                )
                log.info("%s/%s: spec.routing off: InferencePool deleted", namespace, name)
        else:
            _, reverted = kube.apply_exact(dict(desired))
            if reverted:
                log.info("%s/%s: InferencePool: reverted another field manager's change: %s", namespace, name, reverted)
    except Exception as e:
        if is_refusal(e):
            log.warning("%s/%s: the InferencePool was refused: %s", namespace, name, error_text(e))
            return Written(refusal_text(e), refused=True)
        raise
    return Written()


__all__ = [
    "PICKER_KINDS",
    "Gie",
    "Seen",
    "Written",
    "picker_available",
    "picker_drift",
    "read",
    "refusal_text",
    "write",
]
