"""The controller: one object holding everything the operator runs on, and the sync pass of one LLMServing.

Created by kopf's startup handler (handlers.py) and kept in kopf's memo, so nothing here is module state: a test
builds its own `Controller(settings, kube, health)`.

- caches of the LLMServings and of their runtime pods, Deployments and Services, fed by the operator's own list and
  watch (reflector.py; intake.py reduces each object in the reflector's thread); every event marks the owning
  LLMServing dirty, except the echo of the operator's own status patch (echo.py). No LLMServing is synced before
  each child kind of its namespace was listed once (cache.ListGate).
- the work queue and its loop (statusqueue.StatusController) run `sync` for every LLMServing that is dirty or due.
- `sync(snapshot)`: observe (observe.py, reads only) -> decide (decide.py, pure: the whole status, the Events, the
  children rendered once, what to apply) -> act (act.py: applies, patches, posts). The caches are observed first
  and a generation not applied yet is decided and started from them alone (decide.begin, act.begin), so that its
  apply runs beside the pods' readback instead of after it. No finalizer: deleting an LLMServing never waits for
  the operator; its children go by garbage collection (ownerReferences).
- one memory record per LLMServing (memory.py), and one `forget` when it is gone.
- the Nodes (one cluster-wide reflector, outside the gate: no sync waits for them): a node fault or a cordon marks
  the LLMServings with pods on that node, whose status then names it (nodes.py). An operator not allowed to read
  Nodes says so once and goes on without node facts.

It runs only while the process holds the leader Lease (cli.py starts kopf then), so nothing here checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import (
    act,
    autoscaling_io,
    cache,
    decide,
    intake,
    nodes,
    observe,
    reasons,
    reflector,
    rolloutbudget,
    routing_io,
    statusqueue,
    tracing,
)
from . import spec as api
from .health import HealthState
from .kube import Kube, error_text
from .memory import Memories
from .settings import Settings
from .status import Event

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
T = TypeVar("T")
CONCURRENCY = 16  # syncs at once (statusqueue.fair_pick shares them between namespaces)
# child kinds whose events mark their owner only when their snapshot changed: a PodDisruptionBudget's status is
# rewritten at every pod readiness change, and the snapshot keeps none of it (intake.budget_snapshot)
QUIET_KINDS = frozenset({"PodDisruptionBudget"})


class Controller:
    """Everything one leader runs on: settings, API client and thread pools, caches, work queue, memory."""

    def __init__(self, settings: Settings, kube: Kube, health: HealthState | None = None) -> None:
        self.settings, self.kube = settings, kube
        self.health = health if health is not None else HealthState()
        self.tracer: tracing.NoTrace = (
            tracing.ReconcileTracer(settings.otlp_traces_endpoint, settings.trace_sample_ratio, settings.identity)
            if settings.otlp_traces_endpoint
            else tracing.NO_TRACE
        )
        # API calls run in threads (the client is synchronous): applies in a pool of their own, so that hundreds
        # of creates at once never hold back the status writes (with one shared pool, the default executor's
        # min(32, cores + 4) threads, statuses waited past their 60 s bound during bulk loads)
        self.apply_pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="ovserve-apply")
        self.io_pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="ovserve-io")
        self.queue = statusqueue.WorkQueue(settings.status_interval_s, resync_per_s=settings.status_resync_per_s)
        self.memories = Memories(
            settings.readback_grace_s,
            rolloutbudget.RolloutBudget(settings.rollout_budget, settings.rollout_budget_timeout_s),
        )
        self.keda = autoscaling_io.Keda()
        self.gie = routing_io.Gie()
        self.llmservings = cache.Cache()
        self.pods = cache.Cache()
        self.deployments = cache.Cache()
        self.services = cache.Cache()
        self.pdbs = cache.Cache()
        self.gate = cache.ListGate()
        self.nodes: dict[str, nodes.NodeView] = {}  # name -> view (few, small: not packed)
        self.node_uids: dict[str, str] = {}
        self.nodes_known = False  # listed, and readable: a pod's Node absent from `nodes` was deleted
        self.nodes_refused: str | None = None  # why the Nodes cannot be read (RBAC), if they cannot
        self.reflectors: list[reflector.Reflector] = []
        self.list_stamps: dict[str, int] = {}  # reflector name -> its cache's stamp when its LIST began
        self.event_tasks: set[asyncio.Task] = set()  # Events about the operator itself, being posted
        self.events_forbidden = False  # RBAC without `list events`: stop asking, say it once
        self.task: asyncio.Task | None = None

    async def call(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in `pool` (apply_pool or io_pool)."""
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))

    def cache_of(self, kind: str) -> cache.Cache:
        """The cache of `kind`: the LLMServings', or a child kind's."""
        return {
            "Pod": self.pods,
            "Deployment": self.deployments,
            "Service": self.services,
            "PodDisruptionBudget": self.pdbs,
            api.KIND: self.llmservings,
        }[kind]

    # --------------------------------------------------------------------------------- marks

    def mark(self, key: Key) -> None:
        """Mark an LLMServing dirty (call from the event loop only)."""
        self.queue.mark(key)

    def mark_later(self, key: Key, delay: float) -> None:
        """Mark `key` after `delay` seconds, if it still exists then (the resync may come much later at scale)."""

        def fire() -> None:
            if key in self.llmservings:
                self.mark(key)

        asyncio.get_running_loop().call_later(delay, fire)

    def mark_namespace(self, namespace: str) -> None:
        """Mark every cached LLMServing of `namespace` ("": of every namespace)."""
        for key in self.llmservings:
            if namespace in ("", key[0]):
                self.mark(key)

    # --------------------------------------------------------------------------------- intake (on the loop)

    def apply_serving_change(self, change: intake.ServingChange) -> None:
        """Put or drop the LLMServing; mark it, unless the event is the echo of our own status patch."""
        if change.deleted:
            self.llmservings.delete(change.uid)  # the work queue sees it gone and the controller forgets it
            return
        self.queue.activate(change.key)
        if self.memories.of(change.key, change.uid).echo.is_echo(*change.digests):
            self.health.inc("ovserve_operator_status_echoes_total")  # our own patch: nothing to refresh
        else:
            self.mark(change.key)
        self.llmservings.put_packed(change.uid, change.key, change.packed)

    def apply_child_change(self, change: intake.ChildChange) -> None:
        """Put or drop the child, and mark its owner."""
        store = self.cache_of(change.kind)
        if change.key is None:
            if (key := store.delete(change.uid)) is not None:
                self.mark(key)  # a child deleted by hand is re-applied at once (status says it is missing meanwhile)
            return
        if change.kind in QUIET_KINDS and store.packed(change.uid) == change.packed:
            return  # nothing the operator reads of it changed (a PodDisruptionBudget's status update)
        store.put_packed(change.uid, change.key, change.packed)
        self.mark(change.key)  # e.g. ReplicaFailure (pods refused by admission) shows only on the Deployment

    def on_child_event(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        self.apply_child_change(intake.child_change(kind, event_type, body))

    def apply_node_change(self, change: intake.NodeChange) -> None:
        """Put or drop the Node; when what status reads of it changed, mark the LLMServings with pods on it."""
        before = self.nodes.get(change.name)
        if change.view is None:
            self.nodes.pop(change.name, None)
            self.node_uids.pop(change.name, None)
        else:
            self.nodes[change.name] = change.view
            self.node_uids[change.name] = change.uid
        if before != change.view and self.nodes_known:
            self.mark_node(change.name)

    def mark_node(self, name: str) -> None:
        """Mark every LLMServing with a pod on node `name` (a node fault, a cordon: rare, so a scan)."""
        for key in list(self.llmservings):
            if any(nodes.node_name(p) == name for p in self.pods.get(key, [])):
                self.mark(key)

    def apply_change(self, change: intake.Change) -> None:
        if isinstance(change, intake.ServingChange):
            self.apply_serving_change(change)
        elif isinstance(change, intake.NodeChange):
            self.apply_node_change(change)
        else:
            self.apply_child_change(change)

    def nodes_synced(self, uids: set[str]) -> None:
        """The Nodes' LIST ended: drop those deleted unseen; from now an absent Node is a deleted one. The
        LLMServings with pods on a node that is faulty, cordoned or gone are marked (a new leader's first look)."""
        gone = [n for n, uid in self.node_uids.items() if uid not in uids]
        for name in gone:
            self.nodes.pop(name, None)
            self.node_uids.pop(name, None)
        if not self.nodes_known:
            log.info("nodes listed: %d (node faults are named in status)", len(self.nodes))
        self.nodes_known = True
        bad = {n for n, v in self.nodes.items() if nodes.fault(n, v, True) or v.unschedulable}
        for key in list(self.llmservings):  # one scan: their pods' nodes faulty, cordoned or gone (never listed)
            on = {nodes.node_name(p) for p in self.pods.get(key, [])} - {""}
            if on & bad or on - self.nodes.keys():
                self.mark(key)

    def listed(self, r: reflector.Reflector, changes: list[intake.Change], first: bool) -> None:
        if r.kind == intake.NODE:
            for change in changes:
                self.apply_change(change)
            return
        if first:  # what this LIST does not return, put before it began, was deleted unseen: `synced` drops it
            self.list_stamps[r.name] = self.cache_of(r.kind).stamp()
        for change in changes:
            self.apply_change(change)

    def synced(self, r: reflector.Reflector, uids: set[str]) -> None:
        if r.kind == intake.NODE:
            self.nodes_synced(uids)
            return
        store = self.cache_of(r.kind)
        keys = store.prune(uids, self.list_stamps.pop(r.name, 0), r.namespace or None)
        self.health.inc("ovserve_operator_lists_total")  # every kind's: one per kind and namespace, more after a 410
        if keys:
            log.info("%s: %d cached objects were deleted while no watch ran: dropped", r.name, len(keys))
            self.health.inc("ovserve_operator_cache_pruned_total", len(keys))
            for key in keys:
                if r.kind != api.KIND:  # its child is missing: the sync says so and re-applies it (an LLMServing
                    self.mark(key)  # gone is forgotten)
        if self.gate.listed(r.name):
            log.info("caches in sync: every child kind listed in %s", r.namespace or "every namespace")
            self.mark_namespace(r.namespace)

    def refused(self, r: reflector.Reflector, message: str) -> None:
        """`r`'s LIST or watch is refused. Its namespace is degraded, never the others: their syncs run (the gate
        does not wait for it), its LLMServings' statuses say NamespaceUnreadable (when they can be read and
        written), and a metric, a log line and an Event on the operator's Lease say so."""
        self.health.inc("ovserve_operator_reflector_refusals_total")
        self.health.counters[_unreadable_metric(r)] = 1.0
        if r.kind == intake.NODE:  # no namespace is degraded: status goes on without node facts
            self.nodes_known = False
            if self.nodes_refused is None:
                log.warning(
                    "%s: refused (%s): node faults are not named in status (grant get/list/watch on nodes)",
                    r.name,
                    message,
                )
            self.nodes_refused = message
            return
        if self.gate.refuse(r.name, r.namespace, message):
            self.health.unreadable = self.gate.refused()
            log.warning(
                "%s: refused (%s): that namespace is degraded (NamespaceUnreadable), the others go on", r.name, message
            )
            self.post_operator_event("Warning", reasons.NAMESPACE_UNREADABLE, f"{r.name}: {message}")
        self.mark_namespace(r.namespace)

    def readable(self, r: reflector.Reflector) -> None:
        """`r`'s LIST or watch goes through again."""
        if r.kind == intake.NODE:  # known again once it has listed (nodes_synced)
            self.nodes_refused = None
            self.health.counters[_unreadable_metric(r)] = 0.0
            return
        if self.gate.readable(r.name):
            self.health.counters[_unreadable_metric(r)] = 0.0
            self.health.unreadable = self.gate.refused()
            log.info("%s: readable again", r.name)
            self.post_operator_event("Normal", reasons.NAMESPACE_READABLE_EVENT, f"{r.name}: readable again")
            self.mark_namespace(r.namespace)

    def post_operator_event(self, kind: str, reason: str, message: str) -> None:
        """An Event about the operator itself, on its Lease (in its own namespace: a refused namespace may not take
        one). Best effort: a failure is logged."""
        s = self.settings
        involved = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": s.lease_name,
            "namespace": s.lease_namespace,
        }
        body = act.event_body(involved, Event(kind, reason, message), s.identity)
        post = act.post_event(self, s.lease_namespace, body, "the operator's Lease")
        task = asyncio.get_running_loop().create_task(post, name=f"event {reason}")
        self.event_tasks.add(task)  # a task nobody holds may be collected before it ran
        task.add_done_callback(self.event_tasks.discard)

    # --------------------------------------------------------------------------------- the sync pass

    async def sync(self, snapshot: Mapping[str, Any]) -> bool:
        """The sync pass of one LLMServing (a cached snapshot): observe, decide, act. True when status was patched."""
        meta = snapshot["metadata"]
        trace = self.tracer
        with trace.reconcile(meta):
            memory = self.memories.of((meta["namespace"], meta["name"]), meta.get("uid") or "")
            observed = observe.cached(self, snapshot, memory)  # no I/O: a generation's apply never waits for pods
            start = decide.begin(observed, memory, _now())
            applying = act.begin(self, start, memory)
            try:
                with trace.step(tracing.OBSERVE):
                    observed = await observe.read(self, observed, memory)  # the pods' reports, their Events, KEDA
                with trace.step(tracing.DECIDE):
                    plan = decide.decide(observed, memory, _now(), start)
                with trace.step(tracing.ACT):
                    return await act.act(self, plan, memory)
            finally:
                if applying is not None:
                    await applying

    def forget(self, key: Key) -> None:
        """A deleted LLMServing: drop everything remembered of it."""
        self.memories.forget(key)

    # --------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the reflectors and the loop that syncs (on the running loop)."""
        self.queue.wake = asyncio.Event()  # of this loop
        self.queue.wake.set()
        self.reflectors = self._start_reflectors()

        async def sync_one(key: Key, snapshot: dict[str, Any]) -> None:
            self.health.inc("ovserve_operator_status_refreshes_total")
            await self.sync(snapshot)

        def on_cycle(count: int) -> None:
            self.health.beat()
            self.health.counters["ovserve_operator_llmservings"] = float(count)

        def on_error(key: Key, e: BaseException) -> None:
            self.health.inc("ovserve_operator_status_errors_total")
            log.warning("%s/%s: status refresh failed: %s", key[0], key[1], error_text(e))
            if (memory := self.memories.get(key)) is not None:
                memory.last_status = None

        loop = statusqueue.StatusController(
            self.queue,
            self.llmservings,
            sync_one,
            on_gone=self.forget,
            on_cycle=on_cycle,
            on_error=on_error,
            ready=self.gate.ready,
            concurrency=CONCURRENCY,
        )
        self.task = asyncio.create_task(loop.run(), name="ovserve status controller")
        self.health.kopf_running = True
        self.health.beat()

    async def stop(self) -> None:
        self.health.kopf_running = False
        for r in self.reflectors:
            r.close()
        self.reflectors = []
        if (task := self.task) is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.task = None
        for pool in (self.apply_pool, self.io_pool):
            pool.shutdown(wait=False)
        await asyncio.get_running_loop().run_in_executor(None, self.tracer.close)  # queued spans leave (bounded)

    def _start_reflectors(self) -> list[reflector.Reflector]:
        """One reflector per kind (the LLMServings and each child kind) and watched namespace (one for all
        namespaces when cluster-wide). The gate waits for the children's first LISTs, each namespace for its own."""
        sink = LoopSink(self, asyncio.get_running_loop())
        kinds = {api.KIND: (api.API_VERSION, {}), **{k: (v, sel) for k, (v, sel, _) in intake.CHILD_KINDS.items()}}
        namespaces = self.settings.watch_namespaces
        out = []
        for kind, (api_version, selector) in kinds.items():
            for ns in namespaces or ("",):
                list_fn = reflector.list_function(self.kube, api_version, kind, ns)
                selector_text = cache.label_selector(selector, intake.PRESENT)
                out.append(reflector.Reflector(kind, ns, selector_text, list_fn, sink))
        for ns in namespaces or ("",):
            self.gate.expect((r.name for r in out if r.kind != api.KIND and r.namespace == ns), ns)
        # the Nodes: cluster-wide, and outside the gate (no sync waits for them)
        out.append(
            reflector.Reflector(intake.NODE, "", "", reflector.list_function(self.kube, "v1", intake.NODE, ""), sink)
        )
        for r in out:
            r.start()
        return out


def _now() -> decide.Now:
    return decide.Now(dt.datetime.now(dt.UTC), time.monotonic())


def _unreadable_metric(r: reflector.Reflector) -> str:
    return f'ovserve_operator_reflector_refused{{kind="{r.kind}",namespace="{r.namespace}"}}'


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


class LoopSink:
    """reflector.Sink: objects reduced to their snapshots in the reflector's thread (the raw bodies never
    reach the loop), then handed to the controller on the loop: a LIST's pages waiting for each to be taken,
    watch events not (the watch must keep up with the apiserver, which drops a slow watcher)."""

    def __init__(self, ctl: Controller, loop: asyncio.AbstractEventLoop) -> None:
        self.ctl, self.loop = ctl, loop

    def listed(self, r: reflector.Reflector, items: list[dict[str, Any]], first: bool) -> None:
        changes = [intake.to_change(r.kind, None, item) for item in items]
        _on_loop(self.loop, r.stop, self.ctl.listed, r, changes, first)

    def synced(self, r: reflector.Reflector, uids: set[str]) -> None:
        _on_loop(self.loop, r.stop, self.ctl.synced, r, uids)

    def event(self, r: reflector.Reflector, event_type: str, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(_guarded, self.ctl.apply_change, (intake.to_change(r.kind, event_type, obj),))

    # in the loop's order: `readable` is taken before the pages and events that follow it
    def refused(self, r: reflector.Reflector, message: str) -> None:
        self.loop.call_soon_threadsafe(_guarded, self.ctl.refused, (r, message))

    def readable(self, r: reflector.Reflector) -> None:
        self.loop.call_soon_threadsafe(_guarded, self.ctl.readable, (r,))
