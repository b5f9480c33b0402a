"""spec.speculative and the decision record on the real cluster: the CRD's CEL rules, a draft that runs, one that
falls back visibly (status.speculative, the SpeculativeDecoding condition, a Warning, the -o wide column), one that
is required and refuses, prompt lookup, and status.decisions copied from the pods' reports."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .test_operator_e2e import condition, has_event, llms, models_claim, pvc_model, row, status, wait_phase

pytestmark = [pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def drafts(tiny_models) -> Path:
    """tiny-llm-draft and tiny-llm-draft-othertok beside the tiny models (the same "models" claim)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "models" / "draft" / "build.sh")], capture_output=True, text=True, timeout=1200
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/models/draft/build.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return tiny_models


@pytest.fixture
def runtime_with_drafts(cluster, project_image, drafts, namespace):
    """The models and drafts on the claim "models" (as test_operator_e2e's runtime fixture)."""
    with models_claim(cluster, namespace, drafts) as root:
        yield root


def wide(cluster, namespace: str, name: str) -> dict[str, str]:
    rows = {r["NAME"]: r for r in cluster.table("llmservings", "-n", namespace, "-o", "wide")}
    return rows.get(name, {})


@pytest.mark.parametrize(
    "speculative,extra,message",
    [
        ({"draftModel": pvc_model("d"), "promptLookup": {}}, {}, "exactly one of draftModel, promptLookup"),
        ({"promptLookup": {}, "assistantConfidenceThreshold": 0.5}, {}, "belong to a draft model"),
        ({"promptLookup": {}}, {"pipelineType": "LM"}, "pipelineType AUTO or LM_CB"),
    ],
    ids=["both-modes", "threshold-without-draft", "legacy-pinned"],
)
def test_cel_refuses(cluster, crd, namespace, speculative, extra, message):
    obj = llms("bad", {"model": pvc_model("tiny-llm"), "speculative": speculative, **extra})
    proc = cluster.create(obj, namespace, check=False)
    assert proc.returncode != 0 and message in proc.stderr


def test_draft_runs_and_decisions_are_recorded(cluster, operator, namespace, runtime_with_drafts):
    spec = {"model": pvc_model("tiny-llm"), "speculative": {"draftModel": pvc_model("tiny-llm-draft")}}
    cluster.apply(llms("sd", spec), namespace)
    st = wait_phase(cluster, namespace, "sd", "Ready")
    assert st["speculative"]["resolved"] == "draft" and not st["speculative"]["fallback"]
    c = condition(st, "SpeculativeDecoding")
    assert (c["status"], c["reason"]) == ("True", "Speculating")
    assert wide(cluster, namespace, "sd")["SPECULATIVE"] == "draft"
    d = st["decisions"]
    assert d["speculative"]["value"] == "draft" and d["speculative"]["source"] == "requested"
    assert d["kvCachePrecision"]["detail"].startswith("measured:") and d["device"]["value"] == "CPU"
    assert d["openvinoGenai"]["value"]
    described = cluster.kubectl("describe", "llmserving", "sd", "-n", namespace).stdout
    assert "Decisions:" in described and "Kv Cache Precision:" in described
    dep = cluster.get("deployment", "sd", namespace)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--draft-model-path") + 1] == "/models/sd-draft"


def test_incompatible_draft_falls_back_visibly(cluster, operator, namespace, runtime_with_drafts):
    spec = {"model": pvc_model("tiny-llm"), "speculative": {"draftModel": pvc_model("tiny-llm-draft-othertok")}}
    cluster.apply(llms("fb", spec), namespace)
    st = wait_phase(cluster, namespace, "fb", "Ready")
    sp = st["speculative"]
    assert (sp["resolved"], sp["fallback"], sp["reason"]) == ("none", True, "DraftModelIncompatible")
    assert "vocabularies differ" in sp["message"]
    c = condition(st, "SpeculativeDecoding")
    assert (c["status"], c["reason"]) == ("False", "DraftModelIncompatible")
    assert wide(cluster, namespace, "fb")["SPECULATIVE"] == "none (DraftModelIncompatible)"
    cluster.wait_for(
        lambda: has_event(cluster, namespace, "fb", "Warning", "SpeculativeFallback"), 30, "SpeculativeFallback"
    )
    assert st["decisions"]["speculative"]["value"] == "none"


def test_required_draft_refuses(cluster, operator, namespace, runtime_with_drafts):
    spec = {
        "model": pvc_model("tiny-llm"),
        "speculative": {"draftModel": pvc_model("tiny-llm-draft-othertok"), "required": True},
    }
    cluster.apply(llms("req", spec), namespace)
    st = wait_phase(cluster, namespace, "req", "Failed")
    ready = condition(st, "Ready")
    assert ready["reason"] == "SpeculativeDecodingUnavailable" and "DraftModelIncompatible" in ready["message"]
    assert row(cluster, namespace, "req")["PHASE"] == "Failed"


def test_prompt_lookup_runs(cluster, operator, namespace, runtime_with_drafts):
    spec = {"model": pvc_model("tiny-llm"), "speculative": {"promptLookup": {"maxNgramSize": 2}}}
    cluster.apply(llms("pl", spec), namespace)
    st = wait_phase(cluster, namespace, "pl", "Ready")
    assert st["speculative"]["resolved"] == "promptLookup"
    assert condition(st, "SpeculativeDecoding")["status"] == "True"
    assert status(cluster, namespace, "pl")["speculative"]["display"] == "promptLookup"
