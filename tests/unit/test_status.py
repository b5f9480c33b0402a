"""Table-driven tests of the pure status computation (ovserve_operator.status)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from ovserve_operator import spec as api
from ovserve_operator import status as st
from ovserve_operator.readback import Reading
from ovserve_operator.reasons import REGISTRY

from .podfixtures import CB_READY, FALLBACK_READY, LEGACY_READY, LOADING, PA_ERROR, REFUSED, pod, readings, report
from .podfixtures import compute as compute_status

NOW = dt.datetime(2026, 12, 3, 7, 0, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(minutes=5)
REASON_RE = re.compile(api.REASON_PATTERN)


def spec(pipeline: str = "AUTO", replicas: int = 1, device: str = "CPU") -> api.LLMServingSpec:
    return api.parse_spec(
        {
            "model": {"hostPath": {"path": "/models/tiny"}},
            "pipelineType": pipeline,
            "replicas": replicas,
            "device": device,
        }
    )


def compute(
    pods, reports, *, pipeline="AUTO", replicas=1, previous=None, now=NOW, generation=3, desired_hash="h1", **extra
):
    return compute_status(
        spec(pipeline, replicas),
        pods,
        readings(reports),
        now=now,
        generation=generation,
        previous=previous,
        desired_hash=desired_hash,
        **extra,
    )


def cond(status, ctype):
    return next(c for c in status["conditions"] if c["type"] == ctype)


# (id, pods, reports, pipeline, replicas, phase, ready (status, reason), resolved (status, reason),
#  fallback (status, reason), RESOLVED column, FALLBACK column, readyReplicas)
CASES = [
    (
        "no-pods",
        [],
        {},
        "AUTO",
        1,
        "Pending",
        ("False", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        None,
        None,
        0,
    ),
    (
        "scaled-to-zero",
        [],
        {},
        "AUTO",
        0,
        "ScaledToZero",
        ("False", "ScaledToZero"),
        ("Unknown", "ScaledToZero"),
        ("Unknown", "ScaledToZero"),
        None,
        None,
        0,
    ),
    (
        "unschedulable",
        [pod("a", unschedulable="0/1 nodes are available: 1 Insufficient gpu.intel.com/i915.")],
        {},
        "AUTO",
        1,
        "Pending",
        ("False", "Unschedulable"),
        ("Unknown", "Unschedulable"),
        ("Unknown", "Unschedulable"),
        None,
        None,
        0,
    ),
    (
        "container-creating",
        [pod("a", ready=False, waiting=("ContainerCreating", ""))],
        {"a": None},
        "AUTO",
        1,
        "Pending",
        ("False", "ContainerCreating"),
        ("Unknown", "ContainerCreating"),
        ("Unknown", "ContainerCreating"),
        None,
        None,
        0,
    ),
    (
        "loading",
        [pod("a", ready=False)],
        {"a": LOADING},
        "AUTO",
        1,
        "Loading",
        ("False", "Loading"),
        ("Unknown", "Loading"),
        ("Unknown", "Loading"),
        None,
        None,
        0,
    ),
    (
        "auto-cb-ready",
        [pod("a")],
        {"a": CB_READY},
        "AUTO",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "ContinuousBatching"),
        ("False", "ContinuousBatching"),
        "LM_CB",
        None,
        1,
    ),
    (
        "auto-fallback-ready",
        [pod("a")],
        {"a": FALLBACK_READY},
        "AUTO",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "PagedAttentionNotSupported"),
        ("True", "PagedAttentionNotSupported"),
        "LM",
        "PagedAttentionNotSupported",
        1,
    ),
    (
        "lm-pinned",
        [pod("a")],
        {"a": LEGACY_READY},
        "LM",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "LegacyPipelineRequested"),
        ("False", "LegacyPipelineRequested"),
        "LM",
        None,
        1,
    ),
    (
        "pinned-cb-refused-crashloop",
        [
            pod(
                "a",
                ready=False,
                waiting=("CrashLoopBackOff", "back-off 10s"),
                last_terminated_message="loading model\n" + REFUSED.to_line(),
            )
        ],
        {"a": REFUSED},
        "LM_CB",
        1,
        "Failed",
        ("False", "PagedAttentionNotSupported"),
        ("False", "PagedAttentionNotSupported"),
        ("False", "PinnedPipeline"),
        None,
        None,
        0,
    ),
    (
        "one-of-two-ready",
        [pod("a"), pod("b", ready=False)],
        {"a": CB_READY, "b": LOADING},
        "AUTO",
        2,
        "Loading",
        ("False", "Loading"),
        ("True", "ContinuousBatching"),
        ("False", "ContinuousBatching"),
        "LM_CB",
        None,
        1,
    ),
    (
        "pods-disagree-current",
        [pod("a"), pod("b")],
        {"a": CB_READY, "b": FALLBACK_READY},
        "AUTO",
        2,
        "Loading",
        ("False", "PodsDisagree"),
        ("False", "PodsDisagree"),
        ("True", "PagedAttentionNotSupported"),
        "LM,LM_CB",
        "PagedAttentionNotSupported",
        2,
    ),
    (
        "rollout-old-pod-reported-apart",
        [pod("old", hash="h0"), pod("new", ready=False)],
        {"old": LEGACY_READY, "new": LOADING},
        "AUTO",
        1,
        "Loading",
        ("False", "Loading"),
        ("Unknown", "Loading"),
        ("Unknown", "Loading"),
        None,
        None,
        0,
    ),
    (
        "rollout-both-resolved",
        [pod("old", hash="h0"), pod("new")],
        {"old": LEGACY_READY, "new": CB_READY},
        "AUTO",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "ContinuousBatching"),
        ("False", "ContinuousBatching"),
        "LM_CB",
        None,
        1,
    ),
    (
        "outdated-ready-pod-not-counted",
        [pod("old", hash="h0")],
        {"old": CB_READY},
        "AUTO",
        1,
        "Pending",
        ("False", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        None,
        None,
        0,
    ),
    (
        "terminating-pod-ignored",
        [pod("a", deleting=True)],
        {"a": CB_READY},
        "AUTO",
        1,
        "Pending",
        ("False", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        ("Unknown", "PodsNotCreated"),
        None,
        None,
        0,
    ),
    (
        "pod-ready-but-report-unreachable",
        [pod("a")],
        {"a": None},
        "AUTO",
        1,
        "Loading",
        ("False", "Loading"),
        ("Unknown", "Loading"),
        ("Unknown", "Loading"),
        None,
        None,
        0,
    ),
    (
        "model-not-found",
        [pod("a", ready=False, waiting=("CrashLoopBackOff", ""))],
        {"a": report("failed", resolved=None, reason="ModelNotFound", message="no such dir")},
        "AUTO",
        1,
        "Failed",
        ("False", "ModelNotFound"),
        ("False", "ModelNotFound"),
        ("Unknown", "ModelNotFound"),
        None,
        None,
        0,
    ),
    (
        "crashloop-without-report",
        [pod("a", ready=False, waiting=("CrashLoopBackOff", "back-off"))],
        {"a": None},
        "AUTO",
        1,
        "Failed",
        ("False", "CrashLoopBackOff"),
        ("Unknown", "CrashLoopBackOff"),
        ("Unknown", "CrashLoopBackOff"),
        None,
        None,
        0,
    ),
    (
        "image-pull",
        [pod("a", ready=False, waiting=("ImagePullBackOff", "no such image"))],
        {"a": None},
        "AUTO",
        1,
        "Pending",
        ("False", "ImagePullBackOff"),
        ("Unknown", "ImagePullBackOff"),
        ("Unknown", "ImagePullBackOff"),
        None,
        None,
        0,
    ),
    (
        "download-failed",
        [pod("a", ready=False, waiting=("PodInitializing", ""), init_failed="HTTP 401")],
        {"a": None},
        "AUTO",
        1,
        "Failed",
        ("False", "ModelDownloadFailed"),
        ("Unknown", "ModelDownloadFailed"),
        ("Unknown", "ModelDownloadFailed"),
        None,
        None,
        0,
    ),
    (
        "cb-pinned-ready",
        [pod("a")],
        {"a": report(requested="LM_CB")},
        "LM_CB",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "ContinuousBatching"),
        ("False", "ContinuousBatching"),
        "LM_CB",
        None,
        1,
    ),
    (
        "init-completed-after-a-failure-is-not-a-failure",
        [pod("a", init={"state": {"terminated": {"exitCode": 0}}, "lastState": {"terminated": {"exitCode": 1}}})],
        {"a": CB_READY},
        "AUTO",
        1,
        "Ready",
        ("True", "AllReplicasReady"),
        ("True", "ContinuousBatching"),
        ("False", "ContinuousBatching"),
        "LM_CB",
        None,
        1,
    ),
    (
        "pinned-cb-loading-never-unknown-fallback",
        [pod("a", ready=False)],
        {"a": LOADING},
        "LM_CB",
        1,
        "Loading",
        ("False", "Loading"),
        ("Unknown", "Loading"),
        ("False", "PinnedPipeline"),
        None,
        None,
        0,
    ),
]


@pytest.mark.parametrize(
    "pods,reports,pipeline,replicas,phase,ready,resolved,fallback,col_resolved,col_fallback,ready_n",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_compute(
    pods, reports, pipeline, replicas, phase, ready, resolved, fallback, col_resolved, col_fallback, ready_n
):
    res = compute(pods, reports, pipeline=pipeline, replicas=replicas)
    s = res.status
    got = {
        "phase": s["phase"],
        "ready": (cond(s, "Ready")["status"], cond(s, "Ready")["reason"]),
        "resolved": (cond(s, "PipelineResolved")["status"], cond(s, "PipelineResolved")["reason"]),
        "fallback": (cond(s, "Fallback")["status"], cond(s, "Fallback")["reason"]),
        "col_resolved": s["pipeline"]["resolved"],
        "col_fallback": s["pipeline"]["fallbackReason"],
        "ready_n": s["readyReplicas"],
    }
    assert got == {
        "phase": phase,
        "ready": ready,
        "resolved": resolved,
        "fallback": fallback,
        "col_resolved": col_resolved,
        "col_fallback": col_fallback,
        "ready_n": ready_n,
    }
    # invariants, every case
    assert s["readyDisplay"] == f"{ready_n}/{replicas}"
    assert s["pipeline"]["requested"] == pipeline
    assert s["observedGeneration"] == 3
    assert s["endpoint"] == "http://llm.ns.svc:8000/v3"
    assert s["selector"] == "ovserve.dev/llmserving=llm,app.kubernetes.io/component=runtime"
    assert [c["type"] for c in s["conditions"]] == ["Ready", "PipelineResolved", "Fallback"]
    assert s["computedAt"] == "2026-12-03T07:00:00Z"
    for c in s["conditions"]:
        assert REASON_RE.match(c["reason"]), c
        assert c["reason"] in REGISTRY, c  # every reason written is a documented constant
        assert c["observedGeneration"] == 3
        assert c["lastTransitionTime"] == "2026-12-03T07:00:00Z"
    api.LLMServingStatus.model_validate(s)  # conforms to the CRD's status schema model
    if s["phase"] == "Ready":
        assert cond(s, "Ready")["status"] == "True"


def test_pinned_cb_is_never_downgraded_and_says_so():
    res = compute([pod("a", ready=False, waiting=("CrashLoopBackOff", ""))], {"a": REFUSED}, pipeline="LM_CB")
    s = res.status
    assert s["pipeline"]["requested"] == "LM_CB"
    assert s["pipeline"]["resolved"] is None
    assert s["pipeline"]["fallback"] is False
    msg = cond(s, "Ready")["message"]
    assert "pinned" in msg and "not downgraded" in msg and PA_ERROR in msg
    assert [(e.type, e.reason) for e in res.events] == [("Warning", "PagedAttentionNotSupported")]


def test_fallback_message_carries_original_error_and_warns():
    res = compute([pod("a")], {"a": FALLBACK_READY})
    assert PA_ERROR in cond(res.status, "Fallback")["message"]
    assert PA_ERROR in res.status["pipeline"]["message"]
    kinds = [(e.type, e.reason) for e in res.events]
    assert ("Warning", "PipelineFallback") in kinds
    assert ("Normal", "Ready") in kinds
    assert ("Normal", "ContinuousBatching") not in kinds


def test_cb_ready_posts_normal_events_only():
    res = compute([pod("a")], {"a": CB_READY})
    assert sorted((e.type, e.reason) for e in res.events) == [
        ("Normal", "ContinuousBatching"),
        ("Normal", "Ready"),
    ]


def test_unschedulable_message_is_the_schedulers():
    msg = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    res = compute([pod("a", unschedulable=msg)], {})
    assert cond(res.status, "Ready")["message"] == msg
    assert [(e.type, e.reason) for e in res.events] == [("Warning", "Unschedulable")]


def test_disagreement_lists_every_pod():
    res = compute([pod("a"), pod("b")], {"a": CB_READY, "b": FALLBACK_READY}, replicas=2)
    msg = res.status["pipeline"]["message"]
    assert "a: LM_CB (ContinuousBatching" in msg and "b: LM (PagedAttentionNotSupported, fallback" in msg
    assert res.status["pipeline"]["reason"] == "PodsDisagree"
    assert ("Warning", "PodsDisagree") in [(e.type, e.reason) for e in res.events]


def test_last_transition_time_changes_only_with_status():
    first = compute([pod("a", ready=False)], {"a": LOADING}).status
    # same status later: times kept, no events
    again = compute([pod("a", ready=False)], {"a": LOADING}, previous=first, now=LATER)
    assert again.status["conditions"] == first["conditions"]
    assert again.events == []
    assert st.same(again.status, first)
    # Ready flips: only Ready's (and the others that changed) time moves
    ready = compute([pod("a")], {"a": CB_READY}, previous=first, now=LATER).status
    assert cond(ready, "Ready")["lastTransitionTime"] == "2026-12-03T07:05:00Z"
    assert cond(ready, "PipelineResolved")["lastTransitionTime"] == "2026-12-03T07:05:00Z"
    # reason change with the same status keeps the time
    lost = compute(
        [pod("a", ready=False)],
        {"a": report(state="loading")},
        previous=ready,
        now=LATER + dt.timedelta(minutes=1),
    ).status
    assert cond(lost, "Ready")["status"] == "False"
    again2 = compute([], {}, previous=lost, now=LATER + dt.timedelta(minutes=2)).status
    assert cond(again2, "Ready")["reason"] == "PodsNotCreated"
    assert cond(again2, "Ready")["lastTransitionTime"] == cond(lost, "Ready")["lastTransitionTime"]


def test_ready_is_recomputed_not_latched():
    ready = compute([pod("a")], {"a": CB_READY}).status
    crashed = compute(
        [pod("a", ready=False, waiting=("CrashLoopBackOff", ""))],
        {"a": report("failed", resolved=None, reason="ModelLoadFailed", message="boom")},
        previous=ready,
        now=LATER,
    )
    assert crashed.status["phase"] == "Failed"
    assert cond(crashed.status, "Ready")["status"] == "False"
    assert ("Warning", "ModelLoadFailed") in [(e.type, e.reason) for e in crashed.events]


def test_stale_generation_conditions_follow_generation():
    """A status of generation 6 (refused apply) recomputed for generation 7: every condition names 7, the
    refusal of 6 no longer decides Ready, and a condition whose status did not change keeps its time."""
    from ovserve_operator.rules import ApplyError

    refused = ApplyError(6, 422, "Deployment/llm", "spec.template: invalid", "ApplyFailed")
    pods = [pod("a", ready=False, unschedulable="0/1 nodes are available")]
    old = compute_status(spec(), pods, {}, now=NOW, generation=6, apply_error=refused).status
    assert (old["observedGeneration"], cond(old, "Ready")["reason"]) == (6, "ApplyFailed")
    new = compute_status(spec(), pods, {}, now=LATER, generation=7, previous=old, apply_error=refused).status
    assert new["observedGeneration"] == 7
    assert [c["observedGeneration"] for c in new["conditions"]] == [7, 7, 7]
    assert cond(new, "Ready")["reason"] == "Unschedulable" and new["phase"] == "Pending"
    # Ready stayed False: its transition time is the old one; PipelineResolved stayed Unknown alike
    assert cond(new, "Ready")["lastTransitionTime"] == cond(old, "Ready")["lastTransitionTime"] == st.timestamp(NOW)
    assert cond(new, "PipelineResolved")["lastTransitionTime"] == st.timestamp(NOW)
    assert new["computedAt"] == st.timestamp(LATER)


def test_a_missing_child_is_not_ready_and_named():
    ready = compute([pod("a")], {"a": CB_READY}).status
    assert cond(ready, "Ready")["status"] == "True" and ready["endpoint"]
    gone = compute([pod("a")], {"a": CB_READY}, previous=ready, now=LATER, missing_children=["Service"])
    ready_cond = cond(gone.status, "Ready")
    assert (ready_cond["status"], ready_cond["reason"]) == ("False", "ChildMissing")
    assert "Service llm" in ready_cond["message"]
    assert gone.status["phase"] == "Pending" and gone.status.get("endpoint") is None
    assert ("Warning", "ChildMissing") in [(e.type, e.reason) for e in gone.events]


def test_pods_of_a_hand_edited_template_are_not_current():
    from ovserve_operator import render
    from ovserve_operator.settings import Settings

    template = render.pod_template("llm", spec(), Settings())
    edited = pod("a")
    edited["spec"]["containers"] = [dict(template["spec"]["containers"][0])]
    edited["spec"]["containers"][0]["env"] = [
        *edited["spec"]["containers"][0]["env"],
        {"name": "INJECTED", "value": "1"},
    ]
    plain = pod("b")
    plain["spec"]["containers"] = template["spec"]["containers"]
    result = compute_status(
        spec(),
        [edited, plain],
        {"a": Reading(CB_READY, "http"), "b": Reading(CB_READY, "http")},
        now=NOW,
        generation=3,
        desired_template=template,
    ).status
    assert result["readyReplicas"] == 1 and result["previous"]["replicas"] == 1


def test_no_events_when_nothing_changes():
    first = compute([pod("a")], {"a": FALLBACK_READY})
    second = compute([pod("a")], {"a": FALLBACK_READY}, previous=first.status, now=LATER)
    assert second.events == []


@pytest.mark.parametrize(
    "conditions,phase",
    [
        ([], "Pending"),
        ([{"type": "Ready", "status": "True", "reason": "AllReplicasReady"}], "Ready"),
        ([{"type": "Ready", "status": "False", "reason": "PagedAttentionNotSupported"}], "Failed"),
        ([{"type": "Ready", "status": "False", "reason": "Unschedulable"}], "Pending"),
        ([{"type": "Ready", "status": "False", "reason": "Loading"}], "Loading"),
        ([{"type": "Ready", "status": "Unknown", "reason": "Whatever"}], "Loading"),
    ],
)
def test_derive_phase(conditions, phase):
    assert st.derive_phase(conditions).value == phase


def test_pods_refused_by_admission_show_the_deployments_message():
    msg = (
        'pods "x" is forbidden: violates PodSecurity "restricted:latest": restricted volume types '
        '(volume "model" uses restricted volume type "hostPath")'
    )
    dep = {
        "hash": "h1",
        "conditions": [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": msg},
        ],
    }
    res = compute_status(spec(), [], {}, now=NOW, deployment=dep)
    ready = cond(res.status, "Ready")
    assert (res.status["phase"], ready["reason"]) == ("Failed", "FailedCreate")
    assert msg in ready["message"]
    assert ("Warning", "FailedCreate") in [(e.type, e.reason) for e in res.events]


def test_invalid_spec_status():
    res = st.invalid_spec_status(
        name="llm", namespace="ns", generation=2, message="invalid spec: x", previous=None, now=NOW
    )
    assert res.status["phase"] == "Failed"
    assert cond(res.status, "Ready")["reason"] == "InvalidSpec"
    assert ("Warning", "InvalidSpec") in [(e.type, e.reason) for e in res.events]


@pytest.mark.parametrize(
    "new,old,patch",
    [
        ({"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": None}),
        ({"a": 1, "c": None}, None, {"a": 1, "c": None}),
        ({"a": 1}, {}, {"a": 1}),
        # nested objects merge: a key gone from one is nulled (status.routing.picker after the picker is off)
        ({"r": {"pool": "p"}}, {"r": {"pool": "p", "picker": "p-epp"}}, {"r": {"pool": "p", "picker": None}}),
        ({"r": {"x": {"y": 1}}}, {"r": {"x": {"y": 1, "z": 2}}}, {"r": {"x": {"y": 1, "z": None}}}),
        ({"c": [1]}, {"c": [1, 2]}, {"c": [1]}),  # lists are replaced whole
        ({"r": 1}, {"r": {"a": 1}}, {"r": 1}),
    ],
)
def test_status_patch(new, old, patch):
    assert st.status_patch(new, old) == patch


def test_same_ignores_nulls():
    assert st.same({"a": None, "b": {"c": None, "d": 1}}, {"b": {"d": 1}})
    assert not st.same({"a": 1}, {"a": 2})


def test_an_unreadable_namespace_turns_ready_unknown_and_keeps_the_rest_of_the_status():
    """Issue 38: the children of a refused namespace cannot be read: Ready Unknown NamespaceUnreadable with the
    apiserver's message, a Warning once; what was last known (replicas, pipeline, the other conditions) stays,
    never a 0/N computed from a cache that cannot be refreshed."""
    ready = compute([pod("p0")], {"p0": CB_READY}).status
    assert cond(ready, "Ready")["status"] == "True" and ready["readyReplicas"] == 1
    why = "Pod in ns: HTTP 403: pods is forbidden"
    first = st.unreadable_status(generation=3, message=why, previous=ready, now=LATER)
    s = first.status
    assert (cond(s, "Ready")["status"], cond(s, "Ready")["reason"]) == ("Unknown", "NamespaceUnreadable")
    assert why in cond(s, "Ready")["message"] and cond(s, "Ready")["lastTransitionTime"] == st.timestamp(LATER)
    assert s["phase"] == "Degraded" and s["computedAt"] == st.timestamp(LATER)
    assert cond(s, "PipelineResolved") == cond(ready, "PipelineResolved") and s["readyReplicas"] == 1
    assert s["pipeline"] == ready["pipeline"] and s["observedGeneration"] == ready["observedGeneration"]
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "NamespaceUnreadable")]
    api.LLMServingStatus.model_validate(s)
    again = st.unreadable_status(generation=3, message=why, previous=s, now=LATER + dt.timedelta(minutes=1))
    assert again.events == [] and cond(again.status, "Ready")["lastTransitionTime"] == st.timestamp(LATER)
    # no status yet (the LLMServing was created while its namespace was refused): Ready alone
    fresh = st.unreadable_status(generation=1, message=why, previous=None, now=NOW).status
    assert [c["type"] for c in fresh["conditions"]] == ["Ready"] and fresh["phase"] == "Degraded"
