"""The I/O of autoscaling (blocking; handlers call it in a thread): keep the ScaledObject as spec.autoscaling
says, read KEDA's state back, and put it into a computed status. Decisions live in `autoscaling` (pure).

- `sync`: apply the rendered ScaledObject, or delete ours when spec.autoscaling is gone. Nothing is
  applied while KEDA's CRD is not served; status then says KEDANotInstalled. A refusal (an operator not
  granted ScaledObjects: chart `autoscaling.enabled=false`; a webhook) is kept for status
  (ScaledObjectRefused) and retried every REFUSED_RETRY_S, never raised into a reconcile retry loop.
- `read_state`: on every status pass (level-triggered; ScaledObjects are not watched, since KEDA may be
  absent or not granted): re-applies a missing ScaledObject (KEDA installed later, or deleted by hand) or
  one whose spec differs from the rendered one (edited by hand: at once, then at most every REAPPLY_AFTER_S), then reads
  it and its HPA into an `AutoscalingState`.
- `apply_to_status`: sets status.autoscaling and the Autoscaling condition of a computed status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from . import autoscaling, drift
from . import spec as api
from .kube import Kube, error_text, is_refusal

log = logging.getLogger(__name__)

SERVED_TTL_S = 15.0
REFUSED_RETRY_S = 60.0  # a refused ScaledObject is tried again this often (RBAC or a webhook may change)
REAPPLY_AFTER_S = 30.0  # a ScaledObject edited by hand is reverted at most this often
NOT_OURS = "NameConflict"


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served: tuple[float, bool] | None = None
        self.apply_errors: dict[tuple[str, str], str] = {}
        self.refused_at: dict[tuple[str, str], float] = {}  # monotonic: when the apiserver last refused
        self.reverted_at: dict[tuple[str, str], float] = {}  # monotonic: the last re-apply for a hand edit


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
    """Make the ScaledObject match spec.autoscaling. A refusal (4xx) is kept for status and not raised:
    the Deployment and Service are applied and serve at spec.replicas meanwhile."""
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
            _, reverted = kube.apply_exact(desired)
            if reverted:
                log.info("%s/%s: ScaledObject: reverted what another field manager changed: %s", *key, reverted)
    except Exception as e:
        with _CACHE.lock:
            _CACHE.apply_errors[key] = _refusal_text(e)
            if is_refusal(e):
                _CACHE.refused_at[key] = time.monotonic()
        if is_refusal(e):
            log.warning("%s/%s: the ScaledObject was refused: %s", namespace, name, error_text(e))
            return
        raise
    with _CACHE.lock:
        _CACHE.apply_errors.pop(key, None)
        _CACHE.refused_at.pop(key, None)


def _refusal_text(e: BaseException) -> str:
    if getattr(e, "status", None) == 403:
        return (
            f"the operator may not manage keda.sh ScaledObjects ({error_text(e)}): install the chart with "
            "autoscaling.enabled=true (docs/autoscaling.md)"
        )
    return error_text(e)


def _retry_due(key: tuple[str, str], now: float) -> bool:
    with _CACHE.lock:
        refused = _CACHE.refused_at.get(key)
    return refused is None or now - refused >= REFUSED_RETRY_S


def read_state(
    kube: Kube, name: str, namespace: str, uid: str, spec: api.LLMServingSpec, prometheus_url: str
) -> autoscaling.AutoscalingState:
    if spec.autoscaling is None:
        return autoscaling.AutoscalingState(None, None)
    installed = keda_served(kube)
    key = (namespace, name)
    so = hpa = None
    if installed:
        so_name = autoscaling.scaled_object_name(name)
        try:
            so = kube.get(autoscaling.API_VERSION, autoscaling.KIND, namespace, so_name)
            readable = True
        except kube.errors.ForbiddenError as e:
            # not granted (chart autoscaling.enabled=false): status says so, nothing is retried here
            with _CACHE.lock:
                _CACHE.apply_errors[key] = _refusal_text(e)
            readable = False
        if not readable:
            pass
        elif so is None:
            if _retry_due(key, time.monotonic()):
                try:
                    sync(kube, name, namespace, uid, spec, prometheus_url)
                except Exception as e:
                    log.warning("%s/%s: applying the ScaledObject failed: %s", namespace, name, error_text(e))
        elif not _ours(so, uid):
            with _CACHE.lock:
                _CACHE.apply_errors[key] = f"{NOT_OURS}: ScaledObject {so_name} is not owned by this LLMServing"
            so = None
        else:
            desired = autoscaling.render_scaled_object(name, namespace, uid, spec, prometheus_url)
            now = time.monotonic()
            with _CACHE.lock:
                due = now - _CACHE.reverted_at.get(key, -1e9) > REAPPLY_AFTER_S
            if desired is not None and drift.differences(desired, so) and due:
                with _CACHE.lock:
                    _CACHE.reverted_at[key] = now
                try:
                    sync(kube, name, namespace, uid, spec, prometheus_url)
                except Exception as e:
                    log.warning("%s/%s: re-applying the ScaledObject failed: %s", namespace, name, error_text(e))
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
        for d in (_CACHE.apply_errors, _CACHE.refused_at, _CACHE.reverted_at):
            d.pop((namespace, name), None)


__all__ = ["apply_to_status", "forget", "keda_served", "read_state", "sync"]
