"""The I/O of autoscaling (blocking; handlers call it in a thread): keep the ScaledObject as spec.autoscaling
says, read KEDA's state back, and put it into a computed status. Decisions live in `autoscaling` (pure).

- `sync`: apply the rendered ScaledObject, or delete ours when spec.autoscaling is gone. Nothing is
  applied while KEDA's CRD is not served; status then says KEDANotInstalled.
- `read_state`: re-applies a missing ScaledObject (KEDA installed later, or deleted by hand), then reads
  it and its HPA into an `AutoscalingState`.
- `apply_to_status`: sets status.autoscaling and the Autoscaling condition of a computed status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from . import autoscaling
from . import spec as api
from .kube import Kube, error_text

log = logging.getLogger(__name__)

SERVED_TTL_S = 15.0
NOT_OURS = "NameConflict"


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served: tuple[float, bool] | None = None
        self.apply_errors: dict[tuple[str, str], str] = {}


_CACHE = _Cache()


def keda_served(kube: Kube) -> bool:
    """Whether ScaledObjects are served; cached for SERVED_TTL_S (installing KEDA later is noticed)."""
    with _CACHE.lock:
        if _CACHE.served is not None and time.monotonic() - _CACHE.served[0] < SERVED_TTL_S:
            return _CACHE.served[1]
    served = kube.served(f"{autoscaling.GROUP}/v1alpha1", autoscaling.PLURAL)
    with _CACHE.lock:
        _CACHE.served = (time.monotonic(), served)
    return served


def _ours(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def sync(kube: Kube, name: str, namespace: str, uid: str, spec: api.LLMServingSpec, prometheus_url: str) -> None:
    """Make the ScaledObject match spec.autoscaling; an apiserver refusal is kept for status."""
    key = (namespace, name)
    if not keda_served(kube):
        return
    desired = autoscaling.render_scaled_object(name, namespace, uid, spec, prometheus_url)
    so_name = autoscaling.scaled_object_name(name)
    try:
        try:
            existing = kube.get(autoscaling.API_VERSION, autoscaling.KIND, namespace, so_name)
        except kube.errors.ForbiddenError:
            if desired is None:
                return  # an operator not granted ScaledObjects (chart autoscaling.enabled=false) made none
            raise
        if existing is not None and not _ours(existing, uid):
            if desired is None:
                return
            # someone else's ScaledObject of that name: never taken over (status says so)
            with _CACHE.lock:
                _CACHE.apply_errors[key] = f"{NOT_OURS}: ScaledObject {so_name} is not owned by this LLMServing"
            return
        if desired is None:
            if existing is not None:
                # The HPA goes with it (KEDA owns it); spec.replicas keeps its last autoscaled value.
                kube.delete(
                    autoscaling.API_VERSION, autoscaling.KIND, namespace, so_name, uid=existing["metadata"].get("uid")
                )
        else:
            kube.apply(desired)
    except Exception as e:
        with _CACHE.lock:
            _CACHE.apply_errors[key] = error_text(e)
        raise
    with _CACHE.lock:
        _CACHE.apply_errors.pop(key, None)


def read_state(
    kube: Kube, name: str, namespace: str, uid: str, spec: api.LLMServingSpec, prometheus_url: str
) -> autoscaling.AutoscalingState:
    if spec.autoscaling is None:
        return autoscaling.AutoscalingState(None, None)
    installed = keda_served(kube)
    so = hpa = None
    if installed:
        so_name = autoscaling.scaled_object_name(name)
        so = kube.get(autoscaling.API_VERSION, autoscaling.KIND, namespace, so_name)
        if so is None:
            try:
                sync(kube, name, namespace, uid, spec, prometheus_url)
            except Exception as e:
                log.warning("%s/%s: applying the ScaledObject failed: %s", namespace, name, error_text(e))
        elif not _ours(so, uid):
            with _CACHE.lock:
                _CACHE.apply_errors[(namespace, name)] = (
                    f"{NOT_OURS}: ScaledObject {so_name} is not owned by this LLMServing"
                )
            so = None
        else:
            hpa_name = ((so.get("status") or {}).get("hpaName")) or autoscaling.hpa_name(name)
            hpa = kube.get("autoscaling/v2", "HorizontalPodAutoscaler", namespace, hpa_name)
    with _CACHE.lock:
        apply_error = _CACHE.apply_errors.get((namespace, name))
    return autoscaling.autoscaling_status(
        spec, keda_installed=installed, scaled_object=so, hpa=hpa, apply_error=apply_error
    )


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


def forget(namespace: str, name: str) -> None:
    with _CACHE.lock:
        _CACHE.apply_errors.pop((namespace, name), None)


__all__ = ["apply_to_status", "forget", "keda_served", "read_state", "sync"]
