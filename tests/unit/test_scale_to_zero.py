"""Scale to zero (issue 42, docs/autoscaling.md), the pure parts: the spec rule (minReplicas 0 needs routing), status
(ScaledToZero by intent or idle, Activating only after being at zero, failures still named, Normal Events), the
Autoscaling condition at zero (IdleAtZero, not ScalingDisabled), the ScaledObject (the demand term, the cooldowns)
and the picker's flow control."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import autoscaling, render, routing, scaledobject
from ovserve_operator import spec as api
from pydantic import ValidationError

from .podfixtures import CB_READY, LOADING, pod, readings
from .podfixtures import compute as compute_status

NOW = dt.datetime(2026, 12, 7, 15, 0, 0, tzinfo=dt.UTC)
PROM = "http://prometheus:9090"


def spec(
    min_replicas: int = 0, replicas: int = 1, routing_on: bool | None = True, idle: int = 60
) -> api.LLMServingSpec:
    body: dict = {
        "model": {"hostPath": {"path": "/m"}},
        "replicas": replicas,
        "autoscaling": {"minReplicas": min_replicas, "maxReplicas": 3, "target": 2, "idleSeconds": idle},
    }
    if routing_on is not None:
        body["routing"] = {"enabled": routing_on}
    return api.parse_spec(body)


# ------------------------------------------------------------------------------------------ spec


@pytest.mark.parametrize(
    "min_replicas, routing_on, refused",
    [
        (0, True, False),
        (0, None, True),  # no routing: nothing would hold a request while no pod runs
        (0, False, True),  # routing off
        (1, None, False),
    ],
)
def test_minreplicas_zero_needs_routing(min_replicas, routing_on, refused):
    if refused:
        with pytest.raises(ValidationError, match=r"minReplicas 0 needs spec\.routing"):
            spec(min_replicas, routing_on=routing_on)
    else:
        assert spec(min_replicas, routing_on=routing_on).scales_to_zero == (min_replicas == 0)


def test_crd_rule_names_the_reason():
    from ovserve_operator import crd

    rules = crd.model_schema(api.LLMServingSpec)["x-kubernetes-validations"]
    mine = [r for r in rules if "minReplicas > 0" in r["rule"]]
    assert len(mine) == 1 and mine[0]["message"] == api.SCALE_TO_ZERO_NEEDS_ROUTING
    assert "self.routing.enabled" in mine[0]["rule"]


# ------------------------------------------------------------------------------------------ status


def compute(s: api.LLMServingSpec, pods, reports, previous_phase: str | None = None):
    previous = {"phase": previous_phase} if previous_phase else None
    return compute_status(s, pods, readings(reports), now=NOW, previous=previous).status


def ready(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


# (id, spec, pods, reports, previous phase, phase, Ready reason, a word of its message)
CASES = [
    ("idle-at-zero", spec(replicas=0), [], {}, "Ready", "ScaledToZero", "ScaledToZero", "idle"),
    (
        "replicas-zero-by-hand",
        api.parse_spec({"model": {"hostPath": {"path": "/m"}}, "replicas": 0}),
        [],
        {},
        None,
        "ScaledToZero",
        "ScaledToZero",
        "spec.replicas is 0",
    ),
    ("activating-no-pod-yet", spec(), [], {}, "ScaledToZero", "Activating", "Activating", "KEDA scaled to 1"),
    ("activating-loading", spec(), [pod("a")], {"a": LOADING}, "ScaledToZero", "Activating", "Activating", "0/1"),
    ("still-activating", spec(), [pod("a")], {"a": LOADING}, "Activating", "Activating", "Activating", "gateway"),
    ("activated", spec(), [pod("a")], {"a": CB_READY}, "Activating", "Ready", "AllReplicasReady", ""),
    # the first start of a new serving is no activation: it loads
    ("first-start-loads", spec(), [pod("a")], {"a": LOADING}, None, "Loading", "Loading", ""),
    ("first-start-after-ready", spec(), [pod("a")], {"a": LOADING}, "Ready", "Loading", "Loading", ""),
    # a serving that never scales to zero does not activate, whatever the last phase said
    (
        "min-one-loads",
        spec(min_replicas=1, routing_on=None),
        [pod("a")],
        {"a": LOADING},
        "ScaledToZero",
        "Loading",
        "Loading",
        "",
    ),
    # a failure of the starting pod is named, not hidden behind Activating
    (
        "activation-pull-fails",
        spec(),
        [pod("a", waiting=("ErrImagePull", "pull failed"))],
        {"a": None},
        "ScaledToZero",
        "Pending",
        "ErrImagePull",
        "pull failed",
    ),
    (
        "activation-crashes",
        spec(),
        [pod("a", waiting=("CrashLoopBackOff", "back-off"))],
        {"a": None},
        "ScaledToZero",
        "Failed",
        "CrashLoopBackOff",
        "back-off",
    ),
    (
        "activation-unschedulable",
        spec(),
        [pod("a", unschedulable="0/1 nodes are available")],
        {"a": None},
        "ScaledToZero",
        "Pending",
        "Unschedulable",
        "0/1 nodes",
    ),
    # a pod being created is a normal start
    (
        "activation-creating",
        spec(),
        [pod("a", waiting=("ContainerCreating", ""))],
        {"a": None},
        "ScaledToZero",
        "Activating",
        "Activating",
        "0/1",
    ),
]


@pytest.mark.parametrize(
    "s, pods, reports, previous, phase, reason, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_phases(s, pods, reports, previous, phase, reason, word):
    got = compute(s, pods, reports, previous)
    assert (got["phase"], ready(got)["reason"]) == (phase, reason)
    assert word in ready(got)["message"]
    if phase == "ScaledToZero":
        assert got["readyDisplay"] == "0/0" and ready(got)["status"] == "False"


def test_events_on_the_transitions_are_normal():
    from ovserve_operator import status as st

    at_zero = compute(spec(replicas=0), [], {}, "Ready")
    activating = compute(spec(), [], {}, "ScaledToZero")
    assert [(e.type, e.reason) for e in st.events_for({"phase": "Ready"}, at_zero)] == [("Normal", "ScaledToZero")]
    assert [(e.type, e.reason) for e in st.events_for(at_zero, activating)] == [("Normal", "Activating")]
    assert st.events_for(activating, activating) == []  # transitions only


# ------------------------------------------------------------------------------------------ autoscaling


def hpa_disabled() -> dict:
    cond = {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled", "message": "replicas 0"}
    return {"status": {"conditions": [cond, {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"}]}}


SO_READY = {"metadata": {"name": "llm"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize(
    "s, want",
    [
        (spec(replicas=0), ("True", autoscaling.IDLE_AT_ZERO)),  # at zero by plan: not a fault
        (
            api.parse_spec(
                {"model": {"hostPath": {"path": "/m"}}, "replicas": 0, "autoscaling": {"maxReplicas": 2, "target": 1}}
            ),
            ("False", "ScalingDisabled"),
        ),  # minReplicas 1 yet at zero: the HPA's word stands
    ],
)
def test_autoscaling_condition_at_zero(s, want):
    state = autoscaling.autoscaling_status(s, keda_installed=True, scaled_object=SO_READY, hpa=hpa_disabled())
    assert state.condition[:2] == want


def test_scaled_object_of_a_serving_that_scales_to_zero():
    so = render.render_scaled_object("llm", "ns", "uid", spec(idle=90), PROM)
    assert so["spec"]["minReplicaCount"] == 0
    assert so["spec"]["cooldownPeriod"] == 90 and so["spec"]["initialCooldownPeriod"] == 90
    q = so["spec"]["triggers"][0]["metadata"]["query"]
    assert f'{routing.HELD_METRIC}{{namespace="ns",{routing.HELD_POOL_LABEL}="llm"}}' in q
    assert 'ovserve_requests_running{namespace="ns",ovserve_dev_llmserving="llm"}' in q
    assert f"{scaledobject.DEMAND_EPSILON:g} * clamp_max(" in q and q.count("or vector(0)") == 4


def test_scaled_object_without_scale_to_zero_is_unchanged():
    s = spec(min_replicas=1, routing_on=True)
    so = render.render_scaled_object("llm", "ns", "uid", s, PROM)
    assert "cooldownPeriod" not in so["spec"] and "initialCooldownPeriod" not in so["spec"]
    assert so["spec"]["triggers"][0]["metadata"]["query"] == scaledobject.query(s.autoscaling.metric, "ns", "llm")


# ------------------------------------------------------------------------------------------ the picker


def test_the_picker_holds_requests_only_for_a_serving_that_scales_to_zero():
    assert routing.params(spec()).hold_seconds == routing.HOLD_SECONDS
    assert routing.params(spec(min_replicas=1)).hold_seconds is None
    held = routing.picker_config(routing.HOLD_SECONDS)
    assert held["featureGates"] == [routing.FLOW_CONTROL_GATE]
    assert held["flowControl"] == {"defaultRequestTTL": f"{routing.HOLD_SECONDS}s"}
    plain = routing.picker_config()
    assert "featureGates" not in plain and "flowControl" not in plain
    assert {k: v for k, v in held.items() if k not in ("featureGates", "flowControl")} == plain
