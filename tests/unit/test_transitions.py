"""Table-driven transitions: each row is a sequence of observations (pods, runtime readings, the
Deployment, a refused apply, pod mount Events) fed to status.compute one after the other, each step
with the expected `kubectl get llmserving` columns, conditions and Events.

Every row also checks the truth invariants: a pinned *_CB never shows a FALLBACK or a legacy RESOLVED,
never a Fallback=True condition and never a PipelineFallback Event; the status conforms to the typed
model; observedGeneration of every condition is the step's generation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from ovserve_operator import spec as api
from ovserve_operator import status as st
from ovserve_operator.readback import Reading
from ovserve_operator.rules import ApplyError

from .podfixtures import CB_READY, FALLBACK_READY, LOADING, PA_ERROR, REFUSED, creating, pod, report

T0 = dt.datetime(2026, 12, 3, 7, 0, 0, tzinfo=dt.UTC)
HOSTPATH_MISSING = (
    'MountVolume.SetUp failed for volume "model" : hostPath type check failed: /no/such/dir is not a directory'
)
CLAIM_MISSING = (
    '0/1 nodes are available: persistentvolumeclaim "nope" not found. preemption: 0/1 nodes are available: '
    "1 Preemption is not helpful for scheduling."
)
QUANTITY_REFUSED = (
    'Deployment.apps "llm" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: "2": '
    "must be less than or equal to cpu limit of 1"
)


def crashloop(name: str, rep, hash: str = "h1") -> dict[str, Any]:
    return pod(
        name,
        hash=hash,
        ready=False,
        waiting=("CrashLoopBackOff", "back-off 20s"),
        last_terminated_message=rep.to_line(),
    )


def init(state: dict, last_exit: int | None = None, restarts: int = 0, message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "restartCount": restarts}
    if last_exit is not None:
        out["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error", "message": message}}
    return out


RUNNING = {"running": {"startedAt": "2026-12-03T07:00:00Z"}}
COMPLETED = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def downloading_pod(name: str, init_status: dict[str, Any], **kw: Any) -> dict[str, Any]:
    p = creating(name, init=init_status)
    p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    p["status"].update(kw)
    return p


@dataclasses.dataclass
class Step:
    pods: list[dict[str, Any]]
    reports: dict[str, Any] = dataclasses.field(default_factory=dict)  # name -> RuntimeReport | Reading
    pipeline: str = "AUTO"
    generation: int = 1
    desired_hash: str = "h1"
    model: dict[str, Any] = dataclasses.field(default_factory=lambda: {"pvc": {"claimName": "models", "path": "m"}})
    replicas: int = 1
    apply_error: ApplyError | None = None
    mounts: dict[str, str] = dataclasses.field(default_factory=dict)
    deployment: dict[str, Any] | None = None
    # expectations
    row: dict[str, str] = dataclasses.field(default_factory=dict)  # subset of the printed columns
    ready: tuple[str, str] | None = None
    resolved: tuple[str, str] | None = None
    fallback: tuple[str, str] | None = None
    events: list[tuple[str, str]] | None = None  # exactly these (type, reason), in any order
    message_has: tuple[str, ...] = ()  # in the Ready message


def columns(status: dict[str, Any], pipeline: str) -> dict[str, str]:
    """What `kubectl get llmserving -o wide` prints for this status."""
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    pl = status.get("pipeline") or {}
    return {
        "REQUESTED": pipeline,
        "RESOLVED": pl.get("resolved") or "",
        "FALLBACK": pl.get("fallbackReason") or "",
        "READY": status["readyDisplay"],
        "PHASE": status["phase"],
        "REASON": ready["reason"],
        "PREVIOUS": (status.get("previous") or {}).get("summary", ""),
    }


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == ctype)


def run(steps: list[Step]) -> None:
    previous: dict[str, Any] | None = None
    for i, s in enumerate(steps):
        spec = api.parse_spec({"model": s.model, "pipelineType": s.pipeline, "replicas": s.replicas})
        readings = {
            name: r
            if isinstance(r, Reading)
            else Reading(r, "http" if r and r.state != "failed" else "terminationMessage")
            for name, r in s.reports.items()
        }
        res = st.compute(
            name="llm",
            namespace="ns",
            generation=s.generation,
            spec=spec,
            pods=s.pods,
            readings=readings,
            previous=previous,
            desired_hash=s.desired_hash,
            now=T0 + dt.timedelta(seconds=10 * i),
            deployment=s.deployment,
            apply_error=s.apply_error,
            mount_failures=s.mounts,
        )
        status, where = res.status, f"step {i}"
        cols = columns(status, s.pipeline)
        assert {k: cols[k] for k in s.row} == s.row, where
        for ctype, want in (("Ready", s.ready), ("PipelineResolved", s.resolved), ("Fallback", s.fallback)):
            if want is not None:
                c = cond(status, ctype)
                assert (c["status"], c["reason"]) == want, f"{where}: {ctype}: {c}"
        if s.events is not None:
            assert sorted((e.type, e.reason) for e in res.events) == sorted(s.events), where
        for text in s.message_has:
            assert text in cond(status, "Ready")["message"], f"{where}: {text!r} not in {cond(status, 'Ready')}"
        # invariants
        api.LLMServingStatus.model_validate(status)
        assert {c["observedGeneration"] for c in status["conditions"]} == {s.generation}
        assert status["observedGeneration"] == s.generation
        if s.pipeline in ("LM_CB", "VLM_CB"):
            assert cols["FALLBACK"] == "" and cols["RESOLVED"] in ("", "LM_CB", "VLM_CB"), where
            assert cond(status, "Fallback")["status"] == "False", where
            assert "PipelineFallback" not in [e.reason for e in res.events], where
        previous = status


PREV_FB = "1/1 serving LM (fallback PagedAttentionNotSupported)"

TRANSITIONS = {
    "repin-auto-to-lm-cb-and-back": [
        Step(
            [pod("a")],
            {"a": FALLBACK_READY},
            row={"RESOLVED": "LM", "FALLBACK": "PagedAttentionNotSupported", "READY": "1/1", "PHASE": "Ready"},
            fallback=("True", "PagedAttentionNotSupported"),
            events=[("Warning", "PipelineFallback"), ("Normal", "Ready")],
        ),
        # re-pinned: the new pod is refused, the old one keeps serving LM (reported apart)
        Step(
            [pod("a"), pod("b", hash="h2", ready=False)],
            {"a": FALLBACK_READY, "b": LOADING},
            pipeline="LM_CB",
            generation=2,
            desired_hash="h2",
            row={"RESOLVED": "", "FALLBACK": "", "READY": "0/1", "PHASE": "Loading", "PREVIOUS": PREV_FB},
            ready=("False", "Loading"),
            resolved=("Unknown", "Loading"),
            fallback=("False", "PinnedPipeline"),
            events=[],
            message_has=("earlier spec still serve",),
        ),
        Step(
            [pod("a"), crashloop("b", REFUSED, hash="h2")],
            {"a": FALLBACK_READY, "b": REFUSED},
            pipeline="LM_CB",
            generation=2,
            desired_hash="h2",
            row={"RESOLVED": "", "FALLBACK": "", "READY": "0/1", "PHASE": "Failed", "PREVIOUS": PREV_FB},
            ready=("False", "PagedAttentionNotSupported"),
            resolved=("False", "PagedAttentionNotSupported"),
            fallback=("False", "PinnedPipeline"),
            events=[("Warning", "PagedAttentionNotSupported")],
            message_has=("not downgraded", PA_ERROR, "1 pod(s) of an earlier spec still serve (1/1 serving LM"),
        ),
        # back to AUTO: the old template is the current one again
        Step(
            [pod("a"), crashloop("b", REFUSED, hash="h2") | {"metadata": {"name": "b", "deletionTimestamp": "x"}}],
            {"a": FALLBACK_READY, "b": REFUSED},
            generation=3,
            row={
                "RESOLVED": "LM",
                "FALLBACK": "PagedAttentionNotSupported",
                "READY": "1/1",
                "PHASE": "Ready",
                "PREVIOUS": "",
            },
            fallback=("True", "PagedAttentionNotSupported"),
            events=[("Warning", "PipelineFallback"), ("Normal", "Ready")],
        ),
    ],
    "pinned-cb-pod-claiming-legacy-is-never-shown-as-fallback": [
        Step(
            [pod("a")],
            {"a": FALLBACK_READY},  # a runtime that broke the contract: the status still tells no fallback
            pipeline="LM_CB",
            row={"RESOLVED": "", "FALLBACK": ""},
            fallback=("False", "PinnedPipeline"),
        ),
    ],
    "missing-hostpath": [
        Step(
            [creating("a")],
            model={"hostPath": {"path": "/no/such/dir"}},
            row={"PHASE": "Pending", "REASON": "ContainerCreating"},
            events=[],
        ),
        Step(
            [creating("a")],
            model={"hostPath": {"path": "/no/such/dir"}},
            mounts={"a": HOSTPATH_MISSING},
            row={"PHASE": "Failed", "REASON": "ModelNotFound", "RESOLVED": ""},
            resolved=("Unknown", "ModelNotFound"),
            events=[("Warning", "ModelNotFound")],
            message_has=("hostPath /no/such/dir does not exist", "is not a directory"),
        ),
    ],
    "other-mount-failure": [
        Step(
            [creating("a")],
            mounts={"a": 'MountVolume.SetUp failed for volume "model" : mount failed: exit status 32'},
            row={"PHASE": "Failed", "REASON": "VolumeMountFailed"},
            message_has=("exit status 32",),
        ),
    ],
    "missing-pvc": [
        Step(
            [pod("a", unschedulable=CLAIM_MISSING)],
            model={"pvc": {"claimName": "nope", "path": "tiny"}},
            row={"PHASE": "Failed", "REASON": "ModelNotFound"},
            events=[("Warning", "ModelNotFound")],
            message_has=('claim "nope" not found in namespace ns', "claim nope path tiny"),
        ),
    ],
    "runtime-model-not-found-names-the-source": [
        Step(
            [
                crashloop(
                    "a",
                    report("failed", resolved=None, reason="ModelNotFound", message="model directory does not exist"),
                )
            ],
            {"a": report("failed", resolved=None, reason="ModelNotFound", message="model directory does not exist")},
            model={"pvc": {"claimName": "models", "path": "missing"}},
            row={"PHASE": "Failed", "REASON": "ModelNotFound"},
            message_has=("claim models path missing: model directory does not exist",),
        ),
    ],
    "init-fails-once-then-succeeds": [
        Step(
            [downloading_pod("a", init(RUNNING))],
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Pending", "REASON": "ModelDownloading"},
            events=[],
        ),
        Step(
            [
                downloading_pod(
                    "a", init({"waiting": {"reason": "CrashLoopBackOff"}}, 1, 1, "model download failed: HTTP 503")
                )
            ],
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Failed", "REASON": "ModelDownloadFailed"},
            events=[("Warning", "ModelDownloadFailed")],
            message_has=("HTTP 503", "2 attempts"),
        ),
        Step(
            [downloading_pod("a", init(RUNNING, 1, 1, "model download failed: HTTP 503"))],
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Pending", "REASON": "ModelDownloading"},
            message_has=("attempt 2",),
        ),
        Step(  # completed: its lastState (the 503) is history, not a failure
            [pod("a", ready=False, init=init(COMPLETED, 1, 1, "model download failed: HTTP 503"))],
            {"a": LOADING},
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Loading", "REASON": "Loading"},
        ),
        Step(
            [pod("a", init=init(COMPLETED, 1, 1, "model download failed: HTTP 503"))],
            {"a": CB_READY},
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Ready", "RESOLVED": "LM_CB", "READY": "1/1"},
            events=[("Normal", "Ready"), ("Normal", "ContinuousBatching")],
        ),
    ],
    "missing-token-secret": [
        Step(
            [
                downloading_pod(
                    "a",
                    init({"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'}}),
                )
            ],
            model={"huggingFace": {"repo": "o/r", "tokenSecretRef": {"name": "hf"}}},
            row={"PHASE": "Failed", "REASON": "CreateContainerConfigError"},
            events=[("Warning", "CreateContainerConfigError")],
            message_has=('secret "hf" not found', "init container model-download"),
        ),
    ],
    "init-image-pull-is-pending-with-the-kubelet-message": [
        Step(
            [downloading_pod("a", init({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling x"}}))],
            model={"huggingFace": {"repo": "o/r"}},
            row={"PHASE": "Pending", "REASON": "ImagePullBackOff"},
            message_has=("Back-off pulling x",),
        ),
    ],
    "refused-apply-new-object": [
        Step(
            [],
            generation=1,
            apply_error=ApplyError(1, 422, "Deployment/llm", QUANTITY_REFUSED),
            row={"PHASE": "Failed", "REASON": "ApplyFailed", "READY": "0/1"},
            resolved=("Unknown", "ApplyFailed"),
            events=[("Warning", "ApplyFailed")],
            message_has=("Deployment/llm (HTTP 422)", "must be less than or equal to cpu limit"),
        ),
    ],
    "refused-apply-existing-object": [
        Step([pod("a")], {"a": CB_READY}, row={"PHASE": "Ready"}),
        Step(
            [pod("a")],
            {"a": CB_READY},
            generation=2,
            desired_hash="h2",
            apply_error=ApplyError(2, 422, "Deployment/llm", QUANTITY_REFUSED),
            row={
                "PHASE": "Failed",
                "REASON": "ApplyFailed",
                "READY": "0/1",
                "RESOLVED": "",
                "PREVIOUS": "1/1 serving LM_CB",
            },
            events=[("Warning", "ApplyFailed")],
            message_has=("must be less than", "earlier spec still serve"),
        ),
        # an error of an older generation is not this generation's truth
        Step(
            [pod("a")],
            {"a": CB_READY},
            generation=3,
            apply_error=ApplyError(2, 422, "Deployment/llm", QUANTITY_REFUSED),
            row={"PHASE": "Ready", "REASON": "AllReplicasReady"},
        ),
    ],
    "policy-denied-hostpath": [
        Step(
            [],
            generation=1,
            apply_error=ApplyError(
                1,
                0,
                "spec",
                "spec.model.hostPath is denied: ... (operator setting OVSERVE_ALLOW_HOSTPATH)",
                "PolicyDenied",
            ),
            row={"PHASE": "Failed", "REASON": "PolicyDenied", "READY": "0/1", "RESOLVED": "", "FALLBACK": ""},
            events=[("Warning", "PolicyDenied")],
            message_has=("OVSERVE_ALLOW_HOSTPATH",),
        ),
    ],
    "name-conflict-with-a-foreign-service": [
        Step(
            [],
            generation=1,
            apply_error=ApplyError(
                1,
                409,
                "Service/llm",
                "Service ns/llm already exists and is not controlled by this LLMServing",
                "NameConflict",
            ),
            row={"PHASE": "Failed", "REASON": "NameConflict", "READY": "0/1"},
            events=[("Warning", "NameConflict")],
            message_has=("Service ns/llm already exists",),
        ),
    ],
    "readback-grace-then-persistent-failure": [
        Step([pod("a")], {"a": CB_READY}, row={"PHASE": "Ready"}),
        Step(  # within the grace: the remembered report
            [pod("a")],
            {"a": Reading(CB_READY, "remembered", "GET /v1/status: TimeoutError", T0)},
            row={"PHASE": "Ready", "READY": "1/1"},
            events=[],
        ),
        Step(  # beyond it: Unknown, what failed (since when: lastTransitionTime; no leader's own time in it)
            [pod("a")],
            {"a": Reading(None, "none", "GET /v1/status: TimeoutError", T0)},
            row={"PHASE": "Loading", "REASON": "ReadbackFailed", "READY": "0/1", "RESOLVED": ""},
            ready=("Unknown", "ReadbackFailed"),
            events=[("Warning", "ReadbackFailed")],
            message_has=("a is Ready but its report cannot be read: GET /v1/status: TimeoutError",),
        ),
        Step(
            [pod("a")],
            {"a": CB_READY},
            row={"PHASE": "Ready"},
            events=[("Normal", "Ready"), ("Normal", "ContinuousBatching")],
        ),
    ],
    "loading-pod-unreadable-says-since-when": [
        Step(
            [pod("a", ready=False)],
            {"a": Reading(None, "none", "GET /v1/status: ClientConnectorError", T0)},
            row={"PHASE": "Loading", "REASON": "Loading"},
            message_has=("ClientConnectorError (since 2026-12-03T07:00:00Z)",),
        ),
    ],
    "rollout-finishing-reports-old-pods-apart": [
        Step(
            [pod("old", hash="h0"), pod("new")],
            {"old": report(requested="LM", resolved="LM", reason="LegacyPipelineRequested"), "new": CB_READY},
            row={"PHASE": "Ready", "RESOLVED": "LM_CB", "PREVIOUS": "1/1 serving LM"},
            resolved=("True", "ContinuousBatching"),
        ),
    ],
}


@pytest.mark.parametrize("steps", list(TRANSITIONS.values()), ids=list(TRANSITIONS))
def test_transition(steps):
    run(steps)
