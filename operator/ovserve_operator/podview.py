"""Pod inspection, in one place: what a runtime pod dict (as the apiserver serves it) says.

Pure functions over plain dicts, used by readback (which pods to ask, termination reports) and by the
status rules (waiting reasons, init container state, scheduling). Facts about the pod only: what they
mean for the LLMServing is decided in rules.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from ovserve_runtime.report import RuntimeReport

from .render import ANNOTATION_TEMPLATE_HASH, CONTAINER_NAME, INIT_CONTAINER_NAME

Pod = Mapping[str, Any]

# The scheduler's message for a claim that does not exist (VolumeBinding plugin).
_CLAIM_NOT_FOUND = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
# Volume mount failures the kubelet reports as pod Events (they never reach the pod's status).
MOUNT_EVENT_REASONS = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume"})
# The Node authorizer refusing the kubelet a just-bound pod's claim: its graph has not seen the pod yet. It
# catches up within seconds and the kubelet's retry mounts the volume: not a failure of the user's volume.
_AUTHORIZER_LAG = "no relationship found between node"


def name(pod: Pod) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def uid(pod: Pod) -> str:
    return (pod.get("metadata") or {}).get("uid") or name(pod)


def template_hash(pod: Pod) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TEMPLATE_HASH)


def is_live(pod: Pod) -> bool:
    """Not terminating and not finished: a pod that counts."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def container_status(pod: Pod, container: str = CONTAINER_NAME, *, init: bool = False) -> Mapping[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for cs in (pod.get("status") or {}).get(key) or []:
        if cs.get("name") == container:
            return cs
    return {}


def _condition(pod: Pod, ctype: str) -> Mapping[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def pod_ready(pod: Pod) -> bool:
    return _condition(pod, "Ready").get("status") == "True"


def container_ready(pod: Pod) -> bool:
    return bool(container_status(pod).get("ready"))


def unschedulable_message(pod: Pod) -> str | None:
    """The scheduler's message while the pod cannot be placed, else None."""
    c = _condition(pod, "PodScheduled")
    if c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return c.get("message") or "no node fits the pod"
    return None


def missing_claim(message: str | None) -> str | None:
    """The claim name when the scheduler says it does not exist."""
    m = _CLAIM_NOT_FOUND.search(message or "")
    return m.group(1) if m else None


def waiting(pod: Pod, container: str = CONTAINER_NAME, *, init: bool = False) -> tuple[str, str] | None:
    """(reason, kubelet's message) while the container waits, else None."""
    w = (container_status(pod, container, init=init).get("state") or {}).get("waiting") or {}
    return (w["reason"], w.get("message") or "") if w.get("reason") else None


def is_running(pod: Pod) -> bool:
    """The runtime container runs in a live pod with an IP: its /v1/status can be asked."""
    status = pod.get("status") or {}
    if not is_live(pod) or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    return (container_status(pod).get("state") or {}).get("running") is not None


def ready_since_start(pod: Pod) -> bool:
    """The runtime container has been ready since it last started: the pod's ContainersReady condition changed
    after the container's start (to True, or from True back to False). Timestamps are whole seconds: a
    change in the very second of the start is taken as the restart's own (not ready)."""
    started = ((container_status(pod).get("state") or {}).get("running") or {}).get("startedAt") or ""
    changed = _condition(pod, "ContainersReady").get("lastTransitionTime") or ""
    return bool(started and changed and changed > started)


def termination_report(pod: Pod) -> RuntimeReport | None:
    """The runtime report in the runtime container's current or last termination message, if any. The last
    one is trusted only while the container is not running, or runs again but has not been ready since: a
    crash-looping runtime that loads again between its failures stays failed (no flapping to Loading), while a
    recovered one speaks for itself (/v1/status) and its previous failure never makes it Failed again when it
    is briefly unready."""
    cs = container_status(pod)
    if "running" in (cs.get("state") or {}) and (container_ready(pod) or ready_since_start(pod)):
        return None
    for key in ("state", "lastState"):
        terminated = (cs.get(key) or {}).get("terminated") or {}
        report = RuntimeReport.from_text(terminated.get("message") or "")
        if report is not None:
            return report
    return None


def oom_killed(pod: Pod) -> str | None:
    """The runtime container's memory limit ("none" without one) when the kernel killed it for memory: now,
    or last time while it is not running again (a container that runs again is not latched)."""
    cs = container_status(pod)
    state = cs.get("state") or {}
    term = state.get("terminated") or ({} if "running" in state else (cs.get("lastState") or {}).get("terminated"))
    if not term or term.get("reason") != "OOMKilled":
        return None
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == CONTAINER_NAME:
            return str(((c.get("resources") or {}).get("limits") or {}).get("memory") or "none")
    return "unknown"


def is_creating(pod: Pod) -> bool:
    """Scheduled but no container has started yet (volumes are mounted first): the state in which a
    missing hostPath or a failing mount shows only as a pod Event."""
    status = pod.get("status") or {}
    if not is_live(pod) or status.get("phase") != "Pending" or unschedulable_message(pod) is not None:
        return False
    if _condition(pod, "PodScheduled").get("status") != "True":
        return False
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            state = cs.get("state") or {}
            if "running" in state or "terminated" in state or cs.get("lastState", {}).get("terminated"):
                return False
    return True


class InitPhase(StrEnum):
    NONE = "none"  # no init container (not a Hugging Face source)
    WAITING = "waiting"  # not started yet, or waiting with a kubelet reason
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # exited non-zero now, or backing off after a failure


@dataclasses.dataclass(frozen=True)
class InitState:
    phase: InitPhase
    reason: str = ""  # the kubelet's waiting reason, if any
    message: str = ""  # the kubelet's waiting message or the failed run's termination message
    restarts: int = 0


def _termination_text(term: Mapping[str, Any]) -> str:
    text = (term.get("message") or "").strip()[-2000:]
    return text or term.get("reason") or f"exit code {term.get('exitCode')}"


def init_state(pod: Pod, container: str = INIT_CONTAINER_NAME) -> InitState:
    """The state of the model download init container. Only its CURRENT state decides: a completed
    container is done whatever its lastState says (it failed once and then succeeded)."""
    cs = container_status(pod, container, init=True)
    if not cs:
        has_init = any(c.get("name") == container for c in (pod.get("spec") or {}).get("initContainers") or [])
        return InitState(InitPhase.WAITING if has_init else InitPhase.NONE)
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    restarts = int(cs.get("restartCount") or 0)
    if term := state.get("terminated"):
        if term.get("exitCode", 0) == 0:
            return InitState(InitPhase.COMPLETED, restarts=restarts)
        return InitState(InitPhase.FAILED, term.get("reason") or "Error", _termination_text(term), restarts)
    if "running" in state:
        return InitState(InitPhase.RUNNING, restarts=restarts)
    w = state.get("waiting") or {}
    reason, message = w.get("reason") or "", w.get("message") or ""
    if last and last.get("exitCode", 0) != 0 and reason in ("CrashLoopBackOff", "PodInitializing", ""):
        # backing off after a failed run: the failure is the news, the back-off is the consequence
        return InitState(InitPhase.FAILED, reason, _termination_text(last), restarts)
    return InitState(InitPhase.WAITING, reason, message, restarts)


def _repeated(event: Mapping[str, Any]) -> bool:
    """The kubelet saw this failure more than once: its Event was aggregated (count, or a series)."""
    series = event.get("series") or {}
    return max(event.get("count") or 1, series.get("count") or 0) >= 2


def mount_failure(events: list[Mapping[str, Any]]) -> str | None:
    """The newest kubelet volume failure message among a pod's Events, else None. A failure counts once the
    kubelet's retry (backing off from half a second) failed alike: a one-off refusal that the retry gets past
    is not a failure of the user's volume, and the Node authorizer's lag is never one."""
    failures = [
        e
        for e in events
        if e.get("type") == "Warning"
        and e.get("reason") in MOUNT_EVENT_REASONS
        and _AUTHORIZER_LAG not in (e.get("message") or "")
        and _repeated(e)
    ]
    if not failures:
        return None
    newest = max(failures, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return newest.get("message") or newest.get("reason")
