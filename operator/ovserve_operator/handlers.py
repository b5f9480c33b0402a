"""Thin kopf glue. All decisions live in render / readback / status (pure, unit-tested).

- create / update / resume: render the Deployment + Service and server-side apply them.
- indexes of the LLMServings, their runtime pods and their Deployments; every indexed event marks
  the owning LLMServing dirty.
- one status controller task (started at startup): for every LLMServing that is dirty or due (every
  `status_interval` seconds) read the runtime reports, recompute the whole status, patch it only when
  it changed, post the Events of the condition transitions, and re-apply the children if they
  drifted or vanished. No per-object daemon, hence no finalizer: deleting an LLMServing never waits
  for the operator, and the children go by garbage collection (ownerReferences).

The process starts kopf only while it holds the leader Lease (cli.py), so nothing here checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import logging
import time
from typing import Any

import kopf
from pydantic import ValidationError

from . import autoscaling_io, readback, render, status
from . import spec as api
from .health import HealthState
from .kube import Kube, error_text
from .settings import Settings

log = logging.getLogger(__name__)

RUNTIME_POD_LABELS = {
    render.LABEL_MANAGED_BY: render.MANAGED_BY,
    render.LABEL_COMPONENT: "runtime",
    render.LABEL_OWNER: kopf.PRESENT,
}
REAPPLY_AFTER_S = 30.0
CONCURRENCY = 16

Key = tuple[str, str]


class _Context:
    def __init__(self) -> None:
        self.settings = Settings()
        self.kube: Kube | None = None
        self.health = HealthState()
        self.active: set[Key] = set()  # seen by create/update/resume (i.e. after the indexes filled)
        self.dirty: set[Key] = set()
        self.wake: asyncio.Event | None = None
        self.last_status: dict[Key, dict[str, Any]] = {}
        self.applied_at: dict[Key, float] = {}
        self.task: asyncio.Task | None = None


CTX = _Context()


def configure(settings: Settings, kube: Kube, health: HealthState) -> None:
    CTX.settings, CTX.kube, CTX.health = settings, kube, health


def _kube() -> Kube:
    if CTX.kube is None:
        CTX.kube = Kube()
    return CTX.kube


def _mark(namespace: str, name: str) -> None:
    """Mark an LLMServing dirty (call from the event loop only)."""
    CTX.dirty.add((namespace, name))
    if CTX.wake is not None:
        CTX.wake.set()


def _pod_snapshot(body: kopf.Body) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return copy.deepcopy(
        {
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "deletionTimestamp": meta.get("deletionTimestamp"),
            },
            "status": dict(body.get("status") or {}),
        }
    )


# ------------------------------------------------------------------------------------- indexes
# Async indexers run in the event loop, so they may mark objects dirty directly.


@kopf.index(api.GROUP, api.VERSION, api.PLURAL)
async def llmservings(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
    _mark(namespace, name)
    meta = body.get("metadata") or {}
    return {
        (namespace, name): copy.deepcopy(
            {
                "apiVersion": body.get("apiVersion", api.API_VERSION),
                "kind": body.get("kind", api.KIND),
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": meta.get("uid"),
                    "generation": meta.get("generation"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "spec": dict(body.get("spec") or {}),
                "status": dict(body.get("status") or {}),
            }
        )
    }


@kopf.index("pods", labels=RUNTIME_POD_LABELS)
async def runtime_pods(body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> dict:
    owner = labels[render.LABEL_OWNER]
    _mark(namespace, owner)
    return {(namespace, owner): _pod_snapshot(body)}


@kopf.index(
    "apps",
    "v1",
    "deployments",
    labels={render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_OWNER: kopf.PRESENT},
)
async def runtime_deployments(
    namespace: str, name: str, annotations: kopf.Annotations, status: kopf.Status, **_: Any
) -> dict:
    _mark(namespace, name)  # e.g. ReplicaFailure (pods refused by admission) shows only here
    return {
        (namespace, name): {
            "hash": annotations.get(render.ANNOTATION_TEMPLATE_HASH, ""),
            "conditions": copy.deepcopy(list(status.get("conditions") or [])),
        }
    }


# ------------------------------------------------------------------------------------- lifecycle


@kopf.on.startup()
async def _startup(
    llmservings: kopf.Index, runtime_pods: kopf.Index, runtime_deployments: kopf.Index, **_: Any
) -> None:
    CTX.wake = asyncio.Event()
    CTX.task = asyncio.create_task(
        status_controller(llmservings, runtime_pods, runtime_deployments), name="ovserve status controller"
    )
    CTX.health.kopf_running = True
    CTX.health.beat()


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    CTX.health.kopf_running = False
    if CTX.task is not None:
        CTX.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await CTX.task
        CTX.task = None


# ------------------------------------------------------------------------------------- reconcile


def _apply_children(name: str, namespace: str, uid: str, spec: api.LLMServingSpec) -> list[str]:
    kube = _kube()
    applied = []
    for obj in render.render(name, namespace, uid, spec, CTX.settings):
        kube.apply(obj)
        applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
    autoscaling_io.sync(kube, name, namespace, uid, spec, CTX.settings.prometheus_url)  # autoscaling hook
    CTX.applied_at[(namespace, name)] = time.monotonic()
    return applied


@kopf.on.resume(api.GROUP, api.VERSION, api.PLURAL)
@kopf.on.create(api.GROUP, api.VERSION, api.PLURAL)
@kopf.on.update(api.GROUP, api.VERSION, api.PLURAL)
async def reconcile(name: str, namespace: str, uid: str, spec: kopf.Spec, logger: logging.Logger, **_: Any) -> None:
    # async: runs in the loop, so CTX is only ever touched from the loop; API calls go to a thread
    key = (namespace, name)
    CTX.active.add(key)
    try:
        typed = api.parse_spec(dict(spec))
    except ValidationError as e:
        # The status controller records InvalidSpec; retrying cannot help.
        _mark(namespace, name)
        raise kopf.PermanentError(f"invalid spec: {e}") from e
    try:
        applied = await asyncio.to_thread(_apply_children, name, namespace, uid, typed)
    except Exception as e:
        CTX.health.inc("ovserve_operator_apply_errors_total")
        raise kopf.TemporaryError(f"applying children failed: {error_text(e)}", delay=5) from e
    CTX.health.inc("ovserve_operator_applies_total")
    logger.info("applied %s", ", ".join(applied))
    _mark(namespace, name)


# ------------------------------------------------------------------------------------- status


def _event_body(obj: dict[str, Any], ev: status.Event) -> dict[str, Any]:
    meta = obj["metadata"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", api.API_VERSION),
            "kind": obj.get("kind", api.KIND),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": ev.type,
        "reason": ev.reason,
        "message": ev.message[:1024],
        "source": {"component": "ovserve-operator"},
        "reportingComponent": "ovserve-operator",
        "reportingInstance": CTX.settings.identity[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def refresh(
    obj: dict[str, Any],
    *,
    pods_index: Any,
    deployments_index: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> bool:
    """One status cycle for one LLMServing (an index snapshot). Returns True when status was patched."""
    meta = obj["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta.get("uid") or ""
    key = (namespace, name)
    generation = meta.get("generation")
    current = copy.deepcopy(obj.get("status") or {})
    previous = CTX.last_status.get(key) or current
    now = dt.datetime.now(dt.UTC)
    try:
        typed = api.parse_spec(dict(obj.get("spec") or {}))
    except ValidationError as e:
        result = status.invalid_spec_status(
            name=name,
            namespace=namespace,
            generation=generation,
            message=f"invalid spec: {e}",
            previous=previous,
            now=now,
        )
    else:
        desired_hash = render.pod_template(name, typed, CTX.settings)["metadata"]["annotations"][
            render.ANNOTATION_TEMPLATE_HASH
        ]
        pods = list(pods_index.get(key, [])) if pods_index is not None else []
        deployed = list(deployments_index.get(key, [])) if deployments_index is not None else []
        readings = await readback.read_reports(pods, timeout=CTX.settings.status_http_timeout_s)
        result = status.compute(
            name=name,
            namespace=namespace,
            generation=generation,
            spec=typed,
            pods=pods,
            readings=readings,
            previous=previous,
            desired_hash=desired_hash,
            now=now,
            deployment=deployed[0] if deployed else None,
        )
        # autoscaling hook: status.autoscaling and the Autoscaling condition from KEDA's ScaledObject and HPA
        try:
            scaling = await asyncio.to_thread(
                autoscaling_io.read_state, _kube(), name, namespace, uid, typed, CTX.settings.prometheus_url
            )
        except Exception as e:
            logger.warning("%s/%s: reading the autoscaler failed: %s", namespace, name, error_text(e))
            scaling = None
        autoscaling_io.apply_to_status(
            result.status, scaling, previous=previous, generation=generation, now=now.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        # Children drifted (deleted or edited by hand) or missing: re-apply, at most every 30 s.
        since = time.monotonic() - CTX.applied_at.setdefault(key, time.monotonic())
        if (not deployed or deployed[0]["hash"] != desired_hash) and since > REAPPLY_AFTER_S:
            logger.info(
                "%s/%s: children missing or outdated (deployment hash %s, want %s): re-applying",
                namespace,
                name,
                deployed[0]["hash"] if deployed else None,
                desired_hash,
            )
            try:
                await asyncio.to_thread(_apply_children, name, namespace, uid, typed)
            except Exception as e:
                logger.warning("%s/%s: re-apply failed: %s", namespace, name, error_text(e))

    if status.same(result.status, current) and status.same(result.status, previous):
        return False
    kube = _kube()
    await asyncio.to_thread(kube.patch_status, namespace, name, status.status_patch(result.status, current))
    CTX.last_status[key] = result.status
    CTX.health.inc("ovserve_operator_status_patches_total")
    for ev in result.events:
        try:
            await asyncio.to_thread(kube.create_event, namespace, _event_body(obj, ev))
            CTX.health.inc(f'ovserve_operator_events_total{{type="{ev.type}",reason="{ev.reason}"}}')
        except Exception as e:
            logger.warning("%s/%s: posting event %s failed: %s", namespace, name, ev.reason, error_text(e))
    return True


async def status_controller(llms_index: Any, pods_index: Any, deployments_index: Any) -> None:
    """Refresh dirty LLMServings at once and every one at least every `status_interval` seconds."""
    assert CTX.wake is not None
    interval = CTX.settings.status_interval_s
    due: dict[Key, float] = {}
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(key: Key) -> None:
        async with sem:
            snaps = list(llms_index.get(key, []))
            if not snaps:
                return
            try:
                await refresh(snaps[0], pods_index=pods_index, deployments_index=deployments_index)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                CTX.health.inc("ovserve_operator_status_errors_total")
                log.warning("%s/%s: status refresh failed: %s", key[0], key[1], error_text(e))
                CTX.last_status.pop(key, None)

    while True:
        try:
            await _cycle(llms_index, due, interval, one)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let one bad cycle stop the controller
            log.exception("status controller cycle failed")
            await asyncio.sleep(1)


async def _cycle(llms_index: Any, due: dict[Key, float], interval: float, one: Any) -> None:
    """One pass: refresh what is dirty or due, then sleep until the next due time or a wake-up."""
    assert CTX.wake is not None
    CTX.wake.clear()
    now = time.monotonic()
    present = {k for k in CTX.active if k in llms_index}
    for gone in set(CTX.active) - present:  # deleted: forget it
        CTX.active.discard(gone)
        for cache in (CTX.last_status, CTX.applied_at, due):
            cache.pop(gone, None)
        autoscaling_io.forget(*gone)
    todo = [k for k in present if k in CTX.dirty or due.get(k, 0.0) <= now]
    CTX.dirty.difference_update(todo)
    for k in todo:
        due[k] = now + interval
    if todo:
        await asyncio.gather(*(one(k) for k in todo))
    CTX.health.beat()
    CTX.health.counters["ovserve_operator_llmservings"] = float(len(present))
    wait = max(0.05, min([*(d - time.monotonic() for d in due.values()), interval]))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(CTX.wake.wait(), wait)
        await asyncio.sleep(0.2)  # woken by an event: coalesce the burst
