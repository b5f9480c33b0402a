"""Act: the last step of a sync pass (and `begin`, the apply of a generation, at its start). Carries out a
`decide.Plan`: writes back the decided memory, applies the children (the one apply path and the one ownership
check of every child, the ScaledObject's included), patches the status when it changed and posts the Events of
its transitions.

- the children are written with server-side apply (kube.apply_exact), all checked before any is written (no
  half-applied takeover; the ScaledObject and the InferencePool on their own paths, after the others): a live
  object of a child's name not controlled by this LLMServing is never written (NameConflict, ownership.conflict);
  a spec the tenant policy denies is not applied (PolicyDenied); an apply the apiserver refuses (4xx) is
  remembered with its generation for status (ApplyFailed) and retried every REFUSED_RETRY_S, any other failure
  after APPLY_RETRY_S.
- an operator change of the pod template (an upgrade, a setting) waits for a rollout slot (rolloutbudget.py).
- a generation's apply (`begin`) starts as soon as the pass has looked at its caches, in a task beside the pods'
  readback and the status write (neither waits for the other); the pass ends when both are done, so at most
  CONCURRENCY applies run at once.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import autoscaling_io, ownership, reasons, render, rolloutbudget, routing_io, status
from . import spec as api
from .decide import APPLY_RETRY_S, DECIDED, REFUSED_RETRY_S, Apply, Desired, Plan, Start
from .intake import CHILD_KINDS
from .kube import error_status, error_text, is_refusal
from .memory import Memory
from .rules import ApplyError

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


class ApplyRefused(Exception):
    """The children were not applied and retrying the same spec cannot help soon: the apiserver refused one
    (4xx, ApplyFailed), the tenant policy denies the spec (PolicyDenied) or a name is taken (NameConflict)."""

    def __init__(self, target: str, code: int, message: str, reason: str = reasons.APPLY_FAILED) -> None:
        super().__init__(f"{target}: HTTP {code}: {message}" if reason == reasons.APPLY_FAILED else message)
        self.target, self.code, self.message, self.reason = target, code, message, reason


def begin(ctl: Controller, start: Start, memory: Memory) -> asyncio.Task | None:
    """Carry out the pass's first decision at once (before the pods are read back): write back the decided record
    and start the apply of a generation not applied yet. Returns its task (the pass awaits it last), or None."""
    for field in DECIDED:
        setattr(memory, field, getattr(start.memory, field))
    if start.apply is Apply.UNCHANGED:
        ctl.health.inc("ovserve_operator_resumes_unchanged_total")
    if start.apply is not Apply.GENERATION or start.desired is None:
        return None
    task = apply_generation(ctl, start.key, start.uid, start.generation, start.desired, memory)
    return asyncio.create_task(task, name="apply {}/{}".format(*start.key))


async def act(ctl: Controller, plan: Plan, memory: Memory) -> bool:
    """Carry out `plan` (a generation's apply is begin's, already under way). True when the status was patched."""
    for field in DECIDED:
        setattr(memory, field, getattr(plan.memory, field))
    if plan.pod_memory is not None:
        memory.readback.keep(plan.pod_memory)
    if plan.events_forbidden is not None and not ctl.events_forbidden:
        ctl.events_forbidden = True
        log.warning("cannot list pod events (%s): missing volumes show as ContainerCreating", plan.events_forbidden)
    desired = plan.desired
    if plan.finish_rollout:
        ctl.memories.budget.finished(plan.key)
    if plan.apply is Apply.REAPPLY and desired is not None:
        log.info("%s/%s: children missing or drifted %s: re-applying", *plan.key, plan.drifted)
        try:
            await apply_children(ctl, plan.key, plan.uid, plan.generation, desired, memory)
        except Exception as e:
            log.warning("%s/%s: re-apply failed: %s", *plan.key, error_text(e))
    elif plan.write_scaler and desired is not None:
        try:
            if await ctl.call(ctl.io_pool, write_scaler, ctl, plan.key, plan.uid, desired.scaled_object, memory):
                ctl.mark(plan.key)  # what status says of it changed: the next pass shows it
        except Exception as e:
            log.warning("%s/%s: applying the ScaledObject failed: %s", *plan.key, error_text(e))
    if plan.write_pool and plan.apply is not Apply.REAPPLY and desired is not None:
        try:
            await ctl.call(ctl.io_pool, write_pool, ctl, plan.key, plan.uid, desired, memory)
        except Exception as e:
            log.warning("%s/%s: applying the InferencePool failed: %s", *plan.key, error_text(e))
        ctl.mark(plan.key)  # the next pass reads the pool back for status
    return await write_status(ctl, plan, memory)


# ------------------------------------------------------------------------------------- children


def apply_blocking(
    ctl: Controller, key: Key, uid: str, generation: int | None, desired: Desired, memory: Memory
) -> list[str]:
    """Write every child of `desired` (in a thread): the objects, then the ScaledObject."""
    namespace, name = key
    kube = ctl.kube
    if desired.denied:
        raise ApplyRefused("spec", 0, "; ".join(desired.denied), reasons.POLICY_DENIED)
    objs = copy.deepcopy(desired.applied)  # the Deployment gets its generation annotation here
    live: dict[str, dict[str, Any] | None] = {}
    for obj in objs:  # all checked before any is written: no half-applied takeover
        meta = obj["metadata"]
        existing = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if why := ownership.conflict(existing, uid):
            raise ApplyRefused(f"{obj['kind']}/{meta['name']}", 409, why, reasons.NAME_CONFLICT)
        live[obj["kind"]] = existing
    objs = within_rollout_budget(ctl, key, objs, live.get("Deployment"), generation, memory)
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
    if ctl.settings.network_policies and not any(o["kind"] == "NetworkPolicy" for o in desired.objects):
        remove_network_policy(ctl, key, uid)
    for kind, child_uid in desired.stale:  # ours, no longer rendered (a budget at 1 replica): by its uid only
        ctl.kube.delete(CHILD_KINDS[kind][0], kind, namespace, name, uid=child_uid)
        applied.append(f"{kind}/{name} deleted")
    write_scaler(ctl, key, uid, desired.scaled_object, memory)
    write_pool(ctl, key, uid, desired, memory)
    return applied


def write_scaler(ctl: Controller, key: Key, uid: str, desired: Mapping[str, Any] | None, memory: Memory) -> bool:
    """Write the ScaledObject (in a thread) and remember the outcome for status. True when that outcome changed
    what status says. A refusal is kept, not raised (the Deployment and Service serve at spec.replicas)."""
    before = memory.scaler_error
    try:
        written = autoscaling_io.write(ctl.kube, ctl.keda, desired, key[1], key[0], uid)
    except Exception as e:
        memory.scaler_error = autoscaling_io.refusal_text(e)
        raise
    if written is not None:
        memory.scaler_error = written.error
        if written.refused:
            memory.scaler_refused_at = time.monotonic()
        elif written.error is None:
            memory.scaler_refused_at = None
    return memory.scaler_error != before


def write_pool(ctl: Controller, key: Key, uid: str, desired: Desired, memory: Memory) -> bool:
    """Write the InferencePool and the endpoint picker (in a thread; not rendered: delete ours) and remember the
    outcome for status. True when that outcome changed what status says. A refusal is kept, not raised (the
    serving runs behind its Service)."""
    before = memory.pool_error
    try:
        written = routing_io.write(
            ctl.kube,
            ctl.gie,
            desired.inference_pool,
            key[1],
            key[0],
            uid,
            desired.picker_objects,
            desired.remove_picker,
        )
    except Exception as e:
        memory.pool_error = routing_io.refusal_text(e)
        raise
    if written is not None:
        memory.pool_error = written.error
        if written.refused:
            memory.pool_refused_at = time.monotonic()
        elif written.error is None:
            memory.pool_refused_at = None
    return memory.pool_error != before


def within_rollout_budget(
    ctl: Controller,
    key: Key,
    objs: list[dict[str, Any]],
    live: dict[str, Any] | None,
    generation: int | None,
    memory: Memory,
) -> list[dict[str, Any]]:
    """The children to apply: without the Deployment when an operator change of its pod template waits for
    a rollout slot (rolloutbudget.py; the hold is remembered in the record). The Deployment records the generation
    it was rendered from."""
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    if generation is not None:
        deployment["metadata"]["annotations"][rolloutbudget.ANNOTATION_GENERATION] = str(generation)
    desired = deployment["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH]
    budget = ctl.memories.budget
    live_hashes = rolloutbudget.Live.of(live, render.ANNOTATION_TEMPLATE_HASH)
    decision = budget.decide(key, live_hashes, desired, generation)
    memory.rollout_hold = rolloutbudget.Hold.after(decision, live_hashes, desired)
    if decision == rolloutbudget.Decision.HELD:
        return [o for o in objs if o is not deployment]
    if decision == rolloutbudget.Decision.GRANTED:
        log.info("%s/%s: operator change of the pod template: rolling (a rollout slot)", *key)
    return objs


def remove_network_policy(ctl: Controller, key: Key, uid: str) -> None:
    """spec.networkPolicy turned off: delete the one this LLMServing controls (never a namesake)."""
    namespace, name = key
    existing = ctl.kube.get("networking.k8s.io/v1", "NetworkPolicy", namespace, name)
    if existing is not None and ownership.conflict(existing, uid) is None:
        ctl.kube.delete("networking.k8s.io/v1", "NetworkPolicy", namespace, name, uid=existing["metadata"]["uid"])


async def apply_children(
    ctl: Controller, key: Key, uid: str, generation: int | None, desired: Desired, memory: Memory
) -> list[str]:
    """Apply in a thread of the apply pool; remember the outcome for the status (a refusal with its generation)."""
    memory.applying += 1
    scaler_before = memory.scaler_error
    try:
        applied = await ctl.call(ctl.apply_pool, apply_blocking, ctl, key, uid, generation, desired, memory)
    except ApplyRefused as e:
        memory.apply_error = ApplyError(generation, e.code, e.target, e.message, e.reason)
        raise
    finally:
        memory.applying -= 1
        memory.applied_at = time.monotonic()
        if memory.scaler_error != scaler_before:
            ctl.mark(key)  # what status says of the ScaledObject changed: the next pass shows it
    memory.apply_error = None
    memory.applied_generation = generation
    return applied


async def apply_generation(
    ctl: Controller, key: Key, uid: str, generation: int | None, desired: Desired, memory: Memory
) -> None:
    try:
        applied = await apply_children(ctl, key, uid, generation, desired, memory)
    except ApplyRefused as e:  # the status says so (ApplyFailed, PolicyDenied, NameConflict) now; retried slowly
        ctl.health.inc("ovserve_operator_apply_errors_total")
        log.warning("%s/%s: %s: %s (again in %.0f s)", *key, e.reason, e, REFUSED_RETRY_S)
        ctl.mark(key)
        ctl.mark_later(key, REFUSED_RETRY_S)
        return
    except Exception as e:
        ctl.health.inc("ovserve_operator_apply_errors_total")
        log.warning("%s/%s: applying children failed: %s (again in %.0f s)", *key, error_text(e), APPLY_RETRY_S)
        ctl.mark_later(key, APPLY_RETRY_S)
        return
    ctl.health.inc("ovserve_operator_applies_total")
    log.info("%s/%s: applied %s", *key, ", ".join(applied))


# ------------------------------------------------------------------------------------- status and Events


async def write_status(ctl: Controller, plan: Plan, memory: Memory) -> bool:
    """Patch the status when it changed, and post the Events of its transitions. True when patched."""
    if not plan.patch:
        return False
    namespace, name = plan.key
    memory.echo.writing(plan.status)  # before sending: its echo may arrive before the call returns
    try:
        patch = status.status_patch(plan.status, plan.stored)
        await ctl.call(ctl.io_pool, ctl.kube.patch_status, namespace, name, patch)
    except BaseException:
        memory.echo.failed()
        raise
    memory.last_status = plan.status
    memory.patched_over = plan.resource_version
    ctl.health.inc("ovserve_operator_status_patches_total")
    involved = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": name,
        "namespace": namespace,
        "uid": plan.uid,
    }
    for ev in plan.events:
        await post_event(ctl, namespace, event_body(involved, ev, ctl.settings.identity), f"{namespace}/{name}")
    return True


def event_body(involved: Mapping[str, Any], ev: status.Event, identity: str) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an LLMServing, or the operator's Lease)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": involved["namespace"]},
        "involvedObject": dict(involved),
        "type": ev.type,
        "reason": ev.reason,
        "message": ev.message[:1024],
        "source": {"component": "ovserve-operator"},
        "reportingComponent": "ovserve-operator",
        "reportingInstance": identity[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def post_event(ctl: Controller, namespace: str, body: dict[str, Any], about: str) -> None:
    """Post one Event; best effort (a failure is logged)."""
    try:
        await ctl.call(ctl.io_pool, ctl.kube.create_event, namespace, body)
        ctl.health.inc(f'ovserve_operator_events_total{{type="{body["type"]}",reason="{body["reason"]}"}}')
    except Exception as e:
        log.warning("%s: posting event %s failed: %s", about, body["reason"], error_text(e))
