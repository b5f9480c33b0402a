"""The runtime report: the one typed contract between the runtime and the operator.

Served at GET /v1/status and, on failure, written as the last stderr line and to the container's
termination-message file. Imports only pydantic so that the operator can use it without openvino.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PipelineType(StrEnum):
    """What a user may request (same meaning as OpenVINO Model Server's pipeline_type)."""

    AUTO = "AUTO"
    LM = "LM"
    LM_CB = "LM_CB"
    VLM = "VLM"
    VLM_CB = "VLM_CB"


CB_PIPELINES = frozenset({PipelineType.LM_CB, PipelineType.VLM_CB})


class Task(StrEnum):
    """What a serving does (spec.task, --task). AUTO: read from the model (tasks/resolve.py)."""

    AUTO = "AUTO"
    TEXT_GENERATION = "text-generation"
    EMBEDDINGS = "embeddings"
    RERANK = "rerank"
    TRANSCRIPTION = "transcription"  # speech to text (a Whisper export): /v1/audio/transcriptions, /translations


class TaskPipeline(StrEnum):
    """The openvino-genai pipeline of a task other than text generation (pipeline.resolved of its report)."""

    TEXT_EMBEDDING = "TextEmbedding"  # openvino_genai.TextEmbeddingPipeline
    TEXT_RERANK = "TextRerank"  # openvino_genai.TextRerankPipeline
    WHISPER = "Whisper"  # openvino_genai.WhisperPipeline


TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps of a termination message


class Reason(StrEnum):
    """Why the pipeline is what it is. Values are valid metav1.Condition reasons."""

    CONTINUOUS_BATCHING = "ContinuousBatching"  # a *_CB pipeline runs, as requested or by AUTO
    LEGACY_REQUESTED = "LegacyPipelineRequested"  # LM / VLM pinned: the legacy pipeline, no CB tried
    LOADING = "Loading"
    PAGED_ATTENTION_NOT_SUPPORTED = "PagedAttentionNotSupported"
    PIPELINE_TYPE_MISMATCH = "PipelineTypeMismatch"
    MODEL_NOT_FOUND = "ModelNotFound"
    MODEL_LOAD_FAILED = "ModelLoadFailed"
    ENGINE_FAILED = "EngineFailed"  # the pipeline failed while serving (after the model had loaded)
    DEVICE_UNAVAILABLE = "DeviceUnavailable"
    SPECULATIVE_UNAVAILABLE = "SpeculativeDecodingUnavailable"  # required speculation cannot run: refused
    TASK_MISMATCH = "TaskMismatch"  # the task asked for is not what the model is (e.g. rerank on an LLM)
    TASK_NOT_SUPPORTED = "TaskNotSupported"  # the model is none of the tasks served (e.g. a 3-label classifier)
    TASK_PIPELINE = "TaskPipeline"  # embeddings / rerank: their own pipeline; pipelineType does not apply


class State(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class PipelineReport(BaseModel):
    model_config = ConfigDict(extra="ignore")

    requested: PipelineType = PipelineType.AUTO
    resolved: PipelineType | TaskPipeline | None = Field(
        None, description="LM, LM_CB, VLM or VLM_CB (TextEmbedding, TextRerank for those tasks); null until resolved"
    )
    continuousBatching: bool = False
    fallback: bool = False
    reason: Reason = Reason.LOADING
    message: str = ""


class Versions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    openvino: str = ""
    openvinoGenai: str = ""


class Source(StrEnum):
    """Where a resolved setting came from."""

    REQUESTED = "requested"  # asked for (a flag / spec field) and applied as asked
    AUTOMATIC = "automatic"  # chosen by the runtime, openvino-genai, the OpenVINO plugin or the image


class Decision(BaseModel):
    """One resolved setting: its value as the pipeline runs it, and whether it was asked for."""

    model_config = ConfigDict(extra="ignore")

    value: str | None = Field(None, description="The resolved value as text; null: not applicable or unknown.")
    source: Source = Source.AUTOMATIC
    requested: str | None = Field(None, description="What was asked for, when something was.")
    detail: str = Field("", description="How it was resolved or read, e.g. 'plugin default on this CPU'.")


class Decisions(BaseModel):
    """Every setting the runtime, openvino-genai or OpenVINO resolved for this serving (DESIGN.md:
    "Every automatic decision is recorded"). Values are read back from OpenVINO where it exposes them."""

    model_config = ConfigDict(extra="ignore")

    device: Decision | None = Field(None, description="The execution device (what GPU/AUTO resolved to).")
    inferencePrecision: Decision | None = Field(None, description="INFERENCE_PRECISION_HINT as compiled.")
    kvCachePrecision: Decision | None = Field(None, description="KV-cache element type as compiled.")
    dynamicQuantization: Decision | None = Field(
        None, description="DYNAMIC_QUANTIZATION_GROUP_SIZE as compiled (0: off; CPU)."
    )
    cpu: Decision | None = Field(
        None, description="The CPU's instruction-set class the engine defaults follow, and its features (CPU)."
    )
    numStreams: Decision | None = Field(None, description="NUM_STREAMS as compiled.")
    inferenceThreads: Decision | None = Field(None, description="INFERENCE_NUM_THREADS as compiled.")
    kvCacheGB: Decision | None = Field(None, description="KV-cache memory in GB (continuous batching).")
    kvCacheBlocks: Decision | None = Field(None, description="KV-cache blocks (continuous batching).")
    prefixCaching: Decision | None = Field(None, description="Prefix caching on or off.")
    dynamicSplitFuse: Decision | None = Field(None, description="Dynamic split-fuse on or off.")
    cacheEviction: Decision | None = Field(None, description="KV-cache eviction (off, or its sizes).")
    sparseAttention: Decision | None = Field(None, description="Sparse attention for prefill (off, or its mode).")
    maxContext: Decision | None = Field(None, description="Longest prompt accepted, in tokens.")
    speculative: Decision | None = Field(None, description="Speculative decoding mode (none, draft, promptLookup).")
    openvino: Decision | None = Field(None, description="The OpenVINO version of the image.")
    openvinoGenai: Decision | None = Field(None, description="The openvino-genai version of the image.")
    toolParser: Decision | None = Field(None, description="How tool calls are read from the output (none: off).")
    reasoningParser: Decision | None = Field(None, description="How reasoning is split off the output (none: off).")
    chatTemplateKwargs: Decision | None = Field(
        None, description="Variables every chat template is rendered with (--chat-template-kwargs; none: unset)."
    )

    def items(self) -> list[tuple[str, Decision]]:
        """(name, decision) of the decisions that are set, in field order."""
        return [(k, v) for k in type(self).model_fields if (v := getattr(self, k)) is not None]


class SpeculativeMode(StrEnum):
    NONE = "none"
    DRAFT = "draft"  # a draft model proposes tokens, the main model verifies them
    PROMPT_LOOKUP = "promptLookup"  # n-grams of the prompt propose tokens


class SpeculativeReason(StrEnum):
    """Why speculative decoding is what it is. Values are valid metav1.Condition reasons."""

    NOT_REQUESTED = "NotRequested"
    SPECULATING = "Speculating"  # the requested mode runs
    DRAFT_MODEL_NOT_FOUND = "DraftModelNotFound"
    DRAFT_MODEL_INCOMPATIBLE = "DraftModelIncompatible"  # another tokenizer or architecture
    DRAFT_MODEL_LOAD_FAILED = "DraftModelLoadFailed"
    NEEDS_CONTINUOUS_BATCHING = "SpeculativeNeedsContinuousBatching"  # the legacy pipeline resolved


class SpeculativeReport(BaseModel):
    """Speculative decoding as requested and as it runs; `fallback`: requested but serving without it."""

    model_config = ConfigDict(extra="ignore")

    requested: SpeculativeMode = SpeculativeMode.NONE
    resolved: SpeculativeMode = SpeculativeMode.NONE
    fallback: bool = False
    required: bool = False
    reason: SpeculativeReason = SpeculativeReason.NOT_REQUESTED
    message: str = ""


class TaskReport(BaseModel):
    """The task asked for and the one the model is served as; `source` says how it was decided."""

    model_config = ConfigDict(extra="ignore")

    requested: Task = Task.AUTO
    resolved: Task | None = None  # null until resolved, and when it could not be
    source: str = ""  # e.g. "model: BertModel, output last_hidden_state" or "asked"


class EmbeddingsReport(BaseModel):
    """How embeddings are computed, as resolved (tasks/embeddings.py): pooling and normalization from the
    flags, else the model's sentence-transformers config, else openvino-genai's defaults."""

    model_config = ConfigDict(extra="ignore")

    pooling: Decision = Field(..., description="CLS, MEAN or LAST_TOKEN; detail: where it came from.")
    normalize: Decision = Field(..., description="L2 normalization: true or false; detail: where it came from.")
    dimensions: int = Field(..., description="The model's embedding size.")
    maxLength: int | None = Field(None, description="Longest input in tokens; longer ones are refused (400).")
    truncatableDimensions: bool = Field(
        False, description="A request's `dimensions` below the model's size is honoured (Matryoshka models)."
    )


class Capabilities(BaseModel):
    """What the serving model and pipeline can serve beyond plain text (docs/runtime.md, "OpenAI API")."""

    model_config = ConfigDict(extra="ignore")

    structuredOutput: bool = Field(False, description="response_format json_object and json_schema")
    images: bool = Field(False, description="image_url content parts (a VLM pipeline)")
    logprobs: bool = Field(False, description="chat logprobs (the sampled tokens'; continuous batching)")
    toolParser: str | None = Field(None, description="the tool-call parser in use; null: tools are refused")
    reasoningParser: str | None = Field(None, description="the reasoning parser in use; null: none")
    maxContext: int | None = Field(None, description="the model's context (max position embeddings), tokens")
    maxPromptTokens: int | None = Field(None, description="the longest prompt accepted, tokens")
    task: Task | None = Field(None, description="text-generation, embeddings or rerank (the resolved task)")
    thinkingSwitch: str | None = Field(
        None,
        description="the chat template's thinking switch (enable_thinking, thinking) that reasoning_effort sets; "
        "null: reasoning_effort is refused",
    )


class CacheState(StrEnum):
    """OpenVINO's compiled-model cache at this start (--cache-dir; docs/startup.md)."""

    OFF = "off"  # no --cache-dir
    HIT = "hit"  # the compiled blobs were loaded from the cache
    MISS = "miss"  # compiled, and the blobs written for the next start
    BYPASSED = "bypassed"  # the cache could not be used (unwritable, full, locked too long): compiled without it


class StartupReport(BaseModel):
    """How this pod started, in seconds per phase, and whether the compiled-model cache hit."""

    model_config = ConfigDict(extra="ignore")

    weightsReadSeconds: float | None = Field(None, description="Reading the model's weight files from disk.")
    compileSeconds: float | None = Field(
        None, description="Constructing the pipeline: compiling, or loading the compiled blobs on a cache hit."
    )
    firstTokenSeconds: float | None = Field(None, description="The first generation (one token) after it.")
    totalSeconds: float | None = Field(None, description="From the process start to ready.")
    cache: CacheState = CacheState.OFF
    cacheKey: str | None = Field(None, description="The key directory under the cache root.")
    previousVersions: str | None = Field(
        None,
        description="On a miss: the OpenVINO / openvino-genai versions of an entry for the same model, device and "
        "properties (a version change made it miss).",
    )
    message: str = Field("", description="Why the cache was bypassed or an entry not used.")


class RuntimeReport(BaseModel):
    """GET /v1/status. `model` is the served model name, `device` the OpenVINO device (CPU, GPU)."""

    model_config = ConfigDict(extra="ignore")

    state: State = State.LOADING
    model: str = ""
    device: str = "CPU"
    pipeline: PipelineReport = Field(default_factory=PipelineReport)
    versions: Versions = Field(default_factory=Versions)
    speculative: SpeculativeReport = Field(default_factory=SpeculativeReport)
    decisions: Decisions | None = Field(None, description="Resolved settings; null until the pipeline is loaded.")
    task: TaskReport = Field(default_factory=TaskReport)
    embeddings: EmbeddingsReport | None = None  # task embeddings only
    capabilities: Capabilities | None = Field(None, description="null until the model is loaded")
    startup: StartupReport | None = Field(None, description="Start phases and the cache; null until ready.")

    def to_line(self, limit: int | None = None) -> str:
        """One JSON line, as written to stderr and the termination-message file (the decisions block, served at
        /v1/status while ready, stays out). With `limit` (bytes): the kubelet keeps only 4 KiB of a termination
        message and cuts it, which would leave no line that parses; the pipeline message is trimmed instead,
        keeping its END (an error's last lines name its cause), so that the line always fits and parses."""
        line = self.model_dump_json(exclude={"decisions"})
        if limit is None or len(line.encode()) <= limit:
            return line
        msg = self.pipeline.message
        over = len(line.encode()) - limit
        mark = "[...] "
        keep = max(0, len(msg.encode()) - over - len(mark.encode()) - 64)  # escapes of the kept text: a margin
        while True:
            tail = msg.encode()[len(msg.encode()) - keep :].decode(errors="ignore")
            cut = self.model_copy(update={"pipeline": self.pipeline.model_copy(update={"message": mark + tail})})
            line = cut.model_dump_json(exclude={"decisions"})
            if len(line.encode()) <= limit or keep == 0:
                return line
            keep = max(0, keep - (len(line.encode()) - limit) - 16)

    @classmethod
    def from_text(cls, text: str) -> RuntimeReport | None:
        """The report in a termination message or log tail: its last line that parses, else None."""
        for line in reversed((text or "").strip().splitlines()):
            line = line.strip()
            if line.startswith("{") and '"pipeline"' in line:
                try:
                    return cls.model_validate_json(line)
                except ValueError:
                    continue
        return None


__all__ = [
    "CB_PIPELINES",
    "CacheState",
    "Capabilities",
    "Decision",
    "Decisions",
    "EmbeddingsReport",
    "PipelineReport",
    "PipelineType",
    "Reason",
    "RuntimeReport",
    "Source",
    "SpeculativeMode",
    "SpeculativeReason",
    "SpeculativeReport",
    "StartupReport",
    "State",
    "Task",
    "TaskPipeline",
    "TaskReport",
    "Versions",
]
