"""The controller's glue: caches fed by reflectors, and one sync pass per LLMServing. All decisions live in
render / readback / rules + status / statusqueue (unit-tested).

- caches of the LLMServings and of their runtime pods, Deployments and Services, fed by the operator's own
  list and watch (reflector.py; kopf's per-object machinery cost most of the operator's memory at thousands of
  objects); every event marks the owning LLMServing dirty, except the echo of the operator's own status patch
  (echo.py). No LLMServing is refreshed before each child kind was listed once.
- one status controller task (statusqueue.StatusController, started at startup) runs the sync pass,
  `refresh`, for every LLMServing that is dirty or due: it applies the children of a generation not applied
  yet (render the Deployment + Service, server-side apply; a new leader first checks whether the live ones are
  already as rendered), reads the runtime reports (and, for pods stuck creating, their mount Events),
  recomputes the whole status, patches it only when it changed (no heartbeat), posts the Events of the
  condition transitions, and re-applies the children if they drifted or vanished. No per-object daemon, hence
  no finalizer: deleting an LLMServing never waits for the operator, and the children go by garbage
  collection (ownerReferences).
- an apply the apiserver refuses (4xx) is remembered with its generation: status shows it (ApplyFailed), and
  it is retried every REFUSED_RETRY_S; any other failure after APPLY_RETRY_S.

kopf runs the process's lifecycle only (startup and cleanup, cli.py), and only while the process holds the
leader Lease, so nothing here checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import kopf
from pydantic import ValidationError

from . import (
    autoscaling,
    autoscaling_io,
    cache,
    drift,
    echo,
    networkpolicy,
    ownership,
    podview,
    policy,
    readback,
    reasons,
    reflector,
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
APPLY_RETRY_S = 5.0  # an apply that failed otherwise (the apiserver unreachable, a timeout) is retried after
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
        # API calls run in threads (the client is synchronous): applies in a pool of their own, so that hundreds
        # of creates at once never hold back the status writes (with one shared pool, the default executor's
        # min(32, cores + 4) threads, statuses waited past their 60 s bound during bulk loads)
        for pool in (getattr(self, "apply_pool", None), getattr(self, "io_pool", None)):
            if pool is not None:
                pool.shutdown(wait=False)
        self.apply_pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="ovserve-apply")
        self.io_pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="ovserve-io")
        self.queue = statusqueue.WorkQueue(settings.status_interval_s, resync_per_s=settings.status_resync_per_s)
        self.memories = statusqueue.Memories(settings.readback_grace_s)
        self.own_writes = echo.OwnWrites()
        self.budget = rolloutbudget.RolloutBudget(settings.rollout_budget, settings.rollout_budget_timeout_s)
        self.llmservings = cache.Cache()
        self.pods = cache.Cache()
        self.deployments = cache.Cache()
        self.services = cache.Cache()
        self.gate = cache.ListGate()
        self.reflectors: list[reflector.Reflector] = []
        self.list_stamps: dict[str, int] = {}  # reflector name -> its cache's stamp when its LIST began
        self.event_tasks: set[asyncio.Task] = set()  # Events about the operator itself, being posted


CTX = _Context()


def configure(settings: Settings, kube: Kube, health: HealthState) -> None:
    CTX.kube, CTX.health = kube, health
    CTX.reset(settings)


def _kube() -> Kube:
    if CTX.kube is None:
        CTX.kube = Kube()
    return CTX.kube


T = TypeVar("T")


async def _call(pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in `pool` (CTX.apply_pool or CTX.io_pool)."""
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))


def _mark(namespace: str, name: str) -> None:
    """Mark an LLMServing dirty (call from the event loop only)."""
    CTX.queue.mark((namespace, name))


# The labels and annotations the operator reads of a child (the owner key, drift of the rendered labels, the
# template hash, the rollout budget's generation): only these are cached, so that whoever can label a pod cannot
# grow the operator's memory with annotations (issue 38). A longer value than any the operator writes is dropped.
KEPT_LABELS = frozenset(render.labels("-"))
KEPT_ANNOTATIONS = frozenset({render.ANNOTATION_TEMPLATE_HASH, rolloutbudget.ANNOTATION_GENERATION})
KEPT_VALUE_MAX = 256


def kept(values: Mapping[str, Any] | None, keys: frozenset[str]) -> dict[str, str]:
    """Of a label or annotation map, the entries the operator reads."""
    return {k: v for k, v in (values or {}).items() if k in keys and isinstance(v, str) and len(v) <= KEPT_VALUE_MAX}


def _controller_ref(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The controller's ownerReference only (ownership.conflict reads nothing else)."""
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    return [] if ref is None else [{k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}]


def _pod_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": kept(meta.get("labels"), KEPT_LABELS),
            "annotations": kept(meta.get("annotations"), KEPT_ANNOTATIONS),
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


# ------------------------------------------------------------------------------------- caches
# What a status is computed from, in the operator's own caches (cache.py), fed by the reflectors (reflector.py).
# The caches are only touched on the event loop, so the changes applied there may mark objects dirty directly.

CHILD_LABELS = {render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_OWNER: kopf.PRESENT}


def _child_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """What drift is judged on: the live spec and labels (and the Deployment's conditions)."""
    meta = body.get("metadata") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": kept(meta.get("labels"), KEPT_LABELS),
            "annotations": kept(meta.get("annotations"), KEPT_ANNOTATIONS),
            "ownerReferences": _controller_ref(meta),
        },
        "spec": dict(body.get("spec") or {}),
        "status": {"conditions": list((body.get("status") or {}).get("conditions") or [])},
    }


def _llmserving_snapshot(body: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
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


@dataclasses.dataclass(frozen=True, slots=True)
class ServingChange:
    """What one listed object or watch event of an LLMServing does to its cache."""

    uid: str
    key: statusqueue.Key
    deleted: bool = False
    packed: bytes = b""  # the snapshot, `cache.pack`ed in the reflector's thread (as a child's)
    digests: tuple[bytes, bytes] = (b"", b"")  # echo.digests of the event: is it the echo of our own patch?


def serving_change(event_type: str | None, body: Mapping[str, Any]) -> ServingChange:
    """Pure, in any thread (the reflector's): a listed LLMServing (`event_type` None) or a watch event."""
    meta = body.get("metadata") or {}
    uid, key = meta.get("uid") or "", (meta.get("namespace") or "", meta.get("name") or "")
    if event_type == "DELETED":
        return ServingChange(uid, key, deleted=True)
    return ServingChange(uid, key, False, cache.pack(_llmserving_snapshot(body, *key)), echo.digests(body))


def apply_serving_change(change: ServingChange) -> None:
    """On the loop: put or drop the LLMServing; mark it, unless the event is the echo of our own status patch."""
    if change.deleted:
        CTX.llmservings.delete(change.uid)  # the controller sees it gone and forgets it
        return
    CTX.queue.activate(change.key)
    if CTX.own_writes.is_echo(change.key, *change.digests):
        CTX.health.inc("ovserve_operator_status_echoes_total")  # our own patch: nothing to refresh
    else:
        _mark(*change.key)
    CTX.llmservings.put_packed(change.uid, change.key, change.packed)


def _mark_namespace(namespace: str) -> None:
    """Mark every cached LLMServing of `namespace` ("": of every namespace)."""
    for key in CTX.llmservings:
        if namespace in ("", key[0]):
            _mark(*key)


# (kind, selector, what is kept of one object): the children kinds a status is computed from
CHILD_KINDS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "Pod": ("v1", RUNTIME_POD_LABELS, _pod_snapshot),
    "Deployment": ("apps/v1", CHILD_LABELS, _child_snapshot),
    "Service": ("v1", CHILD_LABELS, _child_snapshot),
}


def _cache_of(kind: str) -> cache.Cache:
    """The cache of `kind`: the LLMServings', or a child kind's."""
    return {"Pod": CTX.pods, "Deployment": CTX.deployments, "Service": CTX.services, api.KIND: CTX.llmservings}[kind]


@dataclasses.dataclass(frozen=True, slots=True)
class ChildChange:
    """What one listed object or watch event of a pod, Deployment or Service does to its cache."""

    kind: str
    uid: str
    key: statusqueue.Key | None  # its owner; None: it leaves the cache
    # the snapshot, already `cache.pack`ed in the reflector's thread: a burst of events waits in the loop's
    # queue as one bytes object each, not as dicts and strings, and the loop does not pickle
    packed: bytes = b""


def child_change(kind: str, event_type: str | None, body: Mapping[str, Any]) -> ChildChange:
    """Pure, in any thread (the reflector's, so that only the slim snapshot reaches the loop): a listed object
    (`event_type` None) or a watch event. The labels are checked here too: one that stops matching the
    selector leaves the cache, as a deleted one does."""
    _, selector, snapshot = CHILD_KINDS[kind]
    meta = body.get("metadata") or {}
    uid = meta.get("uid") or ""
    labels = meta.get("labels") or {}
    if event_type == "DELETED" or not cache.labels_match(labels, selector, kopf.PRESENT):
        return ChildChange(kind, uid, None)
    key = (meta.get("namespace") or "", labels[render.LABEL_OWNER])
    return ChildChange(kind, uid, key, cache.pack(snapshot(body)))


def apply_child_change(change: ChildChange) -> None:
    """On the loop: put or drop the child, and mark its owner."""
    store = _cache_of(change.kind)
    if change.key is None:
        if (key := store.delete(change.uid)) is not None:
            _mark(*key)  # a child deleted by hand is re-applied at once (the status says it is missing meanwhile)
        return
    store.put_packed(change.uid, change.key, change.packed)
    _mark(*change.key)  # e.g. ReplicaFailure (pods refused by admission) shows only on the Deployment


def on_child_event(kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
    apply_child_change(child_change(kind, event_type, body))


Change = ChildChange | ServingChange


def to_change(kind: str, event_type: str | None, body: Mapping[str, Any]) -> Change:
    """In the reflector's thread: one listed object or watch event of `kind`, reduced to its change."""
    return serving_change(event_type, body) if kind == api.KIND else child_change(kind, event_type, body)


def apply_change(change: Change) -> None:
    """On the loop."""
    if isinstance(change, ServingChange):
        apply_serving_change(change)
    else:
        apply_child_change(change)


# ------------------------------------------------------------------------------------- reflectors


def _on_loop(loop: asyncio.AbstractEventLoop, stop: threading.Event, fn: Callable[..., None], *args: Any) -> None:
    """From a reflector's thread: run `fn(*args)` on the event loop (where the caches live) and wait until it
    ran: a LIST never runs ahead of the loop by more than one page."""
    done = threading.Event()
    loop.call_soon_threadsafe(_guarded, fn, args, done)
    while not done.wait(1.0) and not stop.is_set():
        pass


def _guarded(fn: Callable[..., None], args: tuple, done: threading.Event | None = None) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("handling a child %s failed", fn.__name__)
    finally:
        if done is not None:
            done.set()


def _listed(r: reflector.Reflector, changes: list[ChildChange], first: bool) -> None:
    if first:  # what this LIST does not return, put before it began, was deleted unseen: `_synced` drops it
        CTX.list_stamps[r.name] = _cache_of(r.kind).stamp()
    for change in changes:
        apply_change(change)


def _synced(r: reflector.Reflector, uids: set[str]) -> None:
    store = _cache_of(r.kind)
    keys = store.prune(uids, CTX.list_stamps.pop(r.name, 0), r.namespace or None)
    CTX.health.inc("ovserve_operator_lists_total")  # every kind's: one per kind and namespace, more after a 410
    if keys:
        log.info("%s: %d cached objects were deleted while no watch ran: dropped", r.name, len(keys))
        CTX.health.inc("ovserve_operator_cache_pruned_total", len(keys))
        for key in keys:
            if r.kind != api.KIND:  # its child is missing: the refresh says so and re-applies it (an LLMServing
                _mark(*key)  # gone is forgotten by the controller)
    if CTX.gate.listed(r.name):
        log.info("caches in sync: every child kind listed in %s", r.namespace or "every namespace")
        _mark_namespace(r.namespace)


def _unreadable_metric(r: reflector.Reflector) -> str:
    return f'ovserve_operator_reflector_refused{{kind="{r.kind}",namespace="{r.namespace}"}}'


def _refused(r: reflector.Reflector, message: str) -> None:
    """On the loop: `r`'s LIST or watch is refused. Its namespace is degraded, never the others: their refreshes
    run (the gate does not wait for it), its LLMServings' statuses say NamespaceUnreadable (when they can be read
    and written), and a metric, a log line and an Event on the operator's Lease say so."""
    CTX.health.inc("ovserve_operator_reflector_refusals_total")
    CTX.health.counters[_unreadable_metric(r)] = 1.0
    if CTX.gate.refuse(r.name, r.namespace, message):
        CTX.health.unreadable = CTX.gate.refused()
        log.warning(
            "%s: refused (%s): that namespace is degraded (NamespaceUnreadable), the others go on", r.name, message
        )
        _post_operator_event("Warning", reasons.NAMESPACE_UNREADABLE, f"{r.name}: {message}")
    _mark_namespace(r.namespace)


def _readable(r: reflector.Reflector) -> None:
    """On the loop: `r`'s LIST or watch goes through again."""
    if CTX.gate.readable(r.name):
        CTX.health.counters[_unreadable_metric(r)] = 0.0
        CTX.health.unreadable = CTX.gate.refused()
        log.info("%s: readable again", r.name)
        _post_operator_event("Normal", reasons.NAMESPACE_READABLE_EVENT, f"{r.name}: readable again")
        _mark_namespace(r.namespace)


def _post_operator_event(kind: str, reason: str, message: str) -> None:
    """An Event about the operator itself, on its Lease (in its own namespace: a refused namespace may not take
    one). Best effort: a failure is logged."""
    settings = CTX.settings
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{settings.lease_name}.", "namespace": settings.lease_namespace},
        "involvedObject": {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": settings.lease_name,
            "namespace": settings.lease_namespace,
        },
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "ovserve-operator"},
        "reportingComponent": "ovserve-operator",
        "reportingInstance": settings.identity[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }

    async def post() -> None:
        try:
            await _call(CTX.io_pool, _kube().create_event, settings.lease_namespace, body)
            CTX.health.inc(f'ovserve_operator_events_total{{type="{kind}",reason="{reason}"}}')
        except Exception as e:
            log.warning("posting the %s Event on the operator's Lease failed: %s", reason, error_text(e))

    task = asyncio.get_running_loop().create_task(post(), name=f"event {reason}")
    CTX.event_tasks.add(task)  # a task nobody holds may be collected before it ran
    task.add_done_callback(CTX.event_tasks.discard)


class _LoopSink:
    """reflector.Sink: objects reduced to their snapshots in the reflector's thread (the raw bodies never
    reach the loop), then handed to the loop: a LIST's pages waiting for each to be taken, watch events not
    (the watch must keep up with the apiserver, which drops a slow watcher)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def listed(self, r: reflector.Reflector, items: list[dict[str, Any]], first: bool) -> None:
        changes = [to_change(r.kind, None, item) for item in items]
        _on_loop(self.loop, r.stop, _listed, r, changes, first)

    def synced(self, r: reflector.Reflector, uids: set[str]) -> None:
        _on_loop(self.loop, r.stop, _synced, r, uids)

    def event(self, r: reflector.Reflector, event_type: str, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(_guarded, apply_change, (to_change(r.kind, event_type, obj),))

    # in the loop's order: `readable` is taken before the pages and events that follow it
    def refused(self, r: reflector.Reflector, message: str) -> None:
        self.loop.call_soon_threadsafe(_guarded, _refused, (r, message))

    def readable(self, r: reflector.Reflector) -> None:
        self.loop.call_soon_threadsafe(_guarded, _readable, (r,))


def _start_reflectors(kube: Kube, namespaces: tuple[str, ...]) -> list[reflector.Reflector]:
    """One reflector per kind (the LLMServings and each child kind) and watched namespace (one for all
    namespaces when cluster-wide). The gate waits for the children's first LISTs, each namespace for its own."""
    sink = _LoopSink(asyncio.get_running_loop())
    kinds = {api.KIND: (api.API_VERSION, {}), **{k: (v, sel) for k, (v, sel, _) in CHILD_KINDS.items()}}
    out = []
    for kind, (api_version, selector) in kinds.items():
        for ns in namespaces or ("",):
            list_fn = reflector.list_function(kube, api_version, kind, ns)
            out.append(reflector.Reflector(kind, ns, cache.label_selector(selector, kopf.PRESENT), list_fn, sink))
    for ns in namespaces or ("",):
        CTX.gate.expect((r.name for r in out if r.kind != api.KIND and r.namespace == ns), ns)
    for r in out:
        r.start()
    return out


# ------------------------------------------------------------------------------------- lifecycle


@kopf.on.startup()
async def _startup(**_: Any) -> None:
    CTX.queue.wake = asyncio.Event()  # of this loop
    CTX.queue.wake.set()
    kube, namespaces = _kube(), CTX.settings.watch_namespaces
    CTX.reflectors = _start_reflectors(kube, namespaces)

    async def refresh_one(key: statusqueue.Key, snapshot: dict[str, Any]) -> None:
        CTX.health.inc("ovserve_operator_status_refreshes_total")
        await refresh(snapshot, pods_index=CTX.pods, deployments_index=CTX.deployments, services_index=CTX.services)

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
        CTX.llmservings,
        refresh_one,
        on_gone=_forget,
        on_cycle=on_cycle,
        on_error=on_error,
        ready=CTX.gate.ready,
        concurrency=CONCURRENCY,
    )
    CTX.task = asyncio.create_task(controller.run(), name="ovserve status controller")
    CTX.health.kopf_running = True
    CTX.health.beat()


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    CTX.health.kopf_running = False
    for r in CTX.reflectors:
        r.close()
    CTX.reflectors = []
    if (task := CTX.task) is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
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
    memory.applying += 1
    try:
        applied = await _call(CTX.apply_pool, _apply_children, name, namespace, uid, spec, generation)
    except ApplyRefused as e:
        memory.apply_error = ApplyError(generation, e.code, e.target, e.message, e.reason)
        raise
    finally:
        memory.applying -= 1
        memory.applied_at = time.monotonic()
    memory.apply_error = None
    memory.applied_generation = generation
    return applied


def _start_generation_apply(
    key: statusqueue.Key, uid: str, generation: int | None, spec: api.LLMServingSpec, memory: statusqueue.Memory
) -> asyncio.Task | None:
    """The sync pass's apply (what kopf's create, update and resume handlers did): the children of a generation
    this leader has not applied yet are applied once, in a task that runs while the pass computes the status. A
    new leader (nothing attempted yet) first checks whether the live children are already as rendered: then
    nothing is written. A failed apply is retried after REFUSED_RETRY_S (refused) or APPLY_RETRY_S (anything
    else); a newer generation at once. Returns the task, or None when nothing is applied."""
    now = time.monotonic()
    if generation is None:  # never from the apiserver (it stores one for every object): nothing to track by
        return None
    if not statusqueue.generation_apply_due(memory, generation, now, REFUSED_RETRY_S, APPLY_RETRY_S):
        return None
    if memory.attempted_generation is None and _children_current(key, uid, spec):
        memory.attempted_generation = memory.applied_generation = generation
        memory.applied_at, memory.apply_error = now, None
        CTX.health.inc("ovserve_operator_resumes_unchanged_total")
        return None
    memory.attempted_generation = generation
    return asyncio.create_task(_apply_generation(key, uid, generation, spec), name=f"apply {key[0]}/{key[1]}")


async def _apply_generation(key: statusqueue.Key, uid: str, generation: int, spec: api.LLMServingSpec) -> None:
    namespace, name = key
    try:
        applied = await apply_children(name, namespace, uid, generation, spec)
    except ApplyRefused as e:  # the status says so (ApplyFailed, PolicyDenied, NameConflict) now; retried slowly
        CTX.health.inc("ovserve_operator_apply_errors_total")
        log.warning("%s/%s: %s: %s (again in %.0f s)", namespace, name, e.reason, e, REFUSED_RETRY_S)
        _mark(namespace, name)
        _mark_later(key, REFUSED_RETRY_S)
        return
    except Exception as e:
        CTX.health.inc("ovserve_operator_apply_errors_total")
        log.warning(
            "%s/%s: applying children failed: %s (again in %.0f s)", namespace, name, error_text(e), APPLY_RETRY_S
        )
        _mark_later(key, APPLY_RETRY_S)
        return
    CTX.health.inc("ovserve_operator_applies_total")
    log.info("%s/%s: applied %s", namespace, name, ", ".join(applied))


def _mark_later(key: statusqueue.Key, delay: float) -> None:
    """Mark `key` after `delay` seconds, if it still exists then (the resync may come much later at scale)."""

    def fire() -> None:
        if key in CTX.llmservings:
            _mark(*key)

    asyncio.get_running_loop().call_later(delay, fire)


def _children_current(key: statusqueue.Key, uid: str, spec: api.LLMServingSpec) -> bool:
    """Whether the cached children of `key` are exactly what `spec` renders, so that re-applying them would
    change nothing (2 GETs and 2 applies per object saved on a takeover). Only for the plain case: a
    Deployment and a Service, both ours and without drift, allowed by policy, no autoscaler, no NetworkPolicy
    handling; anything else takes the full apply."""
    if CTX.settings.network_policies or spec.autoscaling is not None or policy.violations(spec, CTX.settings):
        return False
    desired = render.render(key[1], key[0], uid, spec, CTX.settings)
    if sorted(o["kind"] for o in desired) != ["Deployment", "Service"]:
        return False
    for obj in desired:
        live = _ours(_cache_of(obj["kind"]), key, uid)
        if live is None or drift.differences(obj, live):
            return False
    return True


# ------------------------------------------------------------------------------------- status


def _ours(index: Any, key: statusqueue.Key, uid: str) -> dict[str, Any] | None:
    """The child of `key` in a children cache, if it is controlled by the LLMServing of `uid`."""
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
            events = await _call(CTX.io_pool, _kube().list_pod_events, namespace, podview.name(pod))
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
    """The sync pass of one LLMServing (a cached snapshot): the children of a generation not applied yet are
    applied while the status is recomputed from what runs now, so neither waits for the other (an edit's apply
    does not wait for the pods' readback, nor the status for the apply: an HPA's scale-down shows at once); the
    pass ends when both are done, so at most CONCURRENCY applies run at once. Returns True when status was
    patched."""
    meta = obj["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta.get("uid") or ""
    memory = CTX.memories.of(key, uid)
    if why := CTX.gate.unreadable(key[0]):  # nothing applied, nothing computed from a cache that cannot refresh
        result = status.unreadable_status(
            generation=meta.get("generation"),
            message=why,
            previous=memory.last_status or statusqueue.stored_status(obj, memory),
            now=dt.datetime.now(dt.UTC),
        )
        return await _write_status(obj, result, memory, logger)
    try:
        typed: api.LLMServingSpec | ValidationError = api.parse_spec(dict(obj.get("spec") or {}))
    except ValidationError as e:
        typed = e
    applying = None
    if not isinstance(typed, ValidationError):
        applying = _start_generation_apply(key, uid, meta.get("generation"), typed, memory)
    try:
        return await _status_pass(
            obj, typed, memory, applying is not None, pods_index, deployments_index, services_index, logger
        )
    finally:
        if applying is not None:
            await applying


async def _status_pass(
    obj: dict[str, Any],
    typed: api.LLMServingSpec | ValidationError,
    memory: statusqueue.Memory,
    applied_now: bool,
    pods_index: Any,
    deployments_index: Any,
    services_index: Any,
    logger: logging.Logger | logging.LoggerAdapter,
) -> bool:
    """Recompute the status, write it when it changed, heal drifted children (not while `applied_now`: the
    generation's apply is writing them)."""
    meta = obj["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta.get("uid") or ""
    key = (namespace, name)
    generation = meta.get("generation")
    current = statusqueue.stored_status(obj, memory)
    previous = memory.last_status or current
    now = dt.datetime.now(dt.UTC)
    if isinstance(typed, ValidationError):
        result = status.invalid_spec_status(
            name=name,
            namespace=namespace,
            generation=generation,
            message=f"invalid spec: {typed}",
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
            scaling = await _call(
                CTX.io_pool,
                autoscaling_io.read_state,
                _kube(),
                name,
                namespace,
                uid,
                typed,
                CTX.settings.prometheus_url,
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
        # spec is _apply_generation's to apply, not a revert)
        edited = any(live[k] is not None for k in drifted) and memory.applied_generation == generation
        slot_freed = bool(held_hash) and CTX.budget.free()
        # a refusal of this very spec (NameConflict: a foreign object of the child's name, a webhook, a quota)
        # is retried slowly; a changed spec at once (_apply_generation)
        refused = memory.apply_error is not None and memory.apply_error.generation == generation
        after = REFUSED_RETRY_S if refused else MISSING_REAPPLY_AFTER_S
        if not applied_now and (  # `live` was read before the generation's apply: not drift
            (missing_now and statusqueue.reapply_due(memory, True, tick, after, generation))
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

    return await _write_status(obj, result, memory, logger)


async def _write_status(
    obj: dict[str, Any],
    result: status.Result,
    memory: statusqueue.Memory,
    logger: logging.Logger | logging.LoggerAdapter,
) -> bool:
    """Patch the status when it changed, and post the Events of its transitions. True when patched."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    key = (namespace, name)
    current = statusqueue.stored_status(obj, memory)
    if not statusqueue.needs_patch(result.status, current, memory.last_status):
        return False
    kube = _kube()
    CTX.own_writes.writing(key, result.status)  # before sending: its echo may arrive before the call returns
    try:
        await _call(CTX.io_pool, kube.patch_status, namespace, name, status.status_patch(result.status, current))
    except BaseException:
        CTX.own_writes.failed(key)
        raise
    memory.last_status = result.status
    memory.patched_over = meta.get("resourceVersion")
    CTX.health.inc("ovserve_operator_status_patches_total")
    for ev in result.events:
        try:
            await _call(CTX.io_pool, kube.create_event, namespace, _event_body(obj, ev))
            CTX.health.inc(f'ovserve_operator_events_total{{type="{ev.type}",reason="{ev.reason}"}}')
        except Exception as e:
            logger.warning("%s/%s: posting event %s failed: %s", namespace, name, ev.reason, error_text(e))
    return True
