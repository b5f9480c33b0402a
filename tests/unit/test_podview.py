"""Pod inspection (podview): init container states, creating pods, missing claims, mount Events."""

from __future__ import annotations

import pytest
from ovserve_operator import podview
from ovserve_operator.podview import InitPhase

from .podfixtures import creating, pod

FAILED_RUN = {"terminated": {"exitCode": 1, "reason": "Error", "message": "model download failed: HTTP 503\n"}}


@pytest.mark.parametrize(
    "init,phase,reason,message",
    [
        ({"state": {"running": {}}}, InitPhase.RUNNING, "", ""),
        ({"state": {"terminated": {"exitCode": 0}}}, InitPhase.COMPLETED, "", ""),
        # failed once, then succeeded: done, whatever lastState says
        ({"state": {"terminated": {"exitCode": 0}}, "lastState": FAILED_RUN}, InitPhase.COMPLETED, "", ""),
        ({"state": FAILED_RUN}, InitPhase.FAILED, "Error", "model download failed: HTTP 503"),
        (
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": FAILED_RUN},
            InitPhase.FAILED,
            "CrashLoopBackOff",
            "model download failed: HTTP 503",
        ),
        # retrying after a failure: running again, not failed
        ({"state": {"running": {}}, "lastState": FAILED_RUN}, InitPhase.RUNNING, "", ""),
        (
            {"state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'}}},
            InitPhase.WAITING,
            "CreateContainerConfigError",
            'secret "hf" not found',
        ),
        ({"state": {"waiting": {"reason": "PodInitializing"}}}, InitPhase.WAITING, "PodInitializing", ""),
    ],
)
def test_init_state(init, phase, reason, message):
    got = podview.init_state(pod("a", init=init))
    assert (got.phase, got.reason, got.message) == (phase, reason, message)


def test_init_state_without_status():
    p = pod("a")
    assert podview.init_state(p).phase == InitPhase.NONE
    p["spec"] = {"initContainers": [{"name": "model-download"}]}
    assert podview.init_state(p).phase == InitPhase.WAITING


@pytest.mark.parametrize(
    "p,want",
    [
        (creating("a"), True),
        (pod("a"), False),
        (pod("a", unschedulable="no"), False),
        (creating("a", init={"state": {"running": {}}}), False),
        (creating("a", init={"state": {"waiting": {"reason": "PodInitializing"}}}), True),
    ],
)
def test_is_creating(p, want):
    assert podview.is_creating(p) is want


@pytest.mark.parametrize(
    "message,claim",
    [
        ('0/1 nodes are available: persistentvolumeclaim "models-x" not found. preemption: ...', "models-x"),
        ("0/1 nodes are available: 1 Insufficient gpu.intel.com/i915.", None),
        (None, None),
    ],
)
def test_missing_claim(message, claim):
    assert podview.missing_claim(message) == claim


def test_mount_failure_takes_the_newest_warning():
    events = [
        {"type": "Normal", "reason": "Scheduled", "message": "ok", "lastTimestamp": "2026-12-03T07:00:00Z"},
        {
            "type": "Warning",
            "reason": "FailedMount",
            "message": "old",
            "lastTimestamp": "2026-12-03T07:00:01Z",
            "count": 3,
        },
        {
            "type": "Warning",
            "reason": "FailedMount",
            "message": "new",
            "lastTimestamp": "2026-12-03T07:00:09Z",
            "count": 2,
        },
        {"type": "Warning", "reason": "BackOff", "message": "x", "lastTimestamp": "2026-12-03T07:00:10Z"},
    ]
    assert podview.mount_failure(events) == "new"
    assert podview.mount_failure(events[:1]) is None


def test_mount_failure_ignores_the_node_authorizers_lag():
    """Regression (a CI run): the kubelet's first mount of a just-bound pod's claim was refused because the
    Node authorizer's graph had not seen the pod yet; the retry mounted it, but the LLMServing had already
    read Failed/VolumeMountFailed instead of the runtime's real outcome."""
    lag = (
        "Unable to attach or mount volumes: unmounted volumes=[model], unattached volumes=[], failed to process "
        "volumes=[model]: error processing PVC ns/models: failed to fetch PVC from API server: persistentvolumeclaims "
        '"models" is forbidden: User "system:node:node1" cannot get resource "persistentvolumeclaims" in API group '
        '"" in the namespace "ns": no relationship found between node \'node1\' and this object'
    )
    lagging = {
        "type": "Warning",
        "reason": "FailedMount",
        "message": lag,
        "lastTimestamp": "2026-12-03T07:00:05Z",
        "count": 4,
    }
    real = {
        "type": "Warning",
        "reason": "FailedMount",
        "message": "nfs: access denied",
        "lastTimestamp": "2026-12-03T07:00:01Z",
        "count": 2,
    }
    assert podview.mount_failure([lagging]) is None
    assert podview.mount_failure([real, lagging]) == "nfs: access denied"


@pytest.mark.parametrize(
    "event,failed",
    [
        ({"count": 1}, False),  # the first refusal: the kubelet retries within a second
        ({}, False),  # no count: once
        ({"count": 2}, True),
        ({"count": 1, "series": {"count": 3}}, True),  # events.k8s.io aggregation
        ({"count": None, "series": {"count": 1}}, False),
        ({"count": 5, "reason": "FailedAttachVolume"}, True),
        ({"count": 5, "type": "Normal"}, False),
        ({"count": 5, "reason": "FailedScheduling"}, False),
    ],
)
def test_mount_failure_counts_once_the_kubelets_retry_failed_alike(event, failed):
    """A one-off FailedMount that the kubelet's retry gets past never turns the LLMServing Failed."""
    e = {"type": "Warning", "reason": "FailedMount", "message": "boom", "lastTimestamp": "2026-12-03T07:00:01Z"}
    e.update(event)
    assert podview.mount_failure([e]) == ("boom" if failed else None)
