"""Builders of pod dicts and runtime reports as the apiserver / runtime produce them (unit tests)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ovserve_operator import render, status
from ovserve_operator import spec as api
from ovserve_operator.readback import Reading
from ovserve_runtime.report import PipelineReport, PipelineType, Reason, RuntimeReport, State

PA_ERROR = (
    "No ScaledDotProductAttention operation observed in the graph, cannot perform the "
    "SDPAToPagedAttention transformation."
)


def report(
    state: str = "ready",
    requested: str = "AUTO",
    resolved: str | None = "LM_CB",
    *,
    fallback: bool = False,
    reason: str = "ContinuousBatching",
    message: str = "",
) -> RuntimeReport:
    return RuntimeReport(
        state=State(state),
        model="m",
        device="CPU",
        pipeline=PipelineReport(
            requested=PipelineType(requested),
            resolved=PipelineType(resolved) if resolved else None,
            continuousBatching=bool(resolved and resolved.endswith("_CB")),
            fallback=fallback,
            reason=Reason(reason),
            message=message,
        ),
    )


CB_READY = report()
FALLBACK_READY = report(resolved="LM", fallback=True, reason="PagedAttentionNotSupported", message=PA_ERROR)
LEGACY_READY = report(requested="LM", resolved="LM", reason="LegacyPipelineRequested")
LOADING = report(state="loading", resolved=None, reason="Loading")
REFUSED = report(
    state="failed", requested="LM_CB", resolved=None, reason="PagedAttentionNotSupported", message=PA_ERROR
)


def pod(
    name: str,
    *,
    hash: str | None = "h1",
    phase: str = "Running",
    ready: bool = True,
    running: bool = True,
    ip: str = "10.244.0.10",
    waiting: tuple[str, str] | None = None,
    last_terminated_message: str | None = None,
    unschedulable: str | None = None,
    deleting: bool = False,
    init_failed: str | None = None,
    init: dict[str, Any] | None = None,
    uid: str | None = None,
    last_reason: str = "Error",
    memory_limit: str | None = None,
) -> dict[str, Any]:
    """A runtime pod. `init`: the model-download init container's status (state, lastState, restartCount)."""
    ready = ready and not waiting  # a waiting container is never ready
    annotations = {render.ANNOTATION_TEMPLATE_HASH: hash} if hash else {}
    conditions: list[dict[str, Any]] = []
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if unschedulable is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        )
        status["phase"] = "Pending"
    else:
        conditions.append({"type": "PodScheduled", "status": "True"})
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
        status["podIP"] = ip
        state: dict[str, Any]
        if waiting:
            state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif running:
            state = {"running": {"startedAt": "2026-12-03T00:00:00Z"}}
        else:
            state = {"terminated": {"exitCode": 3, "reason": "Error"}}
        cs: dict[str, Any] = {
            "name": render.CONTAINER_NAME,
            "state": state,
            "ready": ready,
            "restartCount": 0,
        }
        if last_terminated_message is not None:
            cs["lastState"] = {"terminated": {"exitCode": 3, "reason": last_reason, "message": last_terminated_message}}
            cs["restartCount"] = 1
        status["containerStatuses"] = [cs]
        if init_failed is not None:
            status["initContainerStatuses"] = [
                {
                    "name": render.INIT_CONTAINER_NAME,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": init_failed}},
                }
            ]
    if init is not None:
        status["initContainerStatuses"] = [{"name": render.INIT_CONTAINER_NAME, "restartCount": 0, **init}]
    meta: dict[str, Any] = {
        "uid": uid or f"uid-{name}",
        "name": name,
        "namespace": "ns",
        "annotations": annotations,
        "labels": render.labels("llm"),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    spec: dict[str, Any] = {}
    if memory_limit is not None:
        spec["containers"] = [{"name": render.CONTAINER_NAME, "resources": {"limits": {"memory": memory_limit}}}]
    if init is not None or init_failed is not None:
        spec["initContainers"] = [{"name": render.INIT_CONTAINER_NAME}]
    return {"metadata": meta, "spec": spec, "status": status}


def creating(name: str, *, hash: str = "h1", init: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scheduled, no container started yet (volumes are being mounted)."""
    p = pod(name, hash=hash, phase="Pending", ready=False, waiting=("ContainerCreating", ""), init=init)
    del p["status"]["podIP"]
    return p


def readings(reports: Mapping[str, RuntimeReport | None]) -> dict[str, Reading]:
    """Each pod's report as the operator reads it: over HTTP, a failed one from the termination message."""
    return {n: Reading(r, "http" if r and r.state != "failed" else "terminationMessage") for n, r in reports.items()}


def compute(
    spec: api.LLMServingSpec,
    pods: list[dict],
    reads: Mapping[str, Reading],
    *,
    now: dt.datetime,
    name: str = "llm",
    generation: int = 1,
    previous: Mapping[str, Any] | None = None,
    desired_hash: str = "h1",
    **extra: Any,
) -> status.Result:
    """status.compute of one LLMServing in namespace ns (the tests' common arguments; `extra`: the rest)."""
    return status.compute(
        name=name,
        namespace="ns",
        generation=generation,
        spec=spec,
        pods=pods,
        readings=dict(reads),
        previous=previous,
        desired_hash=desired_hash,
        now=now,
        **extra,
    )
