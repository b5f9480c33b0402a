"""Task resolution: which task a model directory is served as (DESIGN.md, "Tasks"), and how embeddings are
computed. Pure: the facts about the model come in as plain values (`ModelFacts`, read by `facts.py`),
decisions come out, so the rules are unit-tested table-driven.

AUTO reads the model, IR first (what will really run), config.json second:
- a Whisper export (openvino_encoder_model.xml + openvino_decoder_model.xml, the layout of optimum-intel's
  automatic-speech-recognition export, with config.json's model_type whisper or no config.json): transcription;
- a vision-language directory, or an IR with `logits` over a vocabulary ([batch, sequence, vocab]) or a
  `beam_idx` input (a stateful decoder): text-generation;
- an IR with `logits` [batch, 1] (a sequence classifier with one label, a cross-encoder): rerank;
- an IR with `last_hidden_state` (or `token_embeddings` / `sentence_embedding`) and no `logits`: an encoder
  without LM head: embeddings;
- otherwise config.json's architecture (`...ForCausalLM`, `...ForSequenceClassification` with one label,
  `...Model`), else text-generation (the pipeline loader then says what is wrong with the directory).
A task asked for that the model is not is TaskMismatch; a pinned pipelineType with embeddings, rerank or
transcription too (pipelineType chooses among text-generation pipelines only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..flags import Pooling
from ..report import Decision, PipelineType, Reason, Source, Task

EMBEDDING_OUTPUTS = ("last_hidden_state", "token_embeddings", "sentence_embedding")


@dataclass(frozen=True)
class ModelFacts:
    """What the directory says about the model (no openvino objects)."""

    vlm: bool = False  # the VLM layout of resolve.inspect_dir
    has_ir: bool = False  # openvino_model.xml
    outputs: dict[str, tuple[int | None, ...]] = field(default_factory=dict)  # IR output name -> shape (None: dynamic)
    inputs: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()  # config.json
    num_labels: int | None = None  # config.json id2label / num_labels
    speech: str | None = None  # a speech-to-text export's evidence (e.g. "whisper encoder + decoder IR"), else None


@dataclass(frozen=True)
class Resolved:
    task: Task
    source: str  # how it was decided, for the report


@dataclass(frozen=True)
class TaskFailure:
    reason: Reason
    message: str


def _labels(f: ModelFacts) -> int | None:
    shape = f.outputs.get("logits")
    if shape is not None and len(shape) == 2 and shape[1] is not None:
        return shape[1]
    return f.num_labels


def _classifier(f: ModelFacts) -> bool:
    logits = f.outputs.get("logits")
    if logits is not None:
        return len(logits) == 2 and "beam_idx" not in f.inputs
    return bool(f.architectures) and f.architectures[0].endswith("ForSequenceClassification")


def detect(f: ModelFacts) -> tuple[Task | None, str]:
    """What the model is (None: not recognisable), and the evidence."""
    if f.speech is not None:  # before config.json: WhisperForConditionalGeneration reads like a generator
        return Task.TRANSCRIPTION, f"model: {f.speech}"
    if f.vlm:
        return Task.TEXT_GENERATION, "model: vision-language directory"
    if not f.has_ir:
        return None, "no openvino_model.xml"
    logits = f.outputs.get("logits")
    if logits is not None:
        if len(logits) == 3 or "beam_idx" in f.inputs:
            return Task.TEXT_GENERATION, "model: output logits [batch, sequence, vocabulary]"
        if len(logits) == 2:
            n = _labels(f)
            if n == 1:
                return Task.RERANK, "model: output logits [batch, 1] (a one-label sequence classifier)"
            return None, f"model: a sequence classifier with {n} labels"
    emb = next((name for name in EMBEDDING_OUTPUTS if name in f.outputs), None)
    if emb is not None and logits is None:
        return Task.EMBEDDINGS, f"model: output {emb} without LM head"
    arch = f.architectures[0] if f.architectures else ""
    if arch.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")):
        return Task.TEXT_GENERATION, f"config.json: {arch}"
    if arch.endswith("ForSequenceClassification"):
        if f.num_labels == 1:
            return Task.RERANK, f"config.json: {arch} with one label"
        return None, f"config.json: {arch} with {f.num_labels} labels"
    if arch.endswith("Model"):
        return Task.EMBEDDINGS, f"config.json: {arch} (no head)"
    return None, "neither the IR outputs nor config.json name the task"


def resolve_task(requested: Task, pipeline_type: PipelineType, f: ModelFacts) -> Resolved | TaskFailure:
    found, why = detect(f)
    if requested != Task.AUTO:
        if requested != Task.TEXT_GENERATION and pipeline_type != PipelineType.AUTO:
            return TaskFailure(
                Reason.TASK_MISMATCH,
                f"pipelineType {pipeline_type} applies to text generation only; task {requested} runs its own "
                "pipeline: leave pipelineType AUTO",
            )
        if requested == Task.RERANK and found is None and _classifier(f) and _labels(f) == 2:
            # a two-label cross-encoder: openvino-genai scores it by the softmax of label 1; asked for, served
            return Resolved(requested, f"asked ({why}: label 1 is the relevance)")
        if found is None and _classifier(f):
            return TaskFailure(
                Reason.TASK_MISMATCH,
                f"task {requested} requested, but the model is not one ({why}; a reranker has one label, or two "
                "when asked for)",
            )
        if found is not None and found != requested:
            return TaskFailure(
                Reason.TASK_MISMATCH,
                f"task {requested} requested, but the model is a {found} model ({why}); use task {found} or AUTO",
            )
        return Resolved(requested, "asked" if found is None else f"asked ({why})")
    if found is None:
        if _classifier(f):
            return TaskFailure(
                Reason.TASK_NOT_SUPPORTED,
                f"{why}: neither an embedding model nor a reranker (a reranker has one label); set task rerank "
                "for a two-label cross-encoder",
            )
        return Resolved(Task.TEXT_GENERATION, f"default ({why})")
    if found != Task.TEXT_GENERATION and pipeline_type != PipelineType.AUTO:
        return TaskFailure(
            Reason.TASK_MISMATCH,
            f"pipelineType {pipeline_type} requested, but the model is a {found} model ({why}); pipelineType "
            "applies to text generation only",
        )
    return Resolved(found, why)


# --------------------------------------------------------------------------------------- embeddings

ST_POOLING_KEYS = {
    "pooling_mode_cls_token": Pooling.CLS,
    "pooling_mode_mean_tokens": Pooling.MEAN,
    "pooling_mode_lasttoken": Pooling.LAST_TOKEN,
}
ST_UNSUPPORTED = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")
ST_NORMALIZE = "sentence_transformers.models.Normalize"


@dataclass(frozen=True)
class SentenceTransformers:
    """The model's sentence-transformers config (modules.json and its Pooling module's config), if any."""

    pooling_config: dict | None = None  # the Pooling module's config.json
    modules: tuple[str, ...] = ()  # module types in modules.json, in order


@dataclass(frozen=True)
class EmbeddingsPlan:
    pooling: Decision
    normalize: Decision


def resolve_embeddings(
    pooling: Pooling | None,
    normalize: bool | None,
    st: SentenceTransformers | None,
    defaults: tuple[Pooling, bool] = (Pooling.CLS, True),
) -> EmbeddingsPlan | TaskFailure:
    """Flags first, then the sentence-transformers config, then `defaults` (openvino-genai's
    TextEmbeddingPipeline.Config(): CLS pooling, normalized, in 2026.4)."""
    if pooling is not None:
        pool = Decision(value=pooling.value, source=Source.REQUESTED, requested=pooling.value, detail="asked")
    else:
        pool = Decision(value=defaults[0].value, detail="openvino-genai's default")
        cfg = (st.pooling_config if st else None) or {}
        chosen = [p for key, p in ST_POOLING_KEYS.items() if cfg.get(key)]
        odd = [key for key in ST_UNSUPPORTED if cfg.get(key)]
        if odd and not chosen:
            return TaskFailure(
                Reason.MODEL_LOAD_FAILED,
                f"the model's sentence-transformers pooling ({', '.join(odd)}) is not one openvino-genai computes "
                "(CLS, MEAN, LAST_TOKEN): set the pooling explicitly (spec.embeddings.pooling) to serve it anyway",
            )
        if chosen:
            pool = Decision(value=chosen[0].value, detail="model: sentence-transformers pooling config")
    if normalize is not None:
        value = str(normalize).lower()
        norm = Decision(value=value, source=Source.REQUESTED, requested=value, detail="asked")
    elif st is not None and st.modules:
        norm = Decision(
            value=str(ST_NORMALIZE in st.modules).lower(), detail="model: sentence-transformers modules.json"
        )
    else:
        norm = Decision(value=str(defaults[1]).lower(), detail="openvino-genai's default")
    return EmbeddingsPlan(pooling=pool, normalize=norm)
