"""End-to-end on the real cluster: an embeddings LLMServing and a rerank LLMServing (the tiny BERT models of
hack/models/encoders) reach Ready with the right TASK and answer through their Services; a task the model is
not is Failed with TaskMismatch."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import HACK, MODELS_DIR, run_on_host_network

from . import test_operator_e2e as e2e
from .test_operator_e2e import condition, llms, pvc_model, row, wait_phase
from .test_operator_vlm import service_url

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def encoder_runtime(cluster, project_image, namespace) -> Iterator[Path]:
    """tiny-embed and tiny-rerank built (hack/models/encoders/build.sh) and on the PVC "models"."""
    proc = run_on_host_network(["bash", str(HACK / "models" / "encoders" / "build.sh")], timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"hack/models/encoders/build.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    with e2e.models_claim(cluster, namespace, MODELS_DIR) as root:
        yield root


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read())


def test_embeddings_and_rerank_servings_are_ready_with_their_task(cluster, operator, namespace, encoder_runtime):
    from openai import OpenAI

    cluster.apply(llms("embed", {"model": pvc_model("tiny-embed")}), namespace)
    cluster.apply(llms("rerank", {"model": pvc_model("tiny-rerank"), "task": "rerank"}), namespace)
    st = wait_phase(cluster, namespace, "embed", "Ready", 300)
    r = row(cluster, namespace, "embed")
    assert (r["TASK"], r["RESOLVED"], r["READY"], r["PHASE"]) == ("embeddings", "TextEmbedding", "1/1", "Ready")
    assert st["task"]["requested"] == "AUTO" and "last_hidden_state" in st["task"]["source"]
    assert st["embeddings"]["pooling"]["value"] == "MEAN" and st["embeddings"]["dimensions"] == 32
    assert condition(st, "PipelineResolved")["reason"] == "TaskPipeline"

    client = OpenAI(base_url=service_url(cluster, namespace, "embed"), api_key="unused", max_retries=2)
    got = client.embeddings.create(model="embed", input=["hello world", "a cat in the house"])  # base64
    assert [len(d.embedding) for d in got.data] == [32, 32] and got.usage.prompt_tokens > 0

    st = wait_phase(cluster, namespace, "rerank", "Ready", 300)
    r = row(cluster, namespace, "rerank")
    assert (r["TASK"], r["RESOLVED"], r["PHASE"]) == ("rerank", "TextRerank", "Ready")
    assert st["task"] == {"requested": "rerank", "resolved": "rerank", "source": st["task"]["source"]}
    docs = ["paris is the capital of france", "a cat", "blue river"]
    code, body = post(service_url(cluster, namespace, "rerank") + "/rerank", {"query": "paris", "documents": docs})
    assert code == 200
    scores = [x["relevance_score"] for x in body["results"]]
    assert sorted(x["index"] for x in body["results"]) == [0, 1, 2] and scores == sorted(scores, reverse=True)


def test_a_task_the_model_is_not_is_failed_with_task_mismatch(cluster, operator, namespace, encoder_runtime):
    cluster.apply(llms("wrong", {"model": pvc_model("tiny-rerank"), "task": "embeddings"}), namespace)
    st = wait_phase(cluster, namespace, "wrong", "Failed", 300)
    ready = condition(st, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "TaskMismatch"
    assert "task embeddings requested" in ready["message"]
    assert st["task"]["requested"] == "embeddings" and not st["task"].get("resolved")
    assert row(cluster, namespace, "wrong")["TASK"] == ""
