"""spec.autoscaling -> KEDA ScaledObject, and KEDA's state -> status.autoscaling / the Autoscaling condition."""

from __future__ import annotations

import pytest
from ovserve_operator import autoscaling, autoscaling_io, render
from ovserve_operator import spec as api
from ovserve_operator.settings import Settings
from pydantic import ValidationError

PROM = "http://10.245.0.1:9090"


def _spec(**autoscaling_fields) -> api.LLMServingSpec:
    body = {"model": {"hostPath": {"path": "/m"}}}
    if autoscaling_fields:
        body["autoscaling"] = autoscaling_fields
    return api.parse_spec(body)


# ------------------------------------------------------------------------------------------ spec


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"maxReplicas": 3, "target": 2}, None),
        ({"minReplicas": 3, "maxReplicas": 3, "target": 0.5}, None),
        ({"minReplicas": 4, "maxReplicas": 3, "target": 2}, "minReplicas must be <= autoscaling.maxReplicas"),
        ({"minReplicas": 0, "maxReplicas": 3, "target": 2}, "minReplicas 0 needs spec.routing"),
        ({"minReplicas": -1, "maxReplicas": 3, "target": 2}, "greater than or equal to 0"),
        ({"maxReplicas": 3, "target": 0}, "greater than 0"),
        ({"maxReplicas": 3, "target": 2, "metric": "GPUUtilization"}, "Input should be"),
        ({"maxReplicas": 3, "target": 101, "metric": "KVCacheUsage"}, "at most 100"),
        ({"maxReplicas": 3, "target": 101, "metric": "QueueDepth"}, None),
        ({"target": 2}, "maxReplicas"),
    ],
)
def test_spec_validation(fields, error):
    if error is None:
        a = _spec(**fields).autoscaling
        assert a is not None and a.minReplicas >= 1
    else:
        with pytest.raises(ValidationError, match=error):
            _spec(**fields)


def test_crd_carries_the_cel_rules_and_defaults():
    from ovserve_operator import crd

    schema = crd.model_schema(api.LLMServingSpec)["properties"]["autoscaling"]
    rules = [v["rule"] for v in schema["x-kubernetes-validations"]]
    assert "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas" in rules
    props = schema["properties"]
    assert props["minReplicas"]["minimum"] == 0 and props["minReplicas"]["default"] == 1
    assert props["metric"]["enum"] == ["QueueDepth", "RunningRequests", "KVCacheUsage"]
    # OpenAPI v3.0 spelling of gt=0 (a numeric exclusiveMinimum is refused by the apiserver)
    assert props["target"]["exclusiveMinimum"] is True and props["target"]["minimum"] == 0
    assert schema["required"] == ["maxReplicas", "target"]


# ---------------------------------------------------------------------------------------- render


def test_no_scaled_object_without_autoscaling():
    assert autoscaling.render_scaled_object("m", "ns", "u1", _spec(), PROM) is None


@pytest.mark.parametrize(
    "metric, series",
    [
        ("QueueDepth", "ovserve_queue_depth"),
        ("RunningRequests", "ovserve_requests_running"),
        ("KVCacheUsage", "ovserve_kv_cache_usage_percent"),
    ],
)
def test_scaled_object_per_metric(metric, series):
    spec = _spec(
        minReplicas=1,
        maxReplicas=4,
        metric=metric,
        target=2.5,
        pollingIntervalSeconds=5,
        scaleDownStabilizationSeconds=20,
    )
    so = autoscaling.render_scaled_object("chat", "team-a", "uid-1", spec, PROM)
    assert so is not None
    assert (so["apiVersion"], so["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert so["metadata"]["name"] == "chat" and so["metadata"]["namespace"] == "team-a"
    assert so["metadata"]["ownerReferences"] == [render.owner_reference("chat", "uid-1")]
    s = so["spec"]
    # the LLMServing itself (scale subresource): the HPA owns spec.replicas, the operator renders from it
    assert s["scaleTargetRef"] == {"apiVersion": "ovserve.dev/v1alpha1", "kind": "LLMServing", "name": "chat"}
    assert (s["minReplicaCount"], s["maxReplicaCount"], s["pollingInterval"]) == (1, 4, 5)
    hpa = s["advanced"]["horizontalPodAutoscalerConfig"]
    assert hpa["name"] == "keda-hpa-chat"
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 20
    [trigger] = s["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    md = trigger["metadata"]
    assert md["serverAddress"] == PROM
    assert md["query"] == f'sum({series}{{namespace="team-a",ovserve_dev_llmserving="chat"}})'
    assert md["threshold"] == "2.5"
    assert md["ignoreNullValues"] == "true"


@pytest.mark.parametrize(
    "task, metric, series",
    [
        ("embeddings", "QueueDepth", "ovserve_queue_depth"),
        ("embeddings", "RunningRequests", "ovserve_requests_running"),
        ("rerank", "QueueDepth", "ovserve_queue_depth"),
        ("AUTO", "QueueDepth", "ovserve_queue_depth"),
    ],
)
def test_scaled_object_of_an_embeddings_or_rerank_serving_queries_the_series_its_runtime_exports(task, metric, series):
    """The task engine exports the same gauges per pod (one task per serving; ovserve_task_info names it), so the
    trigger is the generation one; tests/autoscaling scales an embeddings serving on it."""
    spec = api.parse_spec(
        {
            "model": {"hostPath": {"path": "/m"}},
            "task": task,
            "autoscaling": {"maxReplicas": 3, "metric": metric, "target": 2},
        }
    )
    so = autoscaling.render_scaled_object("emb", "ns", "u", spec, PROM)
    assert (
        so["spec"]["triggers"][0]["metadata"]["query"]
        == f'sum({series}{{namespace="ns",ovserve_dev_llmserving="emb"}})'
    )


def test_threshold_of_a_whole_target_has_no_decimal_point():
    so = autoscaling.render_scaled_object("m", "ns", "u", _spec(maxReplicas=2, target=3), PROM)
    assert so["spec"]["triggers"][0]["metadata"]["threshold"] == "3"


def test_runtime_metric_names_exist():
    """The series the trigger queries are the runtime's own metric names."""
    from ovserve_runtime.metrics import Metrics

    body, _ = Metrics().render()
    text = body.decode()
    for name in autoscaling.SERIES.values():
        assert f"# TYPE {name} gauge" in text, name


def test_prometheus_url_setting():
    assert Settings.from_env({"OVSERVE_PROMETHEUS_URL": "http://prom.mon.svc:9090/"}).prometheus_url == (
        "http://prom.mon.svc:9090"
    )
    with pytest.raises(ValueError, match="OVSERVE_PROMETHEUS_URL"):
        Settings.from_env({"OVSERVE_PROMETHEUS_URL": "prom:9090"})


# ---------------------------------------------------------------------------------------- status


def _obj(name: str, conditions: list[dict], **status) -> dict:
    return {"metadata": {"name": name}, "status": {"conditions": conditions, **status}}


SO_READY = _obj("chat", [{"type": "Ready", "status": "True", "reason": "ScaledObjectReady"}])
SO_BROKEN = _obj(
    "chat",
    [{"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed", "message": "bad trigger"}],
)
HPA_OK = _obj(
    "keda-hpa-chat",
    [
        {
            "type": "AbleToScale",
            "status": "True",
            "reason": "SucceededRescale",
            "message": "the HPA controller was able to update the target scale to 2",
        },
        {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "message": "ok"},
        {
            "type": "ScalingLimited",
            "status": "True",
            "reason": "TooManyReplicas",
            "message": "the desired replica count is more than the maximum replica count",
        },
    ],
    currentReplicas=1,
    desiredReplicas=2,
    lastScaleTime="2026-12-03T12:00:00Z",
)
HPA_NO_METRIC = _obj(
    "keda-hpa-chat",
    [
        {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale", "message": "ok"},
        {
            "type": "ScalingActive",
            "status": "False",
            "reason": "FailedGetExternalMetric",
            "message": "unable to get external metric",
        },
    ],
    currentReplicas=1,
    desiredReplicas=0,
)


@pytest.mark.parametrize(
    "kw, cond_status, reason, message_part, desired, current",
    [
        (
            {"keda_installed": False, "scaled_object": None, "hpa": None},
            "False",
            "KEDANotInstalled",
            "keda.sh/v1alpha1 ScaledObject API is not served",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": None, "hpa": None, "apply_error": "denied by webhook"},
            "False",
            "ScaledObjectRefused",
            "denied by webhook",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": None, "hpa": None},
            "Unknown",
            "ScaledObjectPending",
            "not created",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": _obj("chat", []), "hpa": None},
            "Unknown",
            "ScaledObjectPending",
            "not reported",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": SO_BROKEN, "hpa": HPA_OK},
            "False",
            "ScaledObjectNotReady",
            "ScaledObjectCheckFailed: bad trigger",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": SO_READY, "hpa": None},
            "Unknown",
            "WaitingForHPA",
            "keda-hpa-chat",
            None,
            None,
        ),
        (
            {"keda_installed": True, "scaled_object": SO_READY, "hpa": HPA_OK},
            "True",
            "SucceededRescale",
            "update the target scale to 2; the desired replica count is more than the maximum",
            2,
            1,
        ),
        (
            {"keda_installed": True, "scaled_object": SO_READY, "hpa": HPA_NO_METRIC},
            "False",
            "FailedGetExternalMetric",
            "unable to get external metric",
            0,
            1,
        ),
        (
            {"keda_installed": True, "scaled_object": SO_READY, "hpa": _obj("keda-hpa-chat", [])},
            "Unknown",
            "WaitingForHPA",
            "not computed",
            None,
            None,
        ),
    ],
)
def test_autoscaling_status(kw, cond_status, reason, message_part, desired, current):
    spec = _spec(minReplicas=1, maxReplicas=2, target=1)
    state = autoscaling.autoscaling_status(spec, **kw)
    assert state.condition is not None
    assert state.condition[:2] == (cond_status, reason)
    assert message_part in state.condition[2]
    st = state.status
    assert st["reason"] == reason and message_part in st["message"]
    assert (st.get("desiredReplicas"), st.get("currentReplicas")) == (desired, current)
    assert (st["minReplicas"], st["maxReplicas"]) == (1, 2)
    assert st["display"] == f"1-2 {reason}"
    api.AutoscalingStatus.model_validate(st)  # fits the CRD's status schema


def test_no_autoscaling_no_status():
    state = autoscaling.autoscaling_status(_spec(), keda_installed=True, scaled_object=None, hpa=None)
    assert state == autoscaling.AutoscalingState(None, None)


def test_a_reason_that_breaks_the_condition_pattern_is_replaced():
    hpa = _obj("keda-hpa-chat", [{"type": "AbleToScale", "status": "True", "reason": "not a reason!"}])
    state = autoscaling.autoscaling_status(
        _spec(maxReplicas=2, target=1), keda_installed=True, scaled_object=SO_READY, hpa=hpa
    )
    assert state.condition[1] == "AbleToScale"


# ------------------------------------------------------------------------------------- condition


def test_merge_condition_keeps_transition_time_while_status_holds():
    base = [{"type": "Ready", "status": "True"}]
    prev = [{"type": "Autoscaling", "status": "True", "reason": "A", "lastTransitionTime": "T0"}]
    same = autoscaling.merge_condition(base, ("True", "B", "m"), previous=prev, generation=3, now="T1")
    assert same[0] == base[0]
    assert same[1] == {
        "type": "Autoscaling",
        "status": "True",
        "observedGeneration": 3,
        "reason": "B",
        "message": "m",
        "lastTransitionTime": "T0",
    }
    flipped = autoscaling.merge_condition(base, ("False", "C", "m"), previous=prev, generation=3, now="T1")
    assert flipped[1]["lastTransitionTime"] == "T1"
    removed = autoscaling.merge_condition([*base, prev[0]], None, previous=prev, generation=3, now="T1")
    assert removed == base


def test_apply_to_status_sets_clears_and_keeps():
    spec = _spec(maxReplicas=2, target=1)
    state = autoscaling.autoscaling_status(spec, keda_installed=False, scaled_object=None, hpa=None)
    status = {"conditions": [{"type": "Ready", "status": "True"}]}
    autoscaling_io.apply_to_status(status, state, previous={}, generation=1, now="T1")
    assert status["autoscaling"]["reason"] == "KEDANotInstalled"
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Autoscaling"]

    # unreadable this cycle: what the previous status said stays
    fresh = {"conditions": [{"type": "Ready", "status": "True"}]}
    autoscaling_io.apply_to_status(fresh, None, previous=status, generation=1, now="T2")
    assert fresh["autoscaling"] == status["autoscaling"]
    assert fresh["conditions"] == status["conditions"]

    # autoscaling removed from the spec: block and condition go
    off = {"conditions": [{"type": "Ready", "status": "True"}]}
    autoscaling_io.apply_to_status(
        off, autoscaling.AutoscalingState(None, None), previous=status, generation=2, now="T3"
    )
    assert "autoscaling" not in off and [c["type"] for c in off["conditions"]] == ["Ready"]


_CB = {"resolved": "LM_CB", "continuousBatching": True, "fallbackReason": ""}
_FALLBACK = {"resolved": "LM", "continuousBatching": False, "fallbackReason": "PagedAttentionNotSupported"}


@pytest.mark.parametrize(
    "metric,task,pipeline,unavailable",
    [
        ("KVCacheUsage", "text-generation", _CB, None),
        ("KVCacheUsage", None, {}, None),  # nothing resolved yet: no judgement
        ("KVCacheUsage", "embeddings", {}, "resolved to task embeddings"),  # an AUTO task found an encoder
        ("KVCacheUsage", "rerank", {}, "resolved to task rerank"),
        ("KVCacheUsage", "text-generation", _FALLBACK, "legacy LM pipeline (PagedAttentionNotSupported)"),
        ("QueueDepth", "embeddings", {}, None),
        ("QueueDepth", "text-generation", _FALLBACK, None),
        ("RunningRequests", "text-generation", _FALLBACK, None),
    ],
)
def test_a_metric_the_resolved_pods_never_move_is_named(metric, task, pipeline, unavailable):
    """MetricNotExported is the first rule of the Autoscaling chain: it answers whatever KEDA says."""
    spec = _spec(metric=metric, maxReplicas=3, target=50)
    status = {"task": {"resolved": task}, "pipeline": pipeline}
    state = autoscaling.autoscaling_status(spec, keda_installed=True, scaled_object=None, hpa=None)
    checked = autoscaling.autoscaling_status(spec, keda_installed=True, scaled_object=None, hpa=None, resolved=status)
    if unavailable is None:
        assert autoscaling.metric_unavailable(spec, status) is None and checked == state
        return
    assert unavailable in autoscaling.metric_unavailable(spec, status)
    assert checked.condition[:2] == ("False", "MetricNotExported") and unavailable in checked.condition[2]
    assert checked.status["reason"] == "MetricNotExported" and checked.status["display"] == "1-3 MetricNotExported"
    assert checked.status["maxReplicas"] == 3  # the rest of the block stays
    # before KEDA's own rules: even without KEDA the metric is what to fix
    no_keda = autoscaling.autoscaling_status(spec, keda_installed=False, scaled_object=None, hpa=None, resolved=status)
    assert no_keda.condition == checked.condition


def test_metric_check_leaves_an_absent_state_alone():
    legacy = {"task": {"resolved": "text-generation"}, "pipeline": _FALLBACK}
    off = autoscaling.autoscaling_status(_spec(), keda_installed=True, scaled_object=None, hpa=None, resolved=legacy)
    assert off == autoscaling.AutoscalingState(None, None)
