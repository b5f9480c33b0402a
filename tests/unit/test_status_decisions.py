"""status.decisions, status.decisionsDiffer and their Events (pure status computation)."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import spec as api
from ovserve_operator.readback import Reading
from ovserve_runtime.report import Decision, Decisions, Source

from .podfixtures import CB_READY, LOADING, pod
from .podfixtures import compute as compute_status

NOW = dt.datetime(2026, 12, 4, 7, 0, 0, tzinfo=dt.UTC)
SPEC = api.parse_spec({"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 2})


def record(precision: str = "bf16", kv: str = "bf16", kv_asked: str | None = None, genai: str = "2026.4.1.0"):
    src = Source.REQUESTED if kv_asked else Source.AUTOMATIC
    return Decisions(
        inferencePrecision=Decision(value=precision, detail="plugin default on this device"),
        kvCachePrecision=Decision(value=kv, source=src, requested=kv_asked, detail="measured"),
        openvinoGenai=Decision(value=genai, detail="the image's"),
    )


def ready(d: Decisions | None):
    return CB_READY.model_copy(update={"decisions": d})


def compute(reports: dict, previous=None):
    pods = [pod(name, ip=f"10.0.0.{i}") for i, name in enumerate(sorted(reports))]
    return compute_status(SPEC, pods, {n: Reading(r, "http") for n, r in reports.items()}, now=NOW, previous=previous)


def events(result, reason):
    return [e for e in result.events if e.reason == reason]


def test_decisions_of_the_pods_are_the_status():
    r = compute({"a": ready(record()), "b": ready(record())})
    assert r.status["decisions"]["kvCachePrecision"] == {
        "value": "bf16",
        "source": "automatic",
        "requested": None,
        "detail": "measured",
    }
    assert r.status["decisionsDiffer"] is None
    assert not events(r, "DecisionsDiffer") and not events(r, "DecisionChanged")


# (id, second pod's record, differ substring or None)
DIFFER = [
    ("same", record(), None),
    ("another-cpu", record(precision="f32"), "a -> b: inferencePrecision: bf16 -> f32"),
    ("another-image", record(genai="2026.5.0.0"), "openvinoGenai: 2026.4.1.0 -> 2026.5.0.0"),
    ("not-yet-reported", None, None),
]


@pytest.mark.parametrize("second,differ", [d[1:] for d in DIFFER], ids=[d[0] for d in DIFFER])
def test_pods_of_one_spec_that_resolve_differently(second, differ):
    r = compute({"a": ready(record()), "b": ready(second) if second else LOADING})
    got = r.status["decisionsDiffer"]
    if differ is None:
        assert got is None and not events(r, "DecisionsDiffer")
    else:
        assert differ in got
        (e,) = events(r, "DecisionsDiffer")
        assert e.type == "Warning" and differ in e.message
        again = compute({"a": ready(record()), "b": ready(second)}, previous=r.status)
        assert not events(again, "DecisionsDiffer")  # posted once per change


def test_an_automatic_decision_that_changes_is_an_event():
    before = compute({"a": ready(record())}).status
    # the pods were replaced by an image whose openvino-genai picks another KV-cache precision by default
    after = compute({"a2": ready(record(kv="u8", genai="2026.5.0.0"))}, previous=before)
    (e,) = events(after, "DecisionChanged")
    assert e.type == "Warning"
    assert e.message == "kvCachePrecision: bf16 -> u8; openvinoGenai: 2026.4.1.0 -> 2026.5.0.0"


def test_a_changed_ask_is_not_a_surprise():
    before = compute({"a": ready(record())}).status
    after = compute({"a": ready(record(kv="u8", kv_asked="u8"))}, previous=before)
    assert not events(after, "DecisionChanged")


def test_the_last_record_is_kept_while_no_pod_reports_one():
    before = compute({"a": ready(record())}).status
    between = compute({"b": LOADING}, previous=before)
    assert between.status["decisions"] == before["decisions"]
    after = compute({"b": ready(record(precision="f32"))}, previous=between.status)
    (e,) = events(after, "DecisionChanged")
    assert e.message == "inferencePrecision: bf16 -> f32"


def test_capabilities_of_the_pods_are_the_status():
    from ovserve_runtime.report import Capabilities

    caps = Capabilities(structuredOutput=True, maxContext=512, maxPromptTokens=256, thinkingSwitch="enable_thinking")
    r = compute({"a": CB_READY.model_copy(update={"capabilities": caps}), "b": LOADING})
    assert r.status["capabilities"] == {
        "structuredOutput": True,
        "images": False,
        "logprobs": False,
        "toolParser": None,
        "reasoningParser": None,
        "maxContext": 512,
        "maxPromptTokens": 256,
        "task": None,
        "thinkingSwitch": "enable_thinking",
    }
    assert compute({"a": CB_READY}).status.get("capabilities") is None
