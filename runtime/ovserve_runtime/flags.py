"""The runtime's flags, typed, in one place.

`RuntimeFlags` is what ovserve-runtime runs with. The CLI (cli.py) builds its parser and the OVSERVE_*
environment twins from these fields and validates what it got into one RuntimeFlags; the operator renders a
pod's command line from one (`to_args`), and its CRD takes the bounds of the flags it exposes (`bounds`); the
flags table of docs/runtime.md is generated from it (python -m ovserve_runtime.flags --write docs/runtime.md).
Names, types, bounds, defaults and help live here only. No I/O, no openvino: the operator imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from enum import Enum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from . import docblock, endpoints, sources
from .report import PipelineType, Task

ENV_PREFIX = "OVSERVE_"
OTLP_URL_PATTERN = r"^https?://[^\s/]+(/\S*)?$"  # --otlp-traces-endpoint (and the CRD field that sets it)


class Group(StrEnum):
    """Sections of --help and of the docs table, in this order."""

    MODEL = "model"
    SCHEDULER = "scheduler (continuous batching pipelines LM_CB/VLM_CB only)"
    SERVER = "server"
    TASKS = "embeddings, rerank and transcription (tasks other than text generation)"
    SPECULATIVE = "speculative decoding (LM_CB only; docs/runtime.md: Speculative decoding)"


class Pooling(StrEnum):
    """How token vectors become one embedding (openvino_genai.TextEmbeddingPipeline.PoolingType)."""

    CLS = "CLS"
    MEAN = "MEAN"
    LAST_TOKEN = "LAST_TOKEN"


class ToolParser(StrEnum):
    """How tool calls are read from the output (openai/tools.py): a model family's format."""

    AUTO = "AUTO"
    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"
    LLAMA3_PYTHONIC = "llama3_pythonic"
    NONE = "none"


class ReasoningParser(StrEnum):
    """How reasoning is split off the output (openai/reasoning.py)."""

    AUTO = "AUTO"
    QWEN3 = "qwen3"
    DEEPSEEK_R1 = "deepseek_r1"
    NONE = "none"


def _flag(default: Any, group: Group, metavar: str, doc: str, *, shown: str | None = None, **constraints: Any) -> Any:
    """A field that is a flag. `doc` is its --help and docs text; `shown` the default as the docs say it
    (when the value alone would not explain it, e.g. None = openvino-genai's choice)."""
    extra = {"group": group.value, "metavar": metavar, "shown": shown}
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


class RuntimeFlags(BaseModel):
    """Every setting of ovserve-runtime. A field `max_num_seqs` is the flag --max-num-seqs and the environment
    variable OVSERVE_MAX_NUM_SEQS. The field order is the order `to_args` writes them in: the operator's pod
    template hash depends on it, so new fields go last."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: str | None = _flag(
        None, Group.MODEL, "DIR", "directory of the exported OpenVINO model", shown="none, required"
    )
    served_name: str | None = _flag(
        None,
        Group.MODEL,
        "NAME",
        "model name clients send in 'model' and /v3/models lists",
        shown="the directory name",
    )
    pipeline_type: PipelineType = _flag(
        PipelineType.AUTO,
        Group.MODEL,
        "TYPE",
        "AUTO: pick LM/VLM by directory content and prefer continuous batching, falling back to the legacy "
        "pipeline only when PagedAttention is unsupported; LM_CB/VLM_CB: continuous batching or refuse (never "
        "downgraded); LM/VLM: the legacy stateful pipeline with the SDPA backend",
    )
    device: str = _flag(
        "CPU",
        Group.MODEL,
        "DEVICE",
        "OpenVINO device: CPU or GPU (an Intel GPU; refused with DeviceUnavailable when openvino does not see one)",
        min_length=1,
    )
    host: str = _flag("0.0.0.0", Group.SERVER, "ADDR", "listen address", min_length=1)
    port: int = _flag(endpoints.PORT, Group.SERVER, "PORT", "listen port", ge=1, le=65535)
    termination_log: str = _flag(
        endpoints.TERMINATION_LOG,
        Group.SERVER,
        "FILE",
        "file the failure report is written to (the Kubernetes termination message); skipped when not writable",
    )
    drain_timeout_seconds: float = _flag(
        30.0,
        Group.SERVER,
        "S",
        "on SIGTERM: readiness turns 503 and in-flight requests may finish for up to this long; then the streams "
        "still running end with an error event and the process exits 0 (a second signal stops waiting); 0 = end "
        "them at once (docs/runtime.md: Shutdown and drain)",
        ge=0,
        allow_inf_nan=False,
    )
    cache_size_gb: float | None = _flag(
        None,
        Group.SCHEDULER,
        "GB",
        "KV-cache size in whole GB reserved on the device; 0 lets openvino-genai size it",
        shown="openvino-genai's",
        ge=0,
        allow_inf_nan=False,
    )
    max_num_seqs: int | None = _flag(
        None,
        Group.SCHEDULER,
        "N",
        "requests generating at once; the engine enforces it also under dynamic split-fuse, where openvino-genai "
        "ignores it; the rest wait in the engine's queue",
        shown="openvino-genai's (256)",
        ge=1,
    )
    max_num_batched_tokens: int | None = _flag(
        None,
        Group.SCHEDULER,
        "N",
        "tokens processed in one step (prompt chunks and decode tokens)",
        shown="openvino-genai's",
        ge=1,
    )
    enable_prefix_caching: bool | None = _flag(
        None,
        Group.SCHEDULER,
        "",
        "reuse the KV-cache blocks of identical prompt prefixes across requests",
        shown="openvino-genai's",
    )
    dynamic_split_fuse: bool | None = _flag(
        None,
        Group.SCHEDULER,
        "",
        "split long prompts into chunks and batch them with decode steps",
        shown="openvino-genai's (on)",
    )
    kv_cache_precision: str | None = _flag(
        None,
        Group.SCHEDULER,
        "TYPE",
        "KV-cache element type (KV_CACHE_PRECISION): AUTO (on a CPU the value measured best for its instruction "
        "set where measured, else the plugin and openvino-genai decide), u8, u4, f16, "
        "bf16, f32 (the CPU plugin refuses f32 when it runs bf16 inference: ModelLoadFailed); u4 needs a fixed "
        "--cache-size-gb (openvino-genai 2026.4 corrupts memory when a u4 cache grows). What runs is measured and "
        "reported in /v1/status decisions.kvCachePrecision",
        shown="the plugin's",
        min_length=1,
    )
    max_queued_requests: int = _flag(
        256,
        Group.SERVER,
        "N",
        "admission bound: at most this many requests wait while max_num_seqs (one for the legacy pipeline) "
        "generate; beyond it 429 queue_full with Retry-After; 0 = no waiting room (docs/runtime.md: Admission)",
        ge=0,
        le=1_000_000,
    )
    stream_interval_ms: float = _flag(
        10.0,
        Group.SERVER,
        "MS",
        "a stream's text that comes within this long of its last chunk waits and goes out in one chunk at the end "
        "of the interval: fewer writes and client wake-ups when a stream runs faster than 1000/MS tokens per "
        "second, nothing held below that; the first token is never held; 0 = a chunk per engine step",
        ge=0,
        le=1000,
        allow_inf_nan=False,
    )
    inference_threads: int = _flag(
        0,
        Group.MODEL,
        "N",
        "INFERENCE_NUM_THREADS of the CPU plugin; 0 = openvino's default (all cores)",
        ge=0,
    )
    engine_process: bool = _flag(
        True,
        Group.SCHEDULER,
        "",
        "run a text model's ContinuousBatchingPipeline in an engine-core child process, so that HTTP work "
        "overlaps inference (off: a thread in this process; docs/runtime.md: Serving architecture)",
    )
    max_prompt_tokens: int = _flag(
        0,
        Group.SERVER,
        "N",
        "longer prompts get 400 context_length_exceeded; 0 = the model's max position embeddings",
        ge=0,
    )
    default_max_tokens: int = _flag(
        512, Group.SERVER, "N", "max_tokens when a request sets none (capped by the context)", ge=1
    )
    max_body_bytes: int = _flag(
        32 * 1024 * 1024,
        Group.SERVER,
        "BYTES",
        "larger request bodies get 413 request_too_large, refused on Content-Length before they are read (with "
        "Expect: 100-continue, as curl sends over 1 MiB, before they are uploaded); a chunked body is cut at "
        "the limit",
        shown="33554432 (32 MiB)",
        ge=1,
    )
    body_timeout_seconds: float = _flag(
        30.0,
        Group.SERVER,
        "S",
        "a request body must arrive within this long (else 408 request_timeout); a request is admitted (counted "
        "against --max-queued-requests and in ovserve_queue_depth) only once its body is read",
        ge=0.1,
        le=3600,
        allow_inf_nan=False,
    )
    liveness_stall_seconds: float = _flag(
        60.0,
        Group.SERVER,
        "S",
        "progress watchdog: requests are generating and no token came for this long (or 50 engine step times, "
        "whichever is longer): /v2/health/live answers 503 (the kubelet restarts the hung runtime)",
        ge=0.1,
        le=86400,
        allow_inf_nan=False,
    )
    engine_memory_growth_bytes: int = _flag(
        1 << 30,
        Group.SERVER,
        "BYTES",
        "the engine process may grow this much beyond its memory at ready, its KV cache's growth aside (capped at "
        "0.8 of what the container's memory limit leaves); past it the runtime drains and exits 0 for a restart "
        "with a fresh engine: openvino-genai keeps every compiled grammar (~25 MB per distinct schema on a "
        "150k-token vocabulary) for the pipeline's life (docs/runtime.md: Structured outputs); 0 = off",
        shown="1073741824 (1 GiB)",
        ge=0,
    )
    max_images: int = _flag(
        16,
        Group.SERVER,
        "N",
        "image_url parts per request; more get 400 too_many_images (counted before any is decoded)",
        ge=0,
    )
    max_image_pixels: int = _flag(
        4096 * 4096,
        Group.SERVER,
        "N",
        "width x height of one image, read from its header before decoding; larger get 413 image_too_large",
        shown="16777216 (4096x4096)",
        ge=1,
    )
    max_decoded_image_bytes: int = _flag(
        256 * 1024 * 1024,
        Group.SERVER,
        "BYTES",
        "decoded RGB bytes (w x h x 3) of all the images of one request; beyond, 413 image_too_large",
        shown="268435456 (256 MiB)",
        ge=1,
    )
    prepare_threads: int = _flag(
        0,
        Group.SERVER,
        "N",
        "threads that validate a request body over 16 KiB, apply its chat template and decode its images off the "
        "event loop (prompts are tokenized by one batching encoder thread); 0 = min(4, CPUs)",
        ge=0,
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = _flag(
        "INFO", Group.SERVER, "LEVEL", "logging to stderr: DEBUG, INFO, WARNING or ERROR"
    )

    tool_parser: ToolParser = _flag(
        ToolParser.AUTO,
        Group.SERVER,
        "NAME",
        "how tool calls are read from the model's output: AUTO picks the family the chat template writes "
        "(hermes for <tool_call> JSON as Qwen2.5/Qwen3, llama3_json, llama3_pythonic) and none when it renders no "
        "tools or in a format not parsed here; none: requests with tools get 400 (docs/runtime.md: Tool calling)",
    )
    reasoning_parser: ReasoningParser = _flag(
        ReasoningParser.AUTO,
        Group.SERVER,
        "NAME",
        "how reasoning is split off into reasoning_content: AUTO picks qwen3 when the chat template writes "
        "<think> and deepseek_r1 when it only strips </think>, else none; qwen3: a <think> block that opens the "
        "output (or that the prompt opens); deepseek_r1: the output starts inside it; none: all output is content",
    )

    @field_validator("tool_parser", "reasoning_parser", mode="before")
    @classmethod
    def _parser_name(cls, v: Any) -> Any:
        if isinstance(v, str) and not isinstance(v, Enum):
            v = v.strip()
            return "AUTO" if v.upper() == "AUTO" else v.lower()
        return v

    task: Task = _flag(
        Task.AUTO,
        Group.MODEL,
        "TASK",
        "AUTO: read from the model (a Whisper export: transcription; an encoder without LM head: embeddings; a "
        "one-label sequence classifier: rerank; else text-generation); text-generation, embeddings, rerank or "
        "transcription: that, or refuse with TaskMismatch",
    )
    embeddings_pooling: Pooling | None = _flag(
        None,
        Group.TASKS,
        "POOLING",
        "CLS, MEAN or LAST_TOKEN",
        shown="the model's sentence-transformers config, else CLS",
    )
    embeddings_normalize: bool | None = _flag(
        None,
        Group.TASKS,
        "",
        "L2-normalize embeddings",
        shown="the model's sentence-transformers config (a Normalize module), else off",
    )
    embeddings_matryoshka: bool = _flag(
        False,
        Group.TASKS,
        "",
        "the model was trained for truncation (Matryoshka): a request's `dimensions` below the model's size keeps "
        "the first dimensions and renormalizes; off: any other size than the model's is refused (400)",
    )
    embeddings_max_batch: int = _flag(
        64,
        Group.TASKS,
        "N",
        "most texts in one embeddings pipeline call: the inputs of concurrent requests are batched up to this",
        ge=1,
        le=4096,
    )
    rerank_max_documents: int = _flag(
        1000, Group.TASKS, "N", "documents per rerank request; more get 400 too_many_documents", ge=1
    )
    inference_precision: Literal["AUTO", "f32", "bf16", "f16"] | None = _flag(
        None,
        Group.MODEL,
        "TYPE",
        "INFERENCE_PRECISION_HINT: AUTO (text generation on a CPU: the value measured best for its instruction set "
        "where measured, docs/runtime.md; else the plugin's: bf16 on a CPU with AMX/AVX512-BF16, f16 on a GPU), "
        "f32, bf16, f16; the resolved value is in /v1/status decisions.inferencePrecision",
        shown="AUTO",
    )
    dynamic_quantization_group_size: int | None = _flag(
        None,
        Group.MODEL,
        "N",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE of the CPU plugin: activations quantized on the fly in groups of N for "
        "int8/int4 weights (0 = off); unset: chosen for the CPU's instruction set where measured "
        "(docs/benchmarks.md), else the plugin's; the resolved value is in /v1/status "
        "decisions.dynamicQuantization",
        shown="AUTO",
        ge=0,
        le=1 << 20,
    )
    draft_model_path: str | None = _flag(
        None,
        Group.SPECULATIVE,
        "DIR",
        "a smaller model sharing the main model's tokenizer proposes tokens, the main model verifies them; an "
        "unusable draft serves without speculation (reported), or refuses with --speculative-required",
        shown="none",
        min_length=1,
    )
    draft_device: str | None = _flag(
        None, Group.SPECULATIVE, "DEVICE", "device of the draft model", shown="the main model's", min_length=1
    )
    prompt_lookup: bool = _flag(
        False,
        Group.SPECULATIVE,
        "",
        "prompt lookup decoding: n-grams of the prompt propose tokens (no draft model; helps when answers quote "
        "the prompt)",
    )
    num_assistant_tokens: int | None = _flag(
        None,
        Group.SPECULATIVE,
        "N",
        "tokens proposed per step (draft or prompt lookup); a request may lower or raise it with num_assistant_tokens",
        shown="5 (draft), 3 (prompt lookup)",
        ge=1,
        le=64,
    )
    assistant_confidence_threshold: float | None = _flag(
        None,
        Group.SPECULATIVE,
        "P",
        "draft only, instead of --num-assistant-tokens: the draft proposes while its confidence stays above P",
        shown="none",
        gt=0,
        lt=1,
    )
    max_ngram_size: int | None = _flag(
        None, Group.SPECULATIVE, "N", "prompt lookup: longest n-gram matched", shown="3", ge=1, le=64
    )
    speculative_required: bool = _flag(
        False,
        Group.SPECULATIVE,
        "",
        "refuse to serve (exit 3, reason SpeculativeDecodingUnavailable) instead of serving without speculation "
        "when the draft or prompt lookup cannot run",
    )

    cache_eviction_max_tokens: int | None = _flag(
        None,
        Group.SCHEDULER,
        "N",
        "KV-cache eviction: keep at most N tokens of each sequence's cache (the first --cache-eviction-start-tokens, "
        "the last --cache-eviction-recent-tokens and the most attended between); N > start + recent; long "
        "generations then fit a small cache at some accuracy cost. Unset: no eviction",
        shown="off",
        ge=2,
    )
    cache_eviction_start_tokens: int = _flag(
        32, Group.SCHEDULER, "N", "KV-cache eviction: tokens always kept at the start", ge=0
    )
    cache_eviction_recent_tokens: int = _flag(
        128, Group.SCHEDULER, "N", "KV-cache eviction: most recent tokens always kept", ge=1
    )
    cache_eviction_aggregation: Literal["SUM", "NORM_SUM"] = _flag(
        "NORM_SUM", Group.SCHEDULER, "MODE", "KV-cache eviction: how attention scores rank tokens (SUM, NORM_SUM)"
    )
    sparse_attention: Literal["TRISHAPE", "XATTENTION"] | None = _flag(
        None,
        Group.SCHEDULER,
        "MODE",
        "sparse attention for long prefills: TRISHAPE or XATTENTION (openvino-genai's defaults for the sizes); "
        "unset: dense",
        shown="off",
    )
    grammar_timeout_seconds: float = _flag(
        5.0,
        Group.SERVER,
        "S",
        "building one request's output grammar (response_format json_schema, a forced tool call) runs in a worker "
        "process and may take this long; beyond it the worker is restarted and the request gets 400 naming the "
        "field (docs/runtime.md: Structured outputs)",
        ge=0.1,
        le=600,
        allow_inf_nan=False,
    )
    max_grammar_bytes: int = _flag(
        32 * 1024,
        Group.SERVER,
        "BYTES",
        "largest regex a schema or forced tool call may expand to (optional properties and $ref multiply it); "
        "larger get 400 naming the field before XGrammar compiles it on the engine's thread, where its compile "
        "time grows faster than its size (docs/runtime.md: Structured outputs)",
        shown="32768 (32 KiB)",
        ge=1024,
    )
    grammar_cache_entries: int = _flag(
        256,
        Group.SERVER,
        "N",
        "built grammars (and refusals) kept by the hash of the schema, least recently used dropped first; agents "
        "send the same schema on every call",
        ge=0,
    )
    grammar_cache_bytes: int = _flag(
        32 * 1024 * 1024,
        Group.SERVER,
        "BYTES",
        "bytes of the built grammars the cache may hold",
        shown="33554432 (32 MiB)",
        ge=0,
    )
    grammar_memory_bytes: int = _flag(
        1024 * 1024 * 1024,
        Group.SERVER,
        "BYTES",
        "address space of the grammar worker process (RLIMIT_AS); a schema that needs more gets 400",
        shown="1073741824 (1 GiB)",
        ge=64 * 1024 * 1024,
    )
    chat_template_kwargs: str = _flag(
        "",
        Group.SERVER,
        "JSON",
        "a JSON object of variables every chat request's template is rendered with, e.g. "
        "'{\"enable_thinking\": false}'; a request's chat_template_kwargs and reasoning_effort override it "
        "(docs/runtime.md: Reasoning controls)",
        shown="none",
    )
    responses_store_entries: int = _flag(
        1024,
        Group.SERVER,
        "N",
        "Responses API: stored responses (store true) kept in this pod for previous_response_id and GET, oldest "
        "dropped first; 0 keeps none (previous_response_id then always answers 404)",
        ge=0,
    )
    responses_store_bytes: int = _flag(
        64 * 1024 * 1024,
        Group.SERVER,
        "BYTES",
        "Responses API: bytes of stored conversations (JSON) kept in this pod",
        shown="67108864 (64 MiB)",
        ge=0,
    )
    responses_store_ttl_seconds: float = _flag(
        3600.0,
        Group.SERVER,
        "S",
        "Responses API: a stored response older than this is dropped",
        ge=1,
        allow_inf_nan=False,
    )
    max_audio_seconds: float = _flag(
        1800.0,
        Group.TASKS,
        "S",
        "transcription: longer audio gets 400 audio_too_long (from the file's header before decoding, and while "
        "decoding); the decoded audio is 64 KB a second (float32 at 16 kHz)",
        gt=0,
        le=86400,
        allow_inf_nan=False,
    )
    audio_decode_timeout_seconds: float = _flag(
        30.0,
        Group.TASKS,
        "S",
        "transcription: decoding one uploaded file may take this long, else 400 audio_decode_timeout",
        gt=0,
        le=3600,
        allow_inf_nan=False,
    )
    cache_dir: str | None = _flag(
        None,
        Group.MODEL,
        "DIR",
        "root of OpenVINO's compiled-model cache: blobs go to a key directory per OpenVINO/openvino-genai version, "
        "device, model digest and compile properties, reused by the next start (docs/startup.md)",
        shown="none: off",
    )
    cache_max_gb: float = _flag(
        20.0,
        Group.MODEL,
        "GB",
        "bound of the --cache-dir root: least-recently-used key directories are removed after a start",
        gt=0,
        le=100000,
        allow_inf_nan=False,
    )
    otlp_traces_endpoint: str | None = _flag(
        None,
        Group.SERVER,
        "URL",
        "OpenTelemetry tracing: send a span per API request (queue wait, preparation, generation; never prompt or "
        "completion text) to this OTLP/HTTP collector, e.g. http://jaeger:4318 (docs/observability.md)",
        shown="none: off",
        pattern=OTLP_URL_PATTERN,
    )
    trace_sample_ratio: float = _flag(
        1.0,
        Group.SERVER,
        "R",
        "tracing: the share of requests without a sampled W3C traceparent that are traced (a client's or "
        "gateway's sampling decision is always followed)",
        ge=0,
        le=1,
        allow_inf_nan=False,
    )

    @field_validator("pipeline_type", "device", "log_level", "embeddings_pooling", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) and not isinstance(v, Enum) else v

    @field_validator("chat_template_kwargs")
    @classmethod
    def _kwargs_json(cls, v: str) -> str:
        if v:
            import json

            try:
                value = json.loads(v)
            except ValueError as exc:
                raise ValueError(f"--chat-template-kwargs is not JSON: {exc}") from None
            if not isinstance(value, dict):
                raise ValueError("--chat-template-kwargs must be a JSON object")
        return v

    @model_validator(mode="after")
    def _eviction(self) -> RuntimeFlags:
        m = self.cache_eviction_max_tokens
        if m is not None and m <= self.cache_eviction_start_tokens + self.cache_eviction_recent_tokens:
            raise ValueError(
                "--cache-eviction-max-tokens must be larger than --cache-eviction-start-tokens + "
                "--cache-eviction-recent-tokens"
            )
        return self

    @model_validator(mode="after")
    def _u4_fixed_cache(self) -> RuntimeFlags:
        if (self.kv_cache_precision or "").lower() == "u4" and not self.cache_size_gb:
            raise ValueError(
                "--kv-cache-precision u4 needs a fixed --cache-size-gb > 0: openvino-genai 2026.4 corrupts memory "
                "when a u4 KV cache grows on demand"
            )
        return self

    @model_validator(mode="after")
    def _speculative(self) -> RuntimeFlags:
        if self.draft_model_path and self.prompt_lookup:
            raise ValueError("--draft-model-path and --prompt-lookup are exclusive: one speculative mode")
        if self.num_assistant_tokens is not None and self.assistant_confidence_threshold is not None:
            raise ValueError("--num-assistant-tokens and --assistant-confidence-threshold are exclusive")
        if self.assistant_confidence_threshold is not None and not self.draft_model_path:
            raise ValueError("--assistant-confidence-threshold needs --draft-model-path")
        if self.max_ngram_size is not None and not self.prompt_lookup:
            raise ValueError("--max-ngram-size needs --prompt-lookup")
        speculating = bool(self.draft_model_path or self.prompt_lookup)
        if not speculating and (
            self.num_assistant_tokens is not None or self.draft_device or self.speculative_required
        ):
            raise ValueError(
                "--num-assistant-tokens, --draft-device and --speculative-required need --draft-model-path or "
                "--prompt-lookup"
            )
        return self

    def to_args(self) -> list[str]:
        """The command line of the fields set explicitly (None = unset), in field order."""
        args: list[str] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name not in self.model_fields_set or value is None:
                continue
            if isinstance(value, bool):
                args.append(flag_name(name) if value else "--no-" + flag_name(name)[2:])
            else:
                args += [flag_name(name), _arg(value)]
        return args


def _arg(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def default(field: str) -> Any:
    """The runtime's default of a flag, for the internal configs that mirror it (server.ServerConfig)."""
    return RuntimeFlags.model_fields[field].get_default(call_default_factory=True)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _extra(field: str) -> dict[str, Any]:
    extra = RuntimeFlags.model_fields[field].json_schema_extra
    assert isinstance(extra, dict)
    return extra


def is_bool(field: str) -> bool:
    return RuntimeFlags.model_fields[field].annotation in (bool, bool | None)


def bounds(field: str) -> dict[str, Any]:
    """The numeric bounds of a flag as Field keyword arguments (ge=..., le=...), for the CRD fields that set it:
    the apiserver then refuses what the runtime would."""
    out: dict[str, Any] = {}
    for m in RuntimeFlags.model_fields[field].metadata:  # annotated_types.Ge, Le, ...
        for key in ("ge", "le"):
            if hasattr(m, key):
                out[key] = getattr(m, key)
    return out


def shown_default(field: str) -> str:
    shown = _extra(field)["shown"]
    if shown is not None:
        return shown
    default = RuntimeFlags.model_fields[field].default
    if isinstance(default, bool):
        return "on" if default else "off"
    return _arg(default)


def grouped() -> list[tuple[Group, list[str]]]:
    """Field names by section, in the order --help and the docs show them."""
    return [(g, [n for n in RuntimeFlags.model_fields if _extra(n)["group"] == g.value]) for g in Group]


# ------------------------------------------------------------------------- parsing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One argument per field, in groups. No value defaults here: what is absent stays absent from the
    namespace, so that `from_sources` can tell a flag from its environment twin and from the model's default."""
    for group, names in grouped():
        g = parser.add_argument_group(group.value)
        for name in names:
            doc = f"{RuntimeFlags.model_fields[name].description} (default: {shown_default(name)}) [{env_name(name)}]"
            if is_bool(name):
                g.add_argument(
                    flag_name(name), action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=doc
                )
            else:
                g.add_argument(flag_name(name), metavar=_extra(name)["metavar"], default=argparse.SUPPRESS, help=doc)


def from_sources(given: Mapping[str, Any], environ: Mapping[str, str]) -> RuntimeFlags:
    """RuntimeFlags from parsed flags (`given`: field -> value, as strings) over their OVSERVE_* twins; an empty
    environment variable counts as unset."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name in RuntimeFlags.model_fields:
        if name in given:
            values[name], source[name] = given[name], f"argument {flag_name(name)}"
        elif (env := sources.env_value(environ, env_name(name))) is not None:
            values[name], source[name] = env
    return sources.validate(RuntimeFlags, values, source)


# ------------------------------------------------------------------------- docs


def _rows() -> list[tuple[str, ...]]:
    rows = []
    for _, names in grouped():
        for name in names:
            if is_bool(name):
                flag, env = f"--[no-]{flag_name(name)[2:]}", f"{env_name(name)} (true/false)"
            else:
                flag, env = f"{flag_name(name)} {_extra(name)['metavar']}", env_name(name)
            rows.append((f"`{flag}`", env, shown_default(name), str(RuntimeFlags.model_fields[name].description)))
    return rows


DOCS = docblock.Block("flags", "ovserve_runtime.flags", "docs/runtime.md", ("flag", "env", "default", "meaning"), _rows)
render_into = DOCS.render_into


if __name__ == "__main__":
    sys.exit(DOCS.main())
