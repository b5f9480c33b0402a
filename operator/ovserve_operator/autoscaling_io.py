"""The I/O of autoscaling (blocking; the controller calls it in a thread): read KEDA's ScaledObject and its HPA,
and write the ScaledObject the render produced. What to write and what status says is decided elsewhere:
`decide` (pure) from `autoscaling` (pure).

- `Keda`: whether ScaledObjects are served (KEDA's CRD), asked at most every kube.SERVED_TTL_S (installing KEDA later
  is noticed). One per controller.
- `read`: on every sync pass (level-triggered; ScaledObjects are not watched, since KEDA may be absent or not
  granted): the live ScaledObject and its HPA, or why they cannot be read. Reads only.
- `write`: apply the rendered ScaledObject, or delete ours when spec.autoscaling is gone. A refusal (an operator
  not granted ScaledObjects: chart `autoscaling.enabled=false`; a webhook) is returned for status
  (ScaledObjectRefused), retried every REFUSED_RETRY_S by `decide`, never raised into a retry loop. The
  ownership check is the children's (ownership.conflict): a ScaledObject of that name not controlled by this
  LLMServing is never written.
- `apply_to_status`: sets status.autoscaling and the Autoscaling condition of a computed status.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import autoscaling, ownership, scaledobject
from .kube import Kube, ServedCache, error_text, is_refusal

log = logging.getLogger(__name__)

REFUSED_RETRY_S = 60.0  # a refused ScaledObject is tried again this often (RBAC or a webhook may change)
REAPPLY_AFTER_S = 30.0  # a ScaledObject edited by hand is reverted at most this often
NOT_OURS = "NameConflict"


class Keda(ServedCache):
    """Whether KEDA's ScaledObjects are served (kube.ServedCache)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(f"{scaledobject.GROUP}/v1alpha1", scaledobject.PLURAL, clock)


@dataclasses.dataclass(frozen=True)
class Seen:
    """What one read found: KEDA served or not; the live ScaledObject (None: absent, unreadable or not ours) and
    its HPA; `problem`: why it cannot be used (the read refused, or a ScaledObject of that name not ours)."""

    installed: bool = False
    scaled_object: Mapping[str, Any] | None = None
    hpa: Mapping[str, Any] | None = None
    problem: str | None = None
    readable: bool = True
    ours: bool = True  # False: a ScaledObject of that name is someone else's


def not_ours_message(so_name: str) -> str:
    return f"{NOT_OURS}: ScaledObject {so_name} is not owned by this LLMServing"


def refusal_text(e: BaseException) -> str:
    if getattr(e, "status", None) == 403:
        return (
            f"the operator may not manage keda.sh ScaledObjects ({error_text(e)}): install the chart with "
            "autoscaling.enabled=true (docs/autoscaling.md)"
        )
    return error_text(e)


def read(kube: Kube, keda: Keda, name: str, namespace: str, uid: str) -> Seen:
    """The ScaledObject of `name` and its HPA, as they are (reads only)."""
    if not keda.served(kube):
        return Seen(installed=False)
    so_name = scaledobject.scaled_object_name(name)
    try:
        so = kube.get(scaledobject.API_VERSION, scaledobject.KIND, namespace, so_name)
    except kube.errors.ForbiddenError as e:
        # not granted (chart autoscaling.enabled=false): status says so, nothing is retried here
        return Seen(installed=True, problem=refusal_text(e), readable=False)
    if so is None:
        return Seen(installed=True)
    if ownership.conflict(so, uid) is not None:
        return Seen(installed=True, problem=not_ours_message(so_name), ours=False)
    hpa_name = ((so.get("status") or {}).get("hpaName")) or scaledobject.hpa_name(name)
    hpa = kube.get("autoscaling/v2", "HorizontalPodAutoscaler", namespace, hpa_name)
    return Seen(installed=True, scaled_object=so, hpa=hpa)


@dataclasses.dataclass(frozen=True)
class Written:
    """What `write` did: `error` (None: done, or nothing to do) and whether the apiserver refused it."""

    error: str | None = None
    refused: bool = False


def write(
    kube: Kube, keda: Keda, desired: Mapping[str, Any] | None, name: str, namespace: str, uid: str
) -> Written | None:
    """Make the ScaledObject match `desired` (None: autoscaling off, delete ours). A refusal (4xx) is returned, not
    raised: the Deployment and Service are applied and serve at spec.replicas meanwhile. None: nothing was tried
    (KEDA not served); any other failure is raised."""
    if not keda.served(kube):
        return None
    so_name = scaledobject.scaled_object_name(name)
    try:
        try:
            existing = kube.get(scaledobject.API_VERSION, scaledobject.KIND, namespace, so_name)
        except kube.errors.ForbiddenError:
            if desired is None:
                return Written()  # an operator not granted ScaledObjects (chart autoscaling.enabled=false) made none
            raise
        if ownership.conflict(existing, uid) is not None:
            # someone else's ScaledObject of that name: never taken over (status says so)
            return None if desired is None else Written(not_ours_message(so_name))
        if desired is None:
            if existing is not None:
                # The HPA goes with it (KEDA owns it); spec.replicas keeps its last autoscaled value.
                kube.delete(
                    scaledobject.API_VERSION, scaledobject.KIND, namespace, so_name, uid=existing["metadata"].get("uid")
                )
        else:
            _, reverted = kube.apply_exact(dict(desired))
            if reverted:
                log.info("%s/%s: ScaledObject: reverted another field manager's change: %s", namespace, name, reverted)
    except Exception as e:
        if is_refusal(e):
            log.warning("%s/%s: the ScaledObject was refused: %s", namespace, name, error_text(e))
            return Written(refusal_text(e), refused=True)
        raise
    return Written()


def apply_to_status(
    status: dict[str, Any],
    state: autoscaling.AutoscalingState | None,
    *,
    previous: Mapping[str, Any] | None,
    generation: int | None,
    now: str,
) -> None:
    """Set status.autoscaling and the Autoscaling condition in a status `status.compute` produced.

    `state` None (KEDA's state could not be read this cycle): keep what `previous` said.
    """
    if state is None:
        prev = previous or {}
        if prev.get("autoscaling") is not None:
            status["autoscaling"] = prev["autoscaling"]
        kept = [c for c in prev.get("conditions") or [] if c.get("type") == autoscaling.CONDITION]
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != autoscaling.CONDITION]
        status["conditions"] += kept
        return
    if state.status is None:
        status.pop("autoscaling", None)
    else:
        status["autoscaling"] = state.status
    status["conditions"] = autoscaling.merge_condition(
        status.get("conditions") or [],
        state.condition,
        previous=(previous or {}).get("conditions"),
        generation=generation,
        now=now,
    )


__all__ = ["Keda", "Seen", "Written", "apply_to_status", "read", "refusal_text", "write"]
