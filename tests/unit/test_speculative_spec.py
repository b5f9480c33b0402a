"""spec.speculative: validation (the CRD's CEL rules, mirrored by the typed model), rendering (runtime flags, the
draft's volume and download), policy, and status.speculative with its condition, column and Event."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import policy, render
from ovserve_operator import spec as api
from ovserve_operator import status as st
from ovserve_operator.readback import Reading
from ovserve_operator.settings import Settings
from ovserve_runtime.report import SpeculativeMode, SpeculativeReason, SpeculativeReport
from pydantic import ValidationError

from .podfixtures import CB_READY, LOADING, pod
from .podfixtures import compute as compute_status

HOST = {"hostPath": {"path": "/models/tiny-llm"}}
DRAFT = {"hostPath": {"path": "/models/tiny-llm-draft"}}
NOW = dt.datetime(2026, 12, 4, 7, 0, 0, tzinfo=dt.UTC)


def spec(speculative: dict, **extra) -> api.LLMServingSpec:
    return api.parse_spec({"model": HOST, "speculative": speculative, **extra})


# (id, speculative, extra spec fields, error substring or None)
VALIDATION = [
    ("draft", {"draftModel": DRAFT, "numAssistantTokens": 4}, {}, None),
    ("draft-confidence", {"draftModel": DRAFT, "assistantConfidenceThreshold": 0.4}, {}, None),
    ("prompt-lookup", {"promptLookup": {"maxNgramSize": 3, "numAssistantTokens": 2}}, {}, None),
    ("pinned-cb", {"promptLookup": {}}, {"pipelineType": "LM_CB"}, None),
    ("neither", {}, {}, "exactly one of draftModel, promptLookup"),
    ("both", {"draftModel": DRAFT, "promptLookup": {}}, {}, "exactly one of draftModel, promptLookup"),
    (
        "count-and-threshold",
        {"draftModel": DRAFT, "numAssistantTokens": 3, "assistantConfidenceThreshold": 0.5},
        {},
        "exclusive",
    ),
    ("threshold-without-draft", {"promptLookup": {}, "assistantConfidenceThreshold": 0.5}, {}, "belong to a draft"),
    ("threshold-out-of-range", {"draftModel": DRAFT, "assistantConfidenceThreshold": 1.5}, {}, "less than 1"),
    ("two-draft-sources", {"draftModel": {**DRAFT, "pvc": {"claimName": "c"}}}, {}, "exactly one of draftModel.pvc"),
    ("legacy-pinned", {"promptLookup": {}}, {"pipelineType": "LM"}, "pipelineType AUTO or LM_CB"),
    ("vlm", {"promptLookup": {}}, {"pipelineType": "VLM_CB"}, "pipelineType AUTO or LM_CB"),
]


@pytest.mark.parametrize("sp,extra,error", [v[1:] for v in VALIDATION], ids=[v[0] for v in VALIDATION])
def test_validation(sp, extra, error):
    if error is None:
        assert spec(sp, **extra).speculative is not None
    else:
        with pytest.raises(ValidationError, match=error):
            spec(sp, **extra)


def test_crd_carries_the_rules():
    from ovserve_operator import crd

    schema = crd.openapi_schema()["properties"]["spec"]
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    assert any("speculative" in r for r in rules)
    sp_rules = [r["message"] for r in schema["properties"]["speculative"]["x-kubernetes-validations"]]
    assert len(sp_rules) == 3


# (id, speculative, args expected in the runtime's command line)
FLAGS = [
    (
        "draft",
        {"draftModel": DRAFT, "numAssistantTokens": 4, "draftDevice": "GPU"},
        ["--draft-model-path", "/models/llm-draft", "--draft-device", "GPU", "--num-assistant-tokens", "4"],
    ),
    (
        "confidence",
        {"draftModel": DRAFT, "assistantConfidenceThreshold": 0.4, "required": True},
        ["--assistant-confidence-threshold", "0.4", "--speculative-required"],
    ),
    (
        "lookup",
        {"promptLookup": {"maxNgramSize": 2, "numAssistantTokens": 3}},
        ["--prompt-lookup", "--num-assistant-tokens", "3", "--max-ngram-size", "2"],
    ),
]


@pytest.mark.parametrize("sp,args", [f[1:] for f in FLAGS], ids=[f[0] for f in FLAGS])
def test_runtime_flags(sp, args):
    got = render.runtime_args("llm", spec(sp), 30)
    joined = " ".join(got)
    assert " ".join(args) in joined or all(a in got for a in args), got


def test_no_speculation_leaves_the_template_as_it_was():
    plain = render.pod_template("llm", api.parse_spec({"model": HOST}), Settings())
    assert not any("draft" in str(v) for v in plain["spec"]["volumes"])
    assert "--prompt-lookup" not in plain["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(
    "source,volume_key,init",
    [
        (DRAFT, "hostPath", False),
        ({"pvc": {"claimName": "drafts", "path": "tiny"}}, "persistentVolumeClaim", False),
        ({"huggingFace": {"repo": "org/draft"}}, "emptyDir", True),
    ],
    ids=["hostPath", "pvc", "huggingFace"],
)
def test_draft_volume_and_download(source, volume_key, init):
    t = render.pod_template("llm", spec({"draftModel": source}), Settings(allow_host_path=True))
    vol = next(v for v in t["spec"]["volumes"] if v["name"] == render.DRAFT_VOLUME)
    assert volume_key in vol
    if volume_key == "hostPath":  # as the model's: DirectoryOrCreate would let a spec create node directories
        assert vol["hostPath"]["type"] == "Directory"
    mount = next(m for m in t["spec"]["containers"][0]["volumeMounts"] if m["name"] == render.DRAFT_VOLUME)
    assert mount["mountPath"] == "/models/llm-draft" and mount["readOnly"]
    inits = [c["name"] for c in t["spec"].get("initContainers", [])]
    assert (render.DRAFT_INIT_CONTAINER_NAME in inits) == init
    if init:
        c = next(c for c in t["spec"]["initContainers"] if c["name"] == render.DRAFT_INIT_CONTAINER_NAME)
        assert c["args"][:2] == ["--repo", "org/draft"] and "/models/llm-draft" in c["args"]


def test_a_draft_on_the_model_claim_is_a_second_mount_of_its_volume():
    s = api.parse_spec(
        {
            "model": {"pvc": {"claimName": "models", "path": "tiny-llm"}},
            "speculative": {"draftModel": {"pvc": {"claimName": "models", "path": "tiny-llm-draft"}}},
        }
    )
    t = render.pod_template("llm", s, Settings())
    assert [v["name"] for v in t["spec"]["volumes"]].count("model") == 1
    assert render.DRAFT_VOLUME not in [v["name"] for v in t["spec"]["volumes"]]
    mounts = [m for m in t["spec"]["containers"][0]["volumeMounts"] if m["name"] == "model"]
    assert {m["mountPath"]: m.get("subPath") for m in mounts} == {
        "/models/llm": "tiny-llm",
        "/models/llm-draft": "tiny-llm-draft",
    }


def test_draft_host_path_is_gated_like_the_model():
    denied = policy.violations(
        api.parse_spec({"model": {"pvc": {"claimName": "m"}}, "speculative": {"draftModel": DRAFT}}),
        Settings(allow_host_path=False),
    )
    assert denied and "spec.speculative.draftModel.hostPath is denied" in denied[0]


def _report(resolved: str, reason: SpeculativeReason, fallback: bool = False, message: str = ""):
    sp = SpeculativeReport(
        requested=SpeculativeMode.DRAFT,
        resolved=SpeculativeMode(resolved),
        fallback=fallback,
        reason=reason,
        message=message,
    )
    return CB_READY.model_copy(update={"speculative": sp})


def compute(reports: dict, previous=None, speculative=None):
    s = api.parse_spec({"model": HOST, "replicas": len(reports), "speculative": speculative or {"draftModel": DRAFT}})
    pods = [pod(n, ip=f"10.0.0.{i}") for i, n in enumerate(sorted(reports))]
    return compute_status(
        s, pods, {n: Reading(r, "http") for n, r in reports.items()}, now=NOW, generation=2, previous=previous
    )


def cond(status):
    return next(c for c in status["conditions"] if c["type"] == "SpeculativeDecoding")


def test_speculating():
    r = compute({"a": _report("draft", SpeculativeReason.SPECULATING)})
    sp = r.status["speculative"]
    assert (sp["requested"], sp["resolved"], sp["fallback"], sp["display"]) == ("draft", "draft", False, "draft")
    c = cond(r.status)
    assert (c["status"], c["reason"]) == ("True", "Speculating")
    assert not [e for e in r.events if e.reason == "SpeculativeFallback"]


def test_fallback_is_visible_everywhere():
    bad = _report("none", SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE, True, "vocabularies differ: main 562, draft 400")
    r = compute({"a": bad})
    sp = r.status["speculative"]
    assert sp["display"] == "none (DraftModelIncompatible)" and sp["fallback"]
    c = cond(r.status)
    assert (c["status"], c["reason"]) == ("False", "DraftModelIncompatible") and "562" in c["message"]
    (e,) = [e for e in r.events if e.reason == "SpeculativeFallback"]
    assert e.type == "Warning" and "DraftModelIncompatible" in e.message
    again = compute({"a": bad}, previous=r.status)
    assert not [e for e in again.events if e.reason == "SpeculativeFallback"]  # once per transition
    assert r.status["conditions"][0]["type"] == "Ready" and r.status["conditions"][0]["status"] == "True"


def test_unknown_until_a_pod_says():
    r = compute({"a": LOADING})
    assert r.status["speculative"]["resolved"] is None and cond(r.status)["status"] == "Unknown"


def test_pods_that_disagree():
    r = compute(
        {
            "a": _report("draft", SpeculativeReason.SPECULATING),
            "b": _report("none", SpeculativeReason.DRAFT_MODEL_NOT_FOUND, True, "missing"),
        }
    )
    sp = r.status["speculative"]
    assert sp["resolved"] == "draft,none" and sp["reason"] == "PodsDisagree" and sp["fallback"]
    assert cond(r.status)["status"] == "False"


def test_absent_without_spec_speculative():
    r = st.compute(
        name="llm",
        namespace="ns",
        generation=1,
        spec=api.parse_spec({"model": HOST}),
        pods=[pod("a")],
        readings={"a": Reading(CB_READY, "http")},
        previous=None,
        desired_hash="h1",
        now=NOW,
    )
    assert r.status.get("speculative") is None
    assert all(c["type"] != "SpeculativeDecoding" for c in r.status["conditions"])


def _draft_volume_refused(volume: str) -> str:
    return f'MountVolume.SetUp failed for volume "{volume}" : hostPath type check failed: /x is not a directory'


@pytest.mark.parametrize(
    "volume,names",
    [(render.DRAFT_VOLUME, "draft model hostPath /models/tiny-llm-draft"), ("model", "hostPath /models/tiny-llm")],
    ids=["draft-missing", "model-missing"],
)
def test_a_missing_hostpath_names_the_volume_that_is_missing(volume, names):
    """The draft is mounted `Directory` (issue 38): a missing one is a pod that cannot mount it, and Ready says
    which of the two hostPaths is missing."""
    from ovserve_operator import rules

    facts = rules.Facts(
        name="llm",
        namespace="ns",
        generation=1,
        spec=spec({"draftModel": DRAFT}),
        pods=(rules.PodFacts("llm-0", True, False, False, None, mount_failure=_draft_volume_refused(volume)),),
    )
    status, reason, message = rules.evaluate(rules.READY_CHAIN, facts)
    assert (status, reason) == (api.ConditionStatus.FALSE, "ModelNotFound")
    assert message.startswith(f"{names} does not exist on the node")
