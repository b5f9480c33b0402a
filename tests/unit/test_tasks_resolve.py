"""Task resolution and the embeddings settings, table-driven (tasks/resolve.py is pure)."""

from __future__ import annotations

import pytest
from ovserve_runtime.flags import Pooling
from ovserve_runtime.report import PipelineType as P
from ovserve_runtime.report import Reason, Task
from ovserve_runtime.tasks.resolve import (
    ModelFacts,
    Resolved,
    SentenceTransformers,
    TaskFailure,
    resolve_embeddings,
    resolve_task,
)

LLM = ModelFacts(
    has_ir=True,
    outputs={"logits": (None, None, 1000)},
    inputs=("attention_mask", "beam_idx", "input_ids", "position_ids"),
    architectures=("LlamaForCausalLM",),
)
VLM = ModelFacts(vlm=True, has_ir=False)
ENCODER = ModelFacts(
    has_ir=True, outputs={"last_hidden_state": (None, None, 32)}, inputs=("input_ids",), architectures=("BertModel",)
)
CROSS = ModelFacts(
    has_ir=True, outputs={"logits": (None, 1)}, architectures=("BertForSequenceClassification",), num_labels=1
)
TWO_LABELS = ModelFacts(has_ir=True, outputs={"logits": (None, 2)}, num_labels=2)
THREE_LABELS = ModelFacts(has_ir=True, outputs={"logits": (None, 3)}, num_labels=3)
CONFIG_ONLY_ENCODER = ModelFacts(has_ir=True, architectures=("XLMRobertaModel",))
CONFIG_ONLY_CROSS = ModelFacts(has_ir=True, architectures=("XLMRobertaForSequenceClassification",), num_labels=1)
EMPTY = ModelFacts()

A, TG, EMB, RR = Task.AUTO, Task.TEXT_GENERATION, Task.EMBEDDINGS, Task.RERANK


@pytest.mark.parametrize(
    ("requested", "pipeline", "facts", "want"),
    [
        (A, P.AUTO, LLM, TG),
        (A, P.LM_CB, LLM, TG),
        (A, P.AUTO, VLM, TG),
        (A, P.AUTO, ENCODER, EMB),
        (A, P.AUTO, CROSS, RR),
        (A, P.AUTO, CONFIG_ONLY_ENCODER, EMB),
        (A, P.AUTO, CONFIG_ONLY_CROSS, RR),
        (A, P.AUTO, EMPTY, TG),  # no IR: the generation loader says ModelNotFound
        (EMB, P.AUTO, ENCODER, EMB),
        (RR, P.AUTO, CROSS, RR),
        (RR, P.AUTO, TWO_LABELS, RR),  # a two-label cross-encoder, asked for
        (TG, P.LM, LLM, TG),
        (EMB, P.AUTO, EMPTY, EMB),  # nothing to contradict: asked wins, the loader checks the directory
        (A, P.AUTO, TWO_LABELS, Reason.TASK_NOT_SUPPORTED),
        (A, P.AUTO, THREE_LABELS, Reason.TASK_NOT_SUPPORTED),
        (RR, P.AUTO, THREE_LABELS, Reason.TASK_MISMATCH),
        (RR, P.AUTO, LLM, Reason.TASK_MISMATCH),
        (EMB, P.AUTO, LLM, Reason.TASK_MISMATCH),
        (EMB, P.AUTO, CROSS, Reason.TASK_MISMATCH),
        (RR, P.AUTO, ENCODER, Reason.TASK_MISMATCH),
        (TG, P.AUTO, ENCODER, Reason.TASK_MISMATCH),
        (TG, P.AUTO, VLM, TG),
        (EMB, P.LM_CB, ENCODER, Reason.TASK_MISMATCH),  # pipelineType is for text generation only
        (A, P.LM, ENCODER, Reason.TASK_MISMATCH),
    ],
)
def test_resolve_task(requested, pipeline, facts, want):
    got = resolve_task(requested, pipeline, facts)
    if isinstance(want, Task):
        assert isinstance(got, Resolved), got
        assert got.task == want
        assert got.source
    else:
        assert isinstance(got, TaskFailure), got
        assert got.reason == want
        assert got.message


def test_mismatch_message_names_what_the_model_is():
    got = resolve_task(RR, P.AUTO, LLM)
    assert isinstance(got, TaskFailure)
    assert "text-generation" in got.message and "rerank" in got.message


MEAN_NORM = SentenceTransformers(
    pooling_config={"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False},
    modules=(
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
        "sentence_transformers.models.Normalize",
    ),
)
CLS_NO_NORM = SentenceTransformers(
    pooling_config={"pooling_mode_cls_token": True},
    modules=("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling"),
)
LAST = SentenceTransformers(pooling_config={"pooling_mode_lasttoken": True}, modules=())
MAX = SentenceTransformers(pooling_config={"pooling_mode_max_tokens": True}, modules=())


@pytest.mark.parametrize(
    ("pooling", "normalize", "st", "want"),
    [
        (None, None, None, (("CLS", "openvino"), ("true", "openvino"))),
        (None, None, MEAN_NORM, (("MEAN", "model"), ("true", "model"))),
        (None, None, CLS_NO_NORM, (("CLS", "model"), ("false", "model"))),
        (None, None, LAST, (("LAST_TOKEN", "model"), ("true", "openvino"))),
        (Pooling.CLS, False, MEAN_NORM, (("CLS", "asked"), ("false", "asked"))),
        (Pooling.MEAN, None, MAX, (("MEAN", "asked"), ("true", "openvino"))),
        (None, None, MAX, Reason.MODEL_LOAD_FAILED),  # max pooling is not computed by openvino-genai
    ],
)
def test_resolve_embeddings(pooling, normalize, st, want):
    got = resolve_embeddings(pooling, normalize, st, defaults=(Pooling.CLS, True))
    if isinstance(want, Reason):
        assert isinstance(got, TaskFailure) and got.reason == want
        assert "spec.embeddings.pooling" in got.message
        return
    (pv, ps), (nv, ns) = want
    assert (got.pooling.value, got.normalize.value) == (pv, nv)
    assert got.pooling.detail.startswith(ps) and got.normalize.detail.startswith(ns)
    assert (got.pooling.source == "requested") == (ps == "asked")
