"""Thin kopf glue. All decisions live in render / readback / rules + status / statusqueue (unit-tested).

- create / update / resume: render the Deployment + Service and server-side apply them.
- indexes of the LLMServings, their runtime pods and their Deployments; every indexed event marks
  the owning LLMServing dirty, except the echo of the operator's own status patch (echo.py).
- one status controller task (statusqueue.StatusController, started at startup): for every LLMServing
  that is dirty or due, `refresh` reads the runtime reports (and, for pods stuck creating, their mount
  Events), recomputes the whole status, patches it only when it changed (no heartbeat), posts the
  Events of the condition transitions, and re-applies the children if they drifted or vanished. No
  per-object daemon, hence no finalizer: deleting an LLMServing never waits for the operator, and the
  children go by garbage collection (ownerReferences).
- an apply the apiserver refuses (4xx) is remembered with its generation: status shows it (ApplyFailed).

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

from . import (
    autoscaling,
    autoscaling_io,
    drift,
    echo,
    networkpolicy,
    ownership,
    podview,
    policy,
    readback,
    reasons,
    render,
    resourcedefaults,
    rolloutbudget,
    status,
    statusqueue,
)
from . import spec as api
from .health import HealthState
from .kube import Kube, error_status, error_text, is_refusal
from .rules import ApplyError
from .settings import Settings

log = logging.getLogger(__name__)

RUNTIME_POD_LABELS = {
    render.LABEL_MANAGED_BY: render.MANAGED_BY,
    render.LABEL_COMPONENT: "runtime",
    render.LABEL_OWNER: kopf.PRESENT,
}
REAPPLY_AFTER_S = 30.0  # a child edited by hand is reverted at once, then at most this often
MISSING_REAPPLY_AFTER_S = 5.0  # children missing or drifted are re-applied at most this often after an apply
REFUSED_RETRY_S = 60.0  # a refused apply is retried this often (a webhook or a quota may change)
EVENTS_EVERY_S = 10.0  # a creating pod's Events are read at most this often
CONCURRENCY = 16


class _Context:
    def __init__(self) -> None:
        self.kube: Kube | None = None
        self.health = HealthState()
        self.task: asyncio.Task | None = None
        self.events_forbidden = False  # RBAC without `list events`: stop asking, say it once
        self.reset(Settings())

    def reset(self, settings: Settings) -> None:
        """The settings and the state built from them (fresh: nothing remembered)."""
        self.settings = settings
        self.queue = statusqueue.WorkQueue(settings.status_interval_s, resync_per_s=settings.status_resync_per_s)
        self.memories = statusqueue.Memories(settings.readback_grace_s)
        self.own_writes = echo.OwnWrites()
        self.budget = rolloutbudget.RolloutBudget(settings.rollout_budget, settings.rollout_budget_timeout_s)


CTX = _Context()


def configure(settings: Settings, kube: Kube, health: HealthState) -> None:
    CTX.kube, CTX.health = kube, health
    CTX.reset(settings)


def _kube() -> Kube:
    if CTX.kube is None:
        CTX.kube = Kube()
    return CTX.kube


def _mark(namespace: str, name: str) -> None:
    """Mark an LLMServing dirty (call from the event loop only)."""
    CTX.queue.mark((namespace, name))


def _pod_snapshot(body: kopf.Body) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return copy.deepcopy(
        {
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "creationTimestamp": meta.get("creationTimestamp"),
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "deletionTimestamp": meta.get("deletionTimestamp"),
            },
            # init container names: an init container without a status yet still counts; what the containers
            # run: a pod of a hand-edited template is not of the current spec (status.is_current)
            "spec": {
                "initContainers": [{"name": c.get("name")} for c in spec.get("initContainers") or []],
                "containers": [
                    {k: c[k] for k in ("name", "image", "command", "args", "env", "resources") if k in c}
                    for c in spec.get("containers") or []
                ],
            },
            "status": dict(body.get("status") or {}),
        }
    )


# ------------------------------------------------------------------------------------- indexes
# Async indexers run in the event loop, so they may mark objects dirty directly.


@kopf.index(api.GROUP, api.VERSION, api.PLURAL)
async def llmservings(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
    if CTX.own_writes.is_echo((namespace, name), body):
        CTX.health.inc("ovserve_operator_status_echoes_total")  # our own patch: nothing to refresh
    else:
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


# Group and version given: a bare "pods" makes kopf scan every API group, and one unavailable aggregated API
# (a stopped metrics adapter whose APIService is still registered) crash-looped the operator at start.
@kopf.index("", "v1", "pods", labels=RUNTIME_POD_LABELS)
async def runtime_pods(body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> dict:
    owner = labels[render.LABEL_OWNER]
    _mark(namespace, owner)
    return {(namespace, owner): _pod_snapshot(body)}


CHILD_LABELS = {render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_OWNER: kopf.PRESENT}


def _child_snapshot(body: kopf.Body) -> dict[str, Any]:
    """What drift is judged on: the live spec and labels (and the Deployment's conditions)."""
    meta = body.get("metadata") or {}
    return copy.deepcopy(
        {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": list(meta.get("ownerReferences") or []),
            },
            "spec": dict(body.get("spec") or {}),
            "status": {"conditions": list((body.get("status") or {}).get("conditions") or [])},
        }
    )


@kopf.index("apps", "v1", "deployments", labels=CHILD_LABELS)
async def runtime_deployments(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
    _mark(namespace, name)  # e.g. ReplicaFailure (pods refused by admission) shows only here
    return {(namespace, name): _child_snapshot(body)}


@kopf.index("", "v1", "services", labels=CHILD_LABELS)
async def runtime_services(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
    _mark(namespace, name)
    return {(namespace, name): _child_snapshot(body)}


class _QuietChildEvents(logging.Filter):
    """kopf logs every event handler's success at INFO: one line per Deployment status change is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'_child_event' succeeded" not in record.getMessage()


logging.getLogger("kopf.objects").addFilter(_QuietChildEvents())


# An index drops a deleted object without calling its indexer: these mark the owner of a child deleted by
# hand, so that it is re-applied at once (and the status says it is missing meanwhile).
@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
async def _child_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
    _mark(namespace, labels[render.LABEL_OWNER])


# ------------------------------------------------------------------------------------- lifecycle


@kopf.on.startup()
async def _startup(
    llmservings: kopf.Index,
    runtime_pods: kopf.Index,
    runtime_deployments: kopf.Index,
    runtime_services: kopf.Index,
    **_: Any,
) -> None:
    CTX.queue.wake = asyncio.Event()  # of this loop
    CTX.queue.wake.set()

    async def refresh_one(key: statusqueue.Key, snapshot: dict[str, Any]) -> None:
        CTX.health.inc("ovserve_operator_status_refreshes_total")
        await refresh(
            snapshot, pods_index=runtime_pods, deployments_index=runtime_deployments, services_index=runtime_services
        )

    def on_cycle(count: int) -> None:
        CTX.health.beat()
        CTX.health.counters["ovserve_operator_llmservings"] = float(count)

    def on_error(key: statusqueue.Key, e: BaseException) -> None:
        CTX.health.inc("ovserve_operator_status_errors_total")
        log.warning("%s/%s: status refresh failed: %s", key[0], key[1], error_text(e))
        if (memory := CTX.memories.get(key)) is not None:
            memory.last_status = None

    controller = statusqueue.StatusController(
        CTX.queue,
        llmservings,
        refresh_one,
        on_gone=_forget,
        on_cycle=on_cycle,
        on_error=on_error,
        concurrency=CONCURRENCY,
    )
    CTX.task = asyncio.create_task(controller.run(), name="ovserve status controller")
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


def _forget(key: statusqueue.Key) -> None:
    """A deleted LLMServing: drop what the controller and the autoscaling hook remember of it."""
    CTX.memories.forget(key)
    CTX.own_writes.forget(key)
    CTX.budget.forget(key)
    autoscaling_io.forget(*key)


# ------------------------------------------------------------------------------------- reconcile


class ApplyRefused(Exception):
    """The children were not applied and retrying the same spec cannot help soon: the apiserver refused one
    (4xx, ApplyFailed), the tenant policy denies the spec (PolicyDenied) or a name is taken (NameConflict)."""

    def __init__(self, target: str, code: int, message: str, reason: str = reasons.APPLY_FAILED) -> None:
        super().__init__(f"{target}: HTTP {code}: {message}" if reason == reasons.APPLY_FAILED else message)
        self.target, self.code, self.message, self.reason = target, code, message, reason


def _apply_children(
    name: str, namespace: str, uid: str, spec: api.LLMServingSpec, generation: int | None = None
) -> list[str]:
    kube = _kube()
    if denied := policy.violations(spec, CTX.settings):
        raise ApplyRefused("spec", 0, "; ".join(denied), reasons.POLICY_DENIED)
    objs = render.render(name, namespace, uid, spec, CTX.settings)
    live: dict[str, dict[str, Any] | None] = {}
    for obj in objs:  # all checked before any is written: no half-applied takeover
        meta = obj["metadata"]
        existing = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if why := ownership.conflict(existing, uid):
            raise ApplyRefused(f"{obj['kind']}/{meta['name']}", 409, why, reasons.NAME_CONFLICT)
        live[obj["kind"]] = existing
    objs = _within_rollout_budget((namespace, name), objs, live.get("Deployment"), generation)
    applied = []
    for obj in objs:
        target = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            _, reverted = kube.apply_exact(obj)
        except Exception as e:
            if is_refusal(e):
                raise ApplyRefused(target, error_status(e) or 0, error_text(e)) from e
            raise
        if reverted:
            log.info("%s/%s: %s: reverted what another field manager changed: %s", namespace, name, target, reverted)
        applied.append(target)
    if CTX.settings.network_policies and not networkpolicy.wanted(spec, CTX.settings):
        _remove_network_policy(kube, name, namespace, uid)
    autoscaling_io.sync(kube, name, namespace, uid, spec, CTX.settings.prometheus_url)  # autoscaling hook
    return applied


def _within_rollout_budget(
    key: statusqueue.Key, objs: list[dict[str, Any]], live: dict[str, Any] | None, generation: int | None
) -> list[dict[str, Any]]:
    """The children to apply: without the Deployment when an operator change of its pod template waits for
    a rollout slot (rolloutbudget.py). The Deployment records the generation it was rendered from."""
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    if generation is not None:
        deployment["metadata"]["annotations"][rolloutbudget.ANNOTATION_GENERATION] = str(generation)
    desired = deployment["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH]
    decision = CTX.budget.decide(key, rolloutbudget.Live.of(live, render.ANNOTATION_TEMPLATE_HASH), desired, generation)
    if decision == rolloutbudget.Decision.HELD:
        return [o for o in objs if o is not deployment]
    if decision == rolloutbudget.Decision.GRANTED:
        log.info("%s/%s: operator change of the pod template: rolling (a rollout slot)", *key)
    return objs


def _remove_network_policy(kube: Kube, name: str, namespace: str, uid: str) -> None:
    """spec.networkPolicy turned off: delete the one this LLMServing controls (never a namesake)."""
    existing = kube.get("networking.k8s.io/v1", "NetworkPolicy", namespace, name)
    if existing is not None and ownership.conflict(existing, uid) is None:
        kube.delete("networking.k8s.io/v1", "NetworkPolicy", namespace, name, uid=existing["metadata"]["uid"])


async def apply_children(
    name: str, namespace: str, uid: str, generation: int | None, spec: api.LLMServingSpec
) -> list[str]:
    """Apply in a thread; remember the outcome for the status (a refusal with its generation)."""
    memory = CTX.memories.of((namespace, name), uid)
    try:
        applied = await asyncio.to_thread(_apply_children, name, namespace, uid, spec, generation)
    except ApplyRefused as e:
        memory.apply_error = ApplyError(generation, e.code, e.target, e.message, e.reason)
        raise
    finally:
        memory.applied_at = time.monotonic()
    memory.apply_error = None
    memory.applied_generation = generation
    return applied


@kopf.on.resume(api.GROUP, api.VERSION, api.PLURAL)
@kopf.on.create(api.GROUP, api.VERSION, api.PLURAL)
@kopf.on.update(api.GROUP, api.VERSION, api.PLURAL)
async def reconcile(
    name: str, namespace: str, uid: str, spec: kopf.Spec, meta: kopf.Meta, logger: logging.Logger, **_: Any
) -> None:
    # async: runs in the loop, so CTX is only ever touched from the loop; API calls go to a thread
    CTX.queue.activate((namespace, name))
    try:
        typed = api.parse_spec(dict(spec))
    except ValidationError as e:
        # The status controller records InvalidSpec; retrying cannot help.
        _mark(namespace, name)
        raise kopf.PermanentError(f"invalid spec: {e}") from e
    try:
        applied = await apply_children(name, namespace, uid, meta.get("generation"), typed)
    except ApplyRefused as e:
        CTX.health.inc("ovserve_operator_apply_errors_total")
        _mark(namespace, name)  # the status says so at once; a webhook or quota may change: retry slowly
        raise kopf.TemporaryError(f"{e.reason}: {e}", delay=REFUSED_RETRY_S) from e
    except Exception as e:
        CTX.health.inc("ovserve_operator_apply_errors_total")
        raise kopf.TemporaryError(f"applying children failed: {error_text(e)}", delay=5) from e
    CTX.health.inc("ovserve_operator_applies_total")
    logger.info("applied %s", ", ".join(applied))
    _mark(namespace, name)


# ------------------------------------------------------------------------------------- status


def _ours(index: Any, key: statusqueue.Key, uid: str) -> dict[str, Any] | None:
    """The child of `key` in a children index, if it is controlled by the LLMServing of `uid`."""
    for snap in list(index.get(key, [])) if index is not None else []:
        if ownership.conflict(snap, uid) is None:
            return snap
    return None


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


async def _mount_failures(memory: statusqueue.Memory, namespace: str, pods: list[dict[str, Any]]) -> dict[str, str]:
    """pod name -> the kubelet's latest volume failure, for pods stuck before their containers start
    (a missing hostPath shows nowhere else). Each such pod's Events are read at most every 10 s."""
    now = time.monotonic()
    creating = [p for p in pods if podview.is_creating(p)]
    names = {podview.name(p) for p in creating}
    memory.mount_failures = {k: v for k, v in memory.mount_failures.items() if k in names}
    memory.events_read_at = {k: v for k, v in memory.events_read_at.items() if k in {podview.uid(p) for p in creating}}
    if CTX.events_forbidden:
        return memory.mount_failures
    for pod in creating:
        uid = podview.uid(pod)
        if now - memory.events_read_at.get(uid, -1e9) < EVENTS_EVERY_S:
            continue
        memory.events_read_at[uid] = now
        try:
            events = await asyncio.to_thread(_kube().list_pod_events, namespace, podview.name(pod))
        except Exception as e:
            if error_status(e) == 403:
                CTX.events_forbidden = True
                log.warning("cannot list pod events (%s): missing volumes show as ContainerCreating", error_text(e))
                break
            log.warning("%s: listing pod events failed: %s", podview.name(pod), error_text(e))
            continue
        if (msg := podview.mount_failure(events)) is not None:
            memory.mount_failures[podview.name(pod)] = msg
    return memory.mount_failures


async def refresh(
    obj: dict[str, Any],
    *,
    pods_index: Any,
    deployments_index: Any,
    services_index: Any = None,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> bool:
    """One status cycle for one LLMServing (an index snapshot). Returns True when status was patched."""
    meta = obj["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta.get("uid") or ""
    key = (namespace, name)
    memory = CTX.memories.of(key, uid)
    generation = meta.get("generation")
    current = statusqueue.stored_status(obj, memory)
    previous = memory.last_status or current
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
        desired = {o["kind"]: o for o in render.render(name, namespace, uid, typed, CTX.settings)}
        rendered_hash = desired["Deployment"]["spec"]["template"]["metadata"]["annotations"][
            render.ANNOTATION_TEMPLATE_HASH
        ]
        # held back by the rollout budget: the live template is the current one (and not healed meanwhile)
        held_hash = CTX.budget.held_hash(key, rendered_hash)
        desired_hash = held_hash or rendered_hash
        desired_template = None if held_hash else desired["Deployment"]["spec"]["template"]
        pods = list(pods_index.get(key, [])) if pods_index is not None else []
        live = {
            "Deployment": _ours(deployments_index, key, uid),
            "Service": _ours(services_index, key, uid),
        }
        drift_paths = {kind: drift.differences(desired[kind], live[kind]) for kind in live}
        missing = statusqueue.missing_children(memory, [k for k, v in live.items() if v is None], time.monotonic())
        deployed = live["Deployment"]
        readings = await readback.read_reports(pods, timeout=CTX.settings.status_http_timeout_s)
        readings = memory.readback.apply(pods, readings, now)
        memory.readback.forget_except({podview.uid(p) for p in pods})
        mounts = await _mount_failures(memory, namespace, pods)
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
            deployment={"conditions": deployed["status"]["conditions"]} if deployed else None,
            apply_error=memory.apply_error,
            mount_failures=mounts,
            missing_children=missing,
            desired_template=desired_template,
        )
        # autoscaling hook: status.autoscaling and the Autoscaling condition from KEDA's ScaledObject and HPA
        try:
            scaling = await asyncio.to_thread(
                autoscaling_io.read_state, _kube(), name, namespace, uid, typed, CTX.settings.prometheus_url
            )
        except Exception as e:
            logger.warning("%s/%s: reading the autoscaler failed: %s", namespace, name, error_text(e))
            scaling = None
        scaling = autoscaling.metric_check(scaling, typed, result.status)
        autoscaling_io.apply_to_status(
            result.status, scaling, previous=previous, generation=generation, now=now.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        if (applied_defaults := resourcedefaults.defaults(typed, CTX.settings).status()) is not None:
            result.status["resourceDefaults"] = applied_defaults
        live_hash = ((deployed or {}).get("metadata", {}).get("annotations") or {}).get(render.ANNOTATION_TEMPLATE_HASH)
        if (
            CTX.budget.granted(key)
            and live_hash == rendered_hash
            and rolloutbudget.rollout_done(result.status, typed.replicas)
        ):
            CTX.budget.finished(key)
        if (rollout := CTX.budget.status(key)) is not None:
            result.status["rollout"] = rollout
        # Level-triggered: a child that is missing or whose live object differs from what the spec renders is
        # re-applied: at most every 5 s after the last apply, and a hand edit at once, then at most every 30 s
        # (never a tight fight with another controller that keeps writing the same fields).
        # A Deployment held by the rollout budget is left on its template until a slot frees.
        drifted = {kind: paths for kind, paths in drift_paths.items() if paths}
        if held_hash and live["Deployment"] is not None:
            drifted.pop("Deployment", None)
        tick = time.monotonic()
        missing_now = any(live[k] is None for k in drifted)
        # a live child that differs from what this very generation rendered and applied: edited by hand (a newer
        # spec is kopf's reconcile to apply, not a revert)
        edited = any(live[k] is not None for k in drifted) and memory.applied_generation == generation
        slot_freed = bool(held_hash) and CTX.budget.free()
        # a refusal of this very spec (NameConflict: a foreign object of the child's name, a webhook, a quota)
        # is retried slowly; a changed spec at once (reapply_due)
        refused = memory.apply_error is not None and memory.apply_error.generation == generation
        after = REFUSED_RETRY_S if refused else MISSING_REAPPLY_AFTER_S
        # the spec changed since the apiserver refused an apply (the user fixed it): at once, whatever the gates
        fixed = bool(drifted) and memory.apply_error is not None and memory.apply_error.generation != generation
        if (
            fixed
            or (missing_now and statusqueue.reapply_due(memory, True, tick, after, generation))
            or (edited and statusqueue.revert_due(memory, tick, REAPPLY_AFTER_S))
            or (slot_freed and statusqueue.reapply_due(memory, True, tick, REAPPLY_AFTER_S, generation))
        ):
            if slot_freed:
                drifted["Deployment"] = ["held: a rollout slot freed"]
            logger.info("%s/%s: children missing or drifted %s: re-applying", namespace, name, drifted)
            try:
                await apply_children(name, namespace, uid, generation, typed)
            except Exception as e:
                logger.warning("%s/%s: re-apply failed: %s", namespace, name, error_text(e))

    if not statusqueue.needs_patch(result.status, current, memory.last_status):
        return False
    kube = _kube()
    CTX.own_writes.writing(key, result.status)  # before sending: its echo may arrive before the call returns
    try:
        await asyncio.to_thread(kube.patch_status, namespace, name, status.status_patch(result.status, current))
    except BaseException:
        CTX.own_writes.failed(key)
        raise
    memory.last_status = result.status
    memory.patched_over = meta.get("resourceVersion")
    CTX.health.inc("ovserve_operator_status_patches_total")
    for ev in result.events:
        try:
            await asyncio.to_thread(kube.create_event, namespace, _event_body(obj, ev))
            CTX.health.inc(f'ovserve_operator_events_total{{type="{ev.type}",reason="{ev.reason}"}}')
        except Exception as e:
            logger.warning("%s/%s: posting event %s failed: %s", namespace, name, ev.reason, error_text(e))
    return True
