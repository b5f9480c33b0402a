"""The I/O of spec.routing (blocking; the controller calls it in a thread): read the LLMServing's InferencePool and
write the one the render produced, the way autoscaling_io does KEDA's ScaledObject. What to write and what
status.routing says is decided elsewhere: `decide` (pure) from `routing.pool_status` (pure).

- `Gie`: whether InferencePools are served (the Gateway API Inference Extension's CRD), asked at most every
  SERVED_TTL_S (installing the CRD later is noticed). One per controller. Not served: status.routing says
  RoutingUnavailable and the serving runs behind its Service (never a silent skip).
- `read`: on every sync pass of a serving with spec.routing (level-triggered; InferencePools are not watched,
  since the CRD may be absent or not granted): the live pool, or why it cannot be used. Reads only.
- `write`: apply the rendered pool, or delete ours (by uid) when spec.routing is off. A refusal (an operator not
  granted InferencePools: chart `routing.enabled=false`; a webhook) is returned for status (PoolRefused), retried
  every REFUSED_RETRY_S by `decide`, never raised into a retry loop. A pool of that name not controlled by this
  LLMServing is never written (ownership.conflict).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import ownership, routing
from .kube import Kube, error_text, is_refusal

log = logging.getLogger(__name__)

SERVED_TTL_S = 15.0
REFUSED_RETRY_S = 60.0  # a refused pool is tried again this often (RBAC or a webhook may change)
REAPPLY_AFTER_S = 30.0  # a pool edited by hand is reverted at once, then at most this often
MISSING_REWRITE_AFTER_S = 5.0  # a pool deleted by hand is re-created at most this often
NOT_OURS = "NameConflict"


class Gie:
    """Whether InferencePools are served, cached for SERVED_TTL_S (thread-safe: read from the io pool)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._served: tuple[float, bool] | None = None

    def served(self, kube: Kube) -> bool:
        with self._lock:
            if self._served is not None and self.clock() - self._served[0] < SERVED_TTL_S:
                return self._served[1]
        served = kube.served(routing.POOL_API_VERSION, routing.POOL_PLURAL)
        with self._lock:
            self._served = (self.clock(), served)
        return served


@dataclasses.dataclass(frozen=True)
class Seen:
    """What one read found: the CRD served or not; our live pool (None: absent, unreadable or not ours);
    `problem`: why it cannot be used (the read refused, or a pool of that name not ours)."""

    installed: bool = False
    pool: Mapping[str, Any] | None = None
    problem: str | None = None


def not_ours_message(name: str) -> str:
    return f"{NOT_OURS}: InferencePool {routing.pool_name(name)} is not owned by this LLMServing"


def refusal_text(e: BaseException) -> str:
    if getattr(e, "status", None) == 403:
        return (
            f"the operator may not manage InferencePools ({error_text(e)}): install the chart with "
            "routing.enabled=true (docs/routing.md)"
        )
    return error_text(e)


def read(kube: Kube, gie: Gie, name: str, namespace: str, uid: str) -> Seen:
    """The InferencePool of `name`, as it is (reads only)."""
    if not gie.served(kube):
        return Seen(installed=False)
    try:
        pool = kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, namespace, routing.pool_name(name))
    except kube.errors.ForbiddenError as e:
        return Seen(installed=True, problem=refusal_text(e))
    if pool is not None and ownership.conflict(pool, uid) is not None:
        return Seen(installed=True, problem=not_ours_message(name))
    return Seen(installed=True, pool=pool)


@dataclasses.dataclass(frozen=True)
class Written:
    """What `write` did: `error` (None: done, or nothing to do) and whether the apiserver refused it."""

    error: str | None = None
    refused: bool = False


def write(
    kube: Kube, gie: Gie, desired: Mapping[str, Any] | None, name: str, namespace: str, uid: str
) -> Written | None:
    """Make the InferencePool match `desired` (None: routing off, delete ours). A refusal (4xx) is returned, not
    raised: the Deployment and Service serve meanwhile. None: nothing was tried (the CRD not served); any other
    failure is raised."""
    if not gie.served(kube):
        return None
    pool_name = routing.pool_name(name)
    try:
        try:
            existing = kube.get(routing.POOL_API_VERSION, routing.POOL_KIND, namespace, pool_name)
        except kube.errors.ForbiddenError:
            if desired is None:
                return Written()  # an operator not granted InferencePools (chart routing.enabled=false) made none
            raise
        if ownership.conflict(existing, uid) is not None:
            return None if desired is None else Written(not_ours_message(name))
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


__all__ = ["Gie", "Seen", "Written", "read", "refusal_text", "write"]
