"""The operator side of tasks: spec validation (the pydantic mirror of the CRD's CEL rules), the runtime flags
rendered from spec.task / spec.embeddings / spec.rerank, and status.task / status.embeddings / the Ready
reason from the pods' reports."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import render
from ovserve_operator import spec as api
from ovserve_runtime.report import (
    Decision,
    EmbeddingsReport,
    PipelineReport,
    Reason,
    RuntimeReport,
    State,
    Task,
    TaskPipeline,
    TaskReport,
)
from pydantic import ValidationError

from .podfixtures import compute as compute_status
from .podfixtures import pod, readings

NOW = dt.datetime(2026, 12, 3, 7, 0, 0, tzinfo=dt.UTC)
MODEL = {"hostPath": {"path": "/models/m"}}


def spec(**fields) -> api.LLMServingSpec:
    return api.parse_spec({"model": MODEL, **fields})


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"task": "embeddings"}, None),
        ({"task": "rerank", "rerank": {"maxDocuments": 50}}, None),
        ({"task": "AUTO", "embeddings": {"pooling": "MEAN"}}, None),
        ({"task": "text-generation", "pipelineType": "LM_CB", "scheduler": {"maxNumSeqs": 8}}, None),
        ({"task": "embeddings", "autoscaling": {"maxReplicas": 3, "target": 4, "metric": "QueueDepth"}}, None),
        ({"task": "embeddings", "pipelineType": "LM_CB"}, "pipelineType applies to text generation only"),
        ({"task": "rerank", "pipelineType": "LM"}, "pipelineType applies to text generation only"),
        ({"task": "rerank", "scheduler": {"maxNumSeqs": 8}}, "scheduler configures"),
        ({"task": "rerank", "embeddings": {"normalize": True}}, "embeddings applies to task embeddings"),
        ({"task": "text-generation", "rerank": {"maxDocuments": 5}}, "rerank applies to task rerank"),
        (
            {"task": "embeddings", "autoscaling": {"maxReplicas": 3, "target": 50, "metric": "KVCacheUsage"}},
            "KVCacheUsage is a text-generation metric",
        ),
        ({"task": "classify"}, "task"),
        ({"task": "embeddings", "embeddings": {"pooling": "MAX"}}, "pooling"),
        ({"task": "embeddings", "embeddings": {"maxBatch": 0}}, "maxBatch"),
    ],
)
def test_spec_task_rules(fields, error):
    if error is None:
        spec(**fields)
        return
    with pytest.raises(ValidationError, match=error):
        spec(**fields)


@pytest.mark.parametrize(
    ("fields", "present", "absent"),
    [
        ({}, [], ["--task", "--embeddings-pooling"]),  # AUTO is the runtime's default: not rendered
        ({"task": "text-generation"}, ["--task", "text-generation"], []),
        (
            {
                "task": "embeddings",
                "embeddings": {"pooling": "MEAN", "normalize": False, "matryoshka": True, "maxBatch": 32},
            },
            [
                "--task",
                "embeddings",
                "--embeddings-pooling",
                "MEAN",
                "--no-embeddings-normalize",
                "--embeddings-matryoshka",
                "--embeddings-max-batch",
                "32",
            ],
            ["--rerank-max-documents"],
        ),
        (
            {"task": "rerank", "rerank": {"maxDocuments": 100}},
            ["--task", "rerank", "--rerank-max-documents", "100"],
            [],
        ),
    ],
)
def test_runtime_args(fields, present, absent):
    args = render.runtime_args("e", spec(**fields), 30)
    joined = " ".join(args)
    for a in present:
        assert a in args, joined
    for a in absent:
        assert a not in args, joined


def test_auto_task_keeps_the_pod_template_of_earlier_versions():
    assert render.runtime_args("e", spec(), 30) == render.runtime_args("e", spec(task="AUTO"), 30)


def _embed_report(state: str = "ready") -> RuntimeReport:
    return RuntimeReport(
        state=State(state),
        model="e",
        pipeline=PipelineReport(resolved=TaskPipeline.TEXT_EMBEDDING, reason=Reason.TASK_PIPELINE, message="m"),
        task=TaskReport(requested=Task.AUTO, resolved=Task.EMBEDDINGS, source="model: output last_hidden_state"),
        embeddings=EmbeddingsReport(
            pooling=Decision(value="MEAN", detail="model: sentence-transformers pooling config"),
            normalize=Decision(value="true", detail="model: sentence-transformers modules.json"),
            dimensions=384,
        ),
    )


def _mismatch_report() -> RuntimeReport:
    return RuntimeReport(
        state=State.FAILED,
        model="e",
        pipeline=PipelineReport(reason=Reason.TASK_MISMATCH, message="task rerank requested, but the model is ..."),
        task=TaskReport(requested=Task.RERANK),
    )


def _compute(s: api.LLMServingSpec, reports: dict[str, RuntimeReport], **pod_kw) -> dict:
    pods = [pod(n, **pod_kw) for n in reports]
    return compute_status(s, pods, readings(reports), now=NOW, name="e").status


def test_status_shows_the_resolved_task_and_embeddings_settings():
    status = _compute(spec(), {"e-1": _embed_report()})
    assert status["task"] == {
        "requested": "AUTO",
        "resolved": "embeddings",
        "source": "model: output last_hidden_state",
    }
    assert status["embeddings"]["pooling"]["value"] == "MEAN" and status["embeddings"]["dimensions"] == 384
    assert status["pipeline"]["resolved"] == "TextEmbedding" and status["pipeline"]["reason"] == "TaskPipeline"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and status["phase"] == "Ready"
    fallback = next(c for c in status["conditions"] if c["type"] == "Fallback")
    assert fallback["status"] == "False"


def test_a_task_mismatch_is_failed_with_its_reason():
    status = _compute(
        spec(task="rerank"),
        {"e-1": _mismatch_report()},
        ready=False,
        running=False,
        waiting=("CrashLoopBackOff", "back-off"),
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], status["phase"]) == ("False", "TaskMismatch", "Failed")
    assert "task rerank requested" in ready["message"]
    assert status["task"] == {"requested": "rerank", "resolved": None, "source": ""}
