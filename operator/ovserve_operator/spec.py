"""The typed LLMServing API: the single source of truth for the CRD's spec AND status schema.

`crd.py` turns these models into the structural OpenAPI schema checked in under crds/; the operator
validates every object it handles with them, and the status it writes is an `LLMServingStatus`.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from ovserve_runtime import flags
from ovserve_runtime.flags import Pooling
from ovserve_runtime.report import Capabilities, Decisions, EmbeddingsReport, PipelineType, Task
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

GROUP = "ovserve.dev"
VERSION = "v1alpha1"
KIND = "LLMServing"
PLURAL = "llmservings"
SINGULAR = "llmserving"
SHORT_NAMES = ["llms"]
API_VERSION = f"{GROUP}/{VERSION}"

# metav1.Condition.reason
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Device(StrEnum):
    """Where the runtime runs. GPU means an Intel GPU requested through its device plugin."""

    CPU = "CPU"
    GPU = "GPU"


class KVCachePrecision(StrEnum):
    AUTO = "AUTO"  # the plugin and openvino-genai decide (status.decisions.kvCachePrecision says what)
    u8 = "u8"
    u4 = "u4"
    i8 = "i8"
    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"


class Phase(StrEnum):
    PENDING = "Pending"
    LOADING = "Loading"
    READY = "Ready"
    DEGRADED = "Degraded"  # serving with fewer replicas: some pods of the current spec fail
    FAILED = "Failed"
    SCALED_TO_ZERO = "ScaledToZero"  # no replica by intent (spec.replicas 0, or idle with autoscaling.minReplicas 0)
    ACTIVATING = "Activating"  # demand brought a serving at zero back: its first replica is starting


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class _Strict(BaseModel):
    # Unknown fields are pruned by the apiserver anyway; refuse them here so tests catch typos.
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


# --------------------------------------------------------------------------------------------- spec


# resource.Quantity's canonical syntax (as kubebuilder renders it): `kubectl apply` refuses "two" early.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
}
Quantity = Annotated[int | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)], "resource.Quantity"]


SERVED_NAME_PATTERN = r"^[^-\s]\S*$"


class PVCSource(_Strict):
    """A model directory on a PersistentVolumeClaim in the same namespace (mounted read-only)."""

    claimName: str = Field(..., min_length=1, description="Name of the PersistentVolumeClaim.")
    path: str = Field(
        "",
        description="Directory inside the claim holding the OpenVINO IR model (subPath); empty = the root.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!self.startsWith('/') && !self.contains('..')",
                    "message": "path must be relative to the claim and must not contain '..'",
                }
            ]
        },
    )


class HostPathSource(_Strict):
    """A model directory on the node (development clusters only; mounted read-only)."""

    path: str = Field(
        ...,
        min_length=1,
        pattern=r"^/",
        description="Absolute directory on the node holding the OpenVINO IR model.",
    )


class SecretKeySelector(_Strict):
    """A key of a Secret in the same namespace."""

    name: str = Field(..., min_length=1, description="Name of the Secret.")
    key: str = Field("token", min_length=1, description="Key inside the Secret.")


class HuggingFaceSource(_Strict):
    """An OpenVINO IR model repository on the Hugging Face Hub, downloaded by an init container."""

    repo: str = Field(
        ...,
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$",
        description="Repository id, e.g. OpenVINO/Qwen2.5-0.5B-Instruct-int4-ov.",
    )
    revision: str = Field("main", min_length=1, description="Branch, tag or commit to download.")
    tokenSecretRef: SecretKeySelector | None = Field(
        None,
        description="Secret key holding a Hub token for gated or private repositories. "
        "Passed to the init container as an environment variable, never as an argument.",
    )
    sizeLimit: Quantity | None = Field(
        None,
        description="sizeLimit of the emptyDir the model is downloaded into (the kubelet evicts a pod whose "
        "download grows past it). Default: the operator setting OVSERVE_HF_DOWNLOAD_SIZE_LIMIT (20Gi).",
        json_schema_extra=_QUANTITY,
    )


class ModelSource(_Strict):
    """Where the model comes from: exactly one of pvc, hostPath, huggingFace."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.pvc), has(self.hostPath), has(self.huggingFace)].filter(x, x).size() == 1",
                    "message": "exactly one of model.pvc, model.hostPath, model.huggingFace must be set",
                }
            ]
        }
    )

    pvc: PVCSource | None = Field(None, description="Model on a PersistentVolumeClaim.")
    hostPath: HostPathSource | None = Field(None, description="Model in a directory of the node (dev only).")
    huggingFace: HuggingFaceSource | None = Field(None, description="Model downloaded from the Hugging Face Hub.")
    servedName: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        # the runtime takes it as a command-line argument: a leading '-' would read as a flag
        pattern=SERVED_NAME_PATTERN,
        description="Model name served by the OpenAI-compatible API (`model` field): no whitespace, not "
        "starting with '-'. Default: metadata.name.",
    )


class DraftModelSource(_Strict):
    """Where the draft model comes from: exactly one of pvc, hostPath, huggingFace (as spec.model)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.pvc), has(self.hostPath), has(self.huggingFace)].filter(x, x).size() == 1",
                    "message": "exactly one of draftModel.pvc, draftModel.hostPath, draftModel.huggingFace must be set",
                }
            ]
        }
    )

    pvc: PVCSource | None = Field(None, description="Draft model on a PersistentVolumeClaim.")
    hostPath: HostPathSource | None = Field(None, description="Draft model in a directory of the node (dev only).")
    huggingFace: HuggingFaceSource | None = Field(None, description="Draft model downloaded from the Hugging Face Hub.")

    @model_validator(mode="after")
    def _one(self) -> DraftModelSource:
        if sum(x is not None for x in (self.pvc, self.hostPath, self.huggingFace)) != 1:
            raise ValueError("exactly one of draftModel.pvc, draftModel.hostPath, draftModel.huggingFace must be set")
        return self


class PromptLookup(_Strict):
    """Prompt lookup decoding: n-grams of the prompt propose tokens (no draft model)."""

    maxNgramSize: int | None = Field(
        None, **flags.bounds("max_ngram_size"), description="Longest n-gram matched. Default: the runtime's (3)."
    )
    numAssistantTokens: int | None = Field(
        None, **flags.bounds("num_assistant_tokens"), description="Tokens proposed per step. Default: 3."
    )


_SPECULATIVE_RULES = [
    {
        "rule": "has(self.draftModel) != has(self.promptLookup)",
        "message": "speculative: exactly one of draftModel, promptLookup must be set",
    },
    {
        "rule": "!(has(self.numAssistantTokens) && has(self.assistantConfidenceThreshold))",
        "message": "speculative: numAssistantTokens and assistantConfidenceThreshold are exclusive",
    },
    {
        "rule": "has(self.draftModel) || !(has(self.numAssistantTokens) || has(self.assistantConfidenceThreshold) "
        "|| has(self.draftDevice))",
        "message": "speculative: numAssistantTokens, assistantConfidenceThreshold and draftDevice belong to a draft "
        "model (promptLookup has its own numAssistantTokens)",
    },
]


class Speculative(_Strict):
    """Speculative decoding (continuous-batching text pipelines: LM_CB, or AUTO resolving to it): a draft model or
    prompt lookup proposes tokens, the model verifies them; with greedy decoding the output is the same. A draft
    that cannot serve (missing, another tokenizer, not pageable, a load error) serves without speculation,
    recorded in status.speculative with a Warning, unless `required`, which fails the serving instead."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _SPECULATIVE_RULES})

    draftModel: DraftModelSource | None = Field(
        None, description="A smaller model with the same tokenizer (an OpenVINO IR text model, stateful export)."
    )
    draftDevice: Device | None = Field(None, description="Device of the draft model. Default: spec.device.")
    numAssistantTokens: int | None = Field(
        None,
        **flags.bounds("num_assistant_tokens"),
        description="Tokens the draft proposes per step. Default: the runtime's (5).",
    )
    assistantConfidenceThreshold: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Instead of numAssistantTokens: the draft proposes while its confidence stays above this.",
    )
    promptLookup: PromptLookup | None = Field(None, description="Prompt lookup decoding instead of a draft model.")
    required: bool = Field(
        False,
        description="Fail the serving (reason SpeculativeDecodingUnavailable) instead of serving without "
        "speculation when it cannot run.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Speculative:
        # the CEL rules above, for specs that reach the operator by other paths
        if (self.draftModel is None) == (self.promptLookup is None):
            raise ValueError(_SPECULATIVE_RULES[0]["message"])
        if self.numAssistantTokens is not None and self.assistantConfidenceThreshold is not None:
            raise ValueError(_SPECULATIVE_RULES[1]["message"])
        if self.draftModel is None and (
            self.numAssistantTokens is not None
            or self.assistantConfidenceThreshold is not None
            or self.draftDevice is not None
        ):
            raise ValueError(_SPECULATIVE_RULES[2]["message"])
        return self


class CacheEviction(_Strict):
    """KV-cache eviction (openvino_genai.CacheEvictionConfig): each sequence keeps at most maxTokens of cache."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.maxTokens > (has(self.startTokens) ? self.startTokens : 32) + "
                    "(has(self.recentTokens) ? self.recentTokens : 128)",
                    "message": "cacheEviction.maxTokens must be larger than startTokens + recentTokens",
                }
            ]
        }
    )

    maxTokens: int = Field(..., **flags.bounds("cache_eviction_max_tokens"), description="Tokens kept per sequence.")
    startTokens: int | None = Field(
        None, **flags.bounds("cache_eviction_start_tokens"), description="Always kept at the start (default 32)."
    )
    recentTokens: int | None = Field(
        None, **flags.bounds("cache_eviction_recent_tokens"), description="Always kept at the end (default 128)."
    )
    aggregation: Literal["SUM", "NORM_SUM"] | None = Field(
        None, description="How attention scores rank the tokens in between (default NORM_SUM)."
    )

    @model_validator(mode="after")
    def _sizes(self) -> CacheEviction:
        if self.maxTokens <= (self.startTokens if self.startTokens is not None else 32) + (
            self.recentTokens if self.recentTokens is not None else 128
        ):
            raise ValueError("cacheEviction.maxTokens must be larger than startTokens + recentTokens")
        return self


class SchedulerConfig(_Strict):
    """Continuous-batching scheduler (openvino_genai.SchedulerConfig); used only by *_CB pipelines."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.kvCachePrecision) || self.kvCachePrecision != 'u4' || "
                    "(has(self.cacheSizeGB) && self.cacheSizeGB > 0)",
                    "message": "kvCachePrecision u4 needs a fixed cacheSizeGB > 0 (openvino-genai 2026.4 corrupts "
                    "memory when a u4 cache grows on demand)",
                }
            ]
        }
    )

    cacheSizeGB: int | None = Field(
        None,
        **flags.bounds("cache_size_gb"),
        description="KV-cache size in GB; 0 lets the runtime pick (from free memory).",
    )
    maxNumSeqs: int | None = Field(
        None, **flags.bounds("max_num_seqs"), description="Maximum number of sequences scheduled at once."
    )
    maxNumBatchedTokens: int | None = Field(
        None, **flags.bounds("max_num_batched_tokens"), description="Maximum number of tokens per scheduler step."
    )
    enablePrefixCaching: bool | None = Field(None, description="Reuse the KV cache of common prompt prefixes.")
    dynamicSplitFuse: bool | None = Field(None, description="Split long prompts across scheduler steps.")
    kvCachePrecision: KVCachePrecision | None = Field(
        None,
        description="KV-cache element precision: AUTO (the plugin's and openvino-genai's choice), u8, u4 (needs "
        "cacheSizeGB), f16, ...; what runs is measured and recorded in status.decisions.kvCachePrecision.",
    )
    cacheEviction: CacheEviction | None = Field(
        None, description="Evict KV cache beyond maxTokens per sequence (long generations in a small cache)."
    )
    sparseAttention: Literal["TRISHAPE", "XATTENTION"] | None = Field(
        None, description="Sparse attention for long prefills (openvino-genai's defaults for its sizes)."
    )

    @model_validator(mode="after")
    def _u4(self) -> SchedulerConfig:
        if self.kvCachePrecision == KVCachePrecision.u4 and not self.cacheSizeGB:
            raise ValueError("kvCachePrecision u4 needs a fixed cacheSizeGB > 0")
        return self


class ResourceRequirements(_Strict):
    """Compute resources of the runtime container (core/v1 ResourceRequirements, requests and limits)."""

    requests: dict[str, Quantity] | None = Field(
        None,
        description="Minimum resources, e.g. {cpu: '2', memory: 4Gi}.",
        json_schema_extra={"additionalProperties": _QUANTITY},
    )
    limits: dict[str, Quantity] | None = Field(
        None,
        description="Maximum resources. For device GPU the operator adds the Intel GPU resource (1) "
        "unless a gpu.intel.com/* limit is given here.",
        json_schema_extra={"additionalProperties": _QUANTITY},
    )


_PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}


class AutoscalingMetric(StrEnum):
    """The runtime metric that drives the replica count (averaged over the runtime pods)."""

    QueueDepth = "QueueDepth"  # ovserve_queue_depth: accepted, not yet scheduled by the pipeline
    RunningRequests = "RunningRequests"  # ovserve_requests_running: being generated now
    KVCacheUsage = "KVCacheUsage"  # ovserve_kv_cache_usage_percent: continuous-batching pipelines only


class Autoscaling(_Strict):
    """Replicas driven by LLM load: a KEDA ScaledObject (Prometheus trigger) that owns spec.replicas."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
                    "message": "autoscaling.minReplicas must be <= autoscaling.maxReplicas",
                },
                {
                    "rule": "!has(self.metric) || self.metric != 'KVCacheUsage' || self.target <= 100.0",
                    "message": "a KVCacheUsage target is a percentage: at most 100",
                },
            ]
        }
    )

    minReplicas: int = Field(
        1,
        ge=0,
        le=1000,
        description="Fewest replicas. 0: scale to zero after idleSeconds without demand; needs spec.routing (the "
        "gateway holds requests while no pod runs, and its held requests bring a replica back; "
        "docs/autoscaling.md).",
    )
    maxReplicas: int = Field(..., ge=1, le=1000, description="Most replicas.")
    metric: AutoscalingMetric = Field(
        AutoscalingMetric.QueueDepth,
        description="QueueDepth (requests waiting per pod), RunningRequests (requests generating per pod) or "
        "KVCacheUsage (KV-cache usage percent per pod; continuous-batching pipelines only).",
    )
    target: float = Field(
        ..., gt=0, description="Target average of the metric per pod; replicas = ceil(sum over pods / target)."
    )
    pollingIntervalSeconds: int = Field(
        15, ge=1, le=3600, description="How often KEDA queries Prometheus (ScaledObject pollingInterval)."
    )
    scaleDownStabilizationSeconds: int = Field(
        300,
        ge=0,
        le=3600,
        description="Cooldown before scaling down: the HPA's scale-down stabilization window.",
    )
    idleSeconds: int = Field(
        300,
        ge=0,
        le=86400,
        description="With minReplicas 0: seconds without demand (no request held, queued or running) before the "
        "last replica goes (KEDA's cooldownPeriod).",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        # the same rules as the CEL ones above, for specs that reach the operator by other paths
        if self.minReplicas > self.maxReplicas:
            raise ValueError("autoscaling.minReplicas must be <= autoscaling.maxReplicas")
        if self.metric == AutoscalingMetric.KVCacheUsage and self.target > 100:
            raise ValueError("a KVCacheUsage target is a percentage: at most 100")
        return self


SCALE_TO_ZERO_NEEDS_ROUTING = (
    "autoscaling.minReplicas 0 needs spec.routing: with no pod, only the gateway can hold a request until KEDA "
    "brings a replica back (a Service would refuse it)"
)

INT_OR_PERCENT_PATTERN = r"^([0-9]+|[0-9]+%)$"
_INT_OR_PERCENT = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": INT_OR_PERCENT_PATTERN,  # strings only: the rule below refuses negative integers
}
IntOrPercent = Annotated[
    Annotated[int, Field(ge=0)] | Annotated[str, StringConstraints(pattern=INT_OR_PERCENT_PATTERN)], "IntOrString"
]


class DisruptionBudget(_Strict):
    """The PodDisruptionBudget the operator owns for the runtime pods (voluntary disruptions: a drain, a node
    upgrade). Default maxUnavailable: the rollout's maxUnavailable when it is above 0, else 1: a drain takes one
    replica at a time, and a single replica is not held (a drain of its node is never blocked for ever)."""

    maxUnavailable: IntOrPercent | None = Field(
        None,
        description="Runtime pods a drain may take at once (count or percent). Default: rollout.maxUnavailable "
        "when above 0, else 1.",
        json_schema_extra=_INT_OR_PERCENT,
    )


class RolloutStrategy(StrEnum):
    RollingUpdate = "RollingUpdate"
    Recreate = "Recreate"


def _zero(v: int | str | None) -> bool:
    return v is not None and str(v).rstrip("%") == "0"


class Rollout(_Strict):
    """How a spec change replaces the runtime pods (the Deployment's strategy). Unset fields take the
    device-aware default: CPU maxSurge 1 / maxUnavailable 0 (a new pod is Ready before an old one goes);
    GPU maxSurge 0 / maxUnavailable 1 (a GPU pool sized to the replicas has no device for a surge pod, which
    would stay Pending forever: one old pod goes first, its device serves the new one)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.maxSurge) || !has(self.maxUnavailable) || "
                    "!(string(self.maxSurge) in ['0', '0%'] && string(self.maxUnavailable) in ['0', '0%'])",
                    "message": "rollout.maxSurge and rollout.maxUnavailable must not both be 0",
                },
                {
                    "rule": "(!has(self.maxSurge) || !string(self.maxSurge).startsWith('-')) && "
                    "(!has(self.maxUnavailable) || !string(self.maxUnavailable).startsWith('-'))",
                    "message": "rollout.maxSurge and rollout.maxUnavailable must not be negative",
                },
                {
                    "rule": "!has(self.strategy) || self.strategy != 'Recreate' || "
                    "(!has(self.maxSurge) && !has(self.maxUnavailable))",
                    "message": "rollout.maxSurge and rollout.maxUnavailable apply to RollingUpdate only",
                },
            ]
        }
    )

    strategy: RolloutStrategy = Field(
        RolloutStrategy.RollingUpdate,
        description="RollingUpdate (bounded by maxSurge / maxUnavailable), or Recreate (every old pod goes "
        "before a new one starts: a pause in service, for devices that cannot hold two models).",
    )
    maxSurge: IntOrPercent | None = Field(
        None,
        description="Pods above spec.replicas during a rollout (count or percent). Default: 1 on CPU, 0 on GPU.",
        json_schema_extra=_INT_OR_PERCENT,
    )
    maxUnavailable: IntOrPercent | None = Field(
        None,
        description="Pods below spec.replicas during a rollout (count or percent). Default: 0 on CPU, 1 on GPU.",
        json_schema_extra=_INT_OR_PERCENT,
    )

    @model_validator(mode="after")
    def _progress(self) -> Rollout:
        # the same rules as the CEL ones above, for specs that reach the operator by other paths
        if _zero(self.maxSurge) and _zero(self.maxUnavailable):
            raise ValueError("rollout.maxSurge and rollout.maxUnavailable must not both be 0")
        if self.strategy == RolloutStrategy.Recreate and (self.maxSurge is not None or self.maxUnavailable is not None):
            raise ValueError("rollout.maxSurge and rollout.maxUnavailable apply to RollingUpdate only")
        return self


class ServingConfig(_Strict):
    """Request handling of the runtime, whatever the pipeline."""

    maxQueuedRequests: int | None = Field(
        None,
        **flags.bounds("max_queued_requests"),
        description="Admission bound per pod: how many requests may wait while scheduler.maxNumSeqs of them "
        "(one for a legacy pipeline) generate; beyond it the runtime answers 429 with Retry-After. "
        "Default: the runtime's (256). 0: no waiting room.",
    )
    streamIntervalMs: float | None = Field(
        None,
        **flags.bounds("stream_interval_ms"),
        description="Streaming: text that comes within this many milliseconds of a stream's last chunk waits and "
        "goes out in one chunk at the end of the interval: fewer writes and client wake-ups when a stream runs "
        "faster than 1000/streamIntervalMs tokens per second (small models), nothing held below that; the first "
        "token is never held. 0: a chunk per engine step. Default: the runtime's (10).",
    )
    toolParser: flags.ToolParser | None = Field(
        None,
        description="How tool calls are read from the model's output. AUTO (the runtime's default) picks the "
        "family the chat template writes: hermes (<tool_call> JSON: Hermes, Qwen2.5, Qwen3), llama3_json or "
        "llama3_pythonic; none when the template renders no tools. none: requests with tools get 400. The "
        "choice is reported in status.",
    )
    reasoningParser: flags.ReasoningParser | None = Field(
        None,
        description="How reasoning is split off the output into reasoning_content. AUTO (the runtime's default) "
        "picks qwen3 (a <think> block) when the chat template writes <think>, deepseek_r1 (the output starts in "
        "the reasoning) when it strips </think> only, else none. none: all output is content.",
    )
    chatTemplateKwargs: dict[str, Any] | None = Field(
        None,
        description="Variables every chat request's template is rendered with, e.g. {enable_thinking: false} "
        "to turn Qwen3's thinking off by default; a request's chat_template_kwargs and reasoning_effort override "
        "them. At most 16 names, 4 KiB of JSON. Recorded in status.decisions.chatTemplateKwargs.",
        json_schema_extra=_PRESERVE,
    )

    @field_validator("chatTemplateKwargs")
    @classmethod
    def _template_kwargs(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        from ovserve_runtime.openai.thinking import KWARG_NAME, MAX_KWARGS, MAX_KWARGS_BYTES

        if len(v) > MAX_KWARGS or len(json.dumps(v)) > MAX_KWARGS_BYTES:
            raise ValueError(f"at most {MAX_KWARGS} names and {MAX_KWARGS_BYTES} bytes of JSON")
        bad = [k for k in v if not KWARG_NAME.match(k)]
        if bad:
            raise ValueError(f"{bad[0][:70]!r} is not a template variable name")
        return v


NAMESPACE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class NetworkPolicyConfig(_Strict):
    """A NetworkPolicy for the runtime pods: ingress to port 8000 only from the peers below and the
    operator (it reads each pod's /v1/status); every other ingress to the pods is denied."""

    enabled: bool = Field(
        True, description="Render the NetworkPolicy (false: none, even when the operator's default is on)."
    )
    allowSameNamespace: bool = Field(True, description="Allow every pod of the LLMServing's own namespace.")
    allowedNamespaces: list[Annotated[str, StringConstraints(pattern=NAMESPACE_NAME_PATTERN, max_length=63)]] = Field(
        default_factory=list,
        max_length=64,
        description="Namespaces (by name) whose pods may connect, e.g. the ingress controller's, Prometheus'.",
    )
    allowedNamespaceLabels: dict[str, str] | None = Field(
        None, description="Also namespaces with these labels (a namespaceSelector's matchLabels), e.g. a team label."
    )


class RoutingFailureMode(StrEnum):
    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class RoutingPicker(_Strict):
    """The endpoint picker the operator runs for the pool (docs/routing.md)."""

    enabled: bool = Field(True, description="Run it (false: none; ours is deleted).")
    image: str | None = Field(
        None,
        min_length=1,
        description="EPP image (GIE v1.5.0's flags and config). Default: the operator setting OVSERVE_PICKER_IMAGE; "
        "another needs the tenant policy's allowed images.",
    )


class Routing(_Strict):
    """Replicas routed per request by load and prompt prefix (Gateway API Inference Extension, docs/routing.md):
    an InferencePool selecting the runtime pods, owned by the LLMServing, for a GIE gateway and its endpoint
    picker; the runtime pods carry the picker's engine-type label (openvino)."""

    enabled: bool = Field(
        True,
        description="Create the InferencePool and label the pods for the picker (false: none; toggling it rolls "
        "the pods, the label being part of their template).",
    )
    failureMode: RoutingFailureMode = Field(
        RoutingFailureMode.FAIL_OPEN,
        description="What the gateway does when the endpoint picker does not answer: FailOpen routes to any pod of "
        "the pool, FailClose refuses the request.",
    )
    picker: RoutingPicker | None = Field(
        None,
        description="Run the pool's endpoint picker (GIE's EPP, `<name>-epp`) with the operator: a Deployment, "
        "Service, ConfigMap and least-privilege RBAC. Unset: a platform's own picker serves the pool. Needs the "
        "operator setting OVSERVE_ROUTING_PICKER (chart routing.picker).",
    )


class CompileCacheMode(StrEnum):
    OFF = "off"
    NODE = "node"  # a directory of the node under the operator's root (OVSERVE_CACHE_HOST_ROOT)
    PVC = "pvc"  # a PersistentVolumeClaim of the serving's namespace


class CompileCache(_Strict):
    """OpenVINO's compiled-model cache (docs/startup.md): a pod reuses what an earlier pod compiled for the same
    OpenVINO and openvino-genai versions, device, model and compile properties."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode == 'pvc' ? has(self.claimName) : !has(self.claimName)",
                    "message": "cache.claimName is set exactly when cache.mode is pvc",
                }
            ]
        },
    )

    mode: CompileCacheMode = Field(
        CompileCacheMode.OFF,
        description="off; node: a directory of the node under the operator's cache root (shared by the pods of "
        "the namespace on that node; tenant policy: OVSERVE_ALLOW_HOSTPATH); pvc: the claim `claimName`.",
    )
    claimName: str | None = Field(None, min_length=1, description="mode pvc: the PersistentVolumeClaim.")
    maxSizeGB: float | None = Field(
        None,
        gt=0,
        **flags.bounds("cache_max_gb"),
        description="Bound of the cache directory: least-recently-used entries are removed after a start. "
        "Default: the runtime's (--cache-max-gb).",
    )

    @model_validator(mode="after")
    def _claim(self) -> CompileCache:
        if (self.mode == CompileCacheMode.PVC) != (self.claimName is not None):
            raise ValueError("cache.claimName is set exactly when cache.mode is pvc")
        return self


class Tracing(_Strict):
    """OpenTelemetry traces of the runtime's requests (docs/observability.md): a span per request with its
    prepare, queue and generate steps, continuing a client's or gateway's W3C traceparent; never prompt or
    completion text."""

    endpoint: str = Field(
        ...,
        pattern=flags.OTLP_URL_PATTERN,
        max_length=2048,
        description="The OTLP/HTTP collector the runtime pods send spans to, e.g. "
        "http://jaeger-collector.observability:4318 (posted to <endpoint>/v1/traces when it names no path).",
    )
    sampleRatio: float | None = Field(
        None,
        **flags.bounds("trace_sample_ratio"),
        description="The share of requests without a sampled traceparent that are traced (a caller's sampling "
        "decision is always followed). Default: the runtime's (1: every request).",
    )


class Observability(_Strict):
    """What the runtime pods report beyond their metrics."""

    tracing: Tracing | None = Field(None, description="OpenTelemetry tracing; unset: off.")


class EmbeddingsConfig(_Strict):
    """How an embeddings serving computes its vectors. Unset fields: the model's sentence-transformers config
    (modules.json, its Pooling module), else openvino-genai's defaults; status.embeddings says what resolved."""

    pooling: Pooling | None = Field(None, description="CLS, MEAN or LAST_TOKEN.")
    normalize: bool | None = Field(None, description="L2-normalize the embeddings.")
    matryoshka: bool | None = Field(
        None,
        description="The model was trained for truncation (Matryoshka): a request's `dimensions` below the model's "
        "size keeps the first dimensions and renormalizes. Off: other sizes are refused (400).",
    )
    maxBatch: int | None = Field(
        None,
        **flags.bounds("embeddings_max_batch"),
        description="Most texts in one pipeline call: concurrent requests are batched up to this (default 64).",
    )


class RerankConfig(_Strict):
    """Request limits of a rerank serving."""

    maxDocuments: int | None = Field(
        None, **flags.bounds("rerank_max_documents"), description="Documents per request (default 1000)."
    )


_TASKS_WITHOUT_GENERATION = "['embeddings', 'rerank', 'transcription']"


_SPEC_RULES = [
    {
        "rule": "!has(self.speculative) || self.pipelineType == 'AUTO' || self.pipelineType == 'LM_CB'",
        "message": "speculative decoding runs on the continuous-batching text pipeline: pipelineType AUTO or LM_CB",
    },
    {
        "rule": "!has(self.speculative) || !has(self.task) || self.task == 'AUTO' || self.task == 'text-generation'",
        "message": "speculative decoding applies to text generation only",
    },
]


class LLMServingSpec(_Strict):
    """Desired state of an LLMServing: a model served by the ovserve runtime (OpenVINO GenAI)."""

    model_config = ConfigDict(
        extra="forbid",
        use_enum_values=False,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!has(self.task) || !(self.task in {_TASKS_WITHOUT_GENERATION}) || "
                    "!has(self.pipelineType) || self.pipelineType == 'AUTO'",
                    "message": "pipelineType applies to text generation only: leave it AUTO with task embeddings, "
                    "rerank or transcription",
                },
                {
                    "rule": f"!has(self.task) || !(self.task in {_TASKS_WITHOUT_GENERATION}) || !has(self.scheduler)",
                    "message": "scheduler configures the continuous-batching pipeline: text generation only",
                },
                {
                    "rule": "!has(self.embeddings) || !has(self.task) || self.task in ['AUTO', 'embeddings']",
                    "message": "embeddings applies to task embeddings (or AUTO)",
                },
                {
                    "rule": "!has(self.rerank) || !has(self.task) || self.task in ['AUTO', 'rerank']",
                    "message": "rerank applies to task rerank (or AUTO)",
                },
                {
                    "rule": f"!has(self.task) || !(self.task in {_TASKS_WITHOUT_GENERATION}) || "
                    "!has(self.autoscaling) || !has(self.autoscaling.metric) || "
                    "self.autoscaling.metric != 'KVCacheUsage'",
                    "message": "KVCacheUsage is a text-generation metric: autoscale embeddings, rerank and "
                    "transcription on "
                    "QueueDepth or RunningRequests",
                },
                {
                    "rule": "!has(self.autoscaling) || !has(self.autoscaling.minReplicas) || "
                    "self.autoscaling.minReplicas > 0 || "
                    "(has(self.routing) && (!has(self.routing.enabled) || self.routing.enabled))",
                    "message": SCALE_TO_ZERO_NEEDS_ROUTING,
                },
                *_SPEC_RULES,
            ]
        },
    )

    model: ModelSource = Field(..., description="The model to serve.")
    pipelineType: PipelineType = Field(
        PipelineType.AUTO,
        description="Pipeline to run, as in OpenVINO Model Server. AUTO: continuous batching (LM_CB/VLM_CB) "
        "when the model supports PagedAttention, else the legacy pipeline (LM/VLM) with status.pipeline."
        "fallback=true. LM_CB/VLM_CB pinned: never downgraded; the serving fails instead. LM/VLM: legacy. "
        "Text generation only: with task embeddings, rerank or transcription it must stay AUTO (their own "
        "pipelines run).",
    )
    device: Device = Field(Device.CPU, description="CPU, or GPU (Intel GPU through its device plugin).")
    replicas: int = Field(
        1,
        ge=0,
        le=1000,
        description="Number of runtime pods (scale subresource). With autoscaling, KEDA's HPA sets it.",
    )
    autoscaling: Autoscaling | None = Field(
        None, description="Scale replicas on LLM load with KEDA and Prometheus (both installed separately)."
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="Resources of the runtime container. Requests left unset get the operator's defaults "
        "(status.resourceDefaults says which and why; docs/operator.md).",
    )
    nodeSelector: dict[str, str] | None = Field(
        None, description="Node labels the runtime pods must match (added to the GPU node selector)."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        None,
        description="core/v1 Tolerations of the runtime pods.",
        json_schema_extra={"items": {"type": "object", **_PRESERVE}},
    )
    affinity: dict[str, Any] | None = Field(
        None, description="core/v1 Affinity of the runtime pods.", json_schema_extra=_PRESERVE
    )
    topologySpreadConstraints: list[dict[str, Any]] | None = Field(
        None,
        description="core/v1 TopologySpreadConstraints of the runtime pods, as written. Unset: kube-scheduler's "
        "default spread of a ReplicaSet's pods (a preference over nodes and zones).",
        json_schema_extra={"items": {"type": "object", **_PRESERVE}},
    )
    disruptionBudget: DisruptionBudget | None = Field(
        None,
        description="The runtime pods' PodDisruptionBudget (rendered with more than one replica, now or by "
        "autoscaling). Default: one pod at a time.",
    )
    image: str | None = Field(None, min_length=1, description="Runtime image override (default: operator setting).")
    scheduler: SchedulerConfig | None = Field(None, description="Continuous-batching scheduler settings.")
    serving: ServingConfig | None = Field(None, description="Request handling: admission bound.")
    networkPolicy: NetworkPolicyConfig | None = Field(
        None,
        description="A NetworkPolicy limiting who may reach the API (port 8000). Default: the operator setting "
        "OVSERVE_NETWORK_POLICY_DEFAULT (chart networkPolicy.default); needs OVSERVE_NETWORK_POLICIES.",
    )
    rollout: Rollout | None = Field(
        None,
        description="How spec changes replace the runtime pods. Default: device-aware (CPU surge 1, GPU "
        "unavailable 1).",
    )
    task: Task = Field(
        Task.AUTO,
        description="What the serving does. AUTO: read from the model (a Whisper export: transcription, OpenAI's "
        "/v1/audio API; an encoder without LM head: embeddings; a one-label sequence classifier: rerank; else "
        "text-generation). A task the model is not fails with "
        "TaskMismatch. pipelineType and scheduler apply to text-generation only.",
    )
    embeddings: EmbeddingsConfig | None = Field(
        None, description="Pooling, normalization and batching of an embeddings serving (/v3/embeddings)."
    )
    rerank: RerankConfig | None = Field(None, description="Limits of a rerank serving (/v3/rerank).")
    routing: Routing | None = Field(
        None,
        description="An InferencePool of the runtime pods for a Gateway API Inference Extension gateway (routing "
        "by load and prompt prefix; docs/routing.md). Needs the operator setting OVSERVE_ROUTING (chart "
        "routing.enabled) and the InferencePool CRD; status.routing says what exists.",
    )

    @model_validator(mode="after")
    def _task_fields(self) -> LLMServingSpec:
        # the CEL rules above, for specs that reach the operator by other paths
        other = self.task in (Task.EMBEDDINGS, Task.RERANK, Task.TRANSCRIPTION)
        if other and self.pipelineType != PipelineType.AUTO:
            raise ValueError(
                "pipelineType applies to text generation only: leave it AUTO with task embeddings, rerank or "
                "transcription"
            )
        if other and self.scheduler is not None:
            raise ValueError("scheduler configures the continuous-batching pipeline: text generation only")
        if self.embeddings is not None and self.task not in (Task.AUTO, Task.EMBEDDINGS):
            raise ValueError("embeddings applies to task embeddings (or AUTO)")
        if self.rerank is not None and self.task not in (Task.AUTO, Task.RERANK):
            raise ValueError("rerank applies to task rerank (or AUTO)")
        if other and self.autoscaling is not None and self.autoscaling.metric == AutoscalingMetric.KVCacheUsage:
            raise ValueError(
                "KVCacheUsage is a text-generation metric: autoscale embeddings, rerank and transcription on QueueDepth"
            )
        if self.scales_to_zero and not (self.routing is not None and self.routing.enabled):
            raise ValueError(SCALE_TO_ZERO_NEEDS_ROUTING)
        return self

    @property
    def scales_to_zero(self) -> bool:
        """autoscaling.minReplicas 0: KEDA takes the last replica away when idle."""
        return self.autoscaling is not None and self.autoscaling.minReplicas == 0

    speculative: Speculative | None = Field(
        None, description="Speculative decoding: a draft model or prompt lookup (LM_CB only; docs/operator.md)."
    )
    inferencePrecision: Literal["AUTO", "f32", "bf16", "f16"] | None = Field(
        None,
        description="INFERENCE_PRECISION_HINT of the model (and of a draft): AUTO (text generation on a CPU: the "
        "value measured best for its instruction set where measured, else the plugin's: bf16 on a CPU with "
        "AMX/AVX512-BF16, f16 on a GPU), f32, bf16, f16; status.decisions.inferencePrecision says what runs and "
        "why. Greedy output with speculation equals the output without it token for token in f32.",
    )
    dynamicQuantizationGroupSize: int | None = Field(
        None,
        ge=0,
        le=1 << 20,
        description="CPU: DYNAMIC_QUANTIZATION_GROUP_SIZE, activations quantized on the fly in groups of this size "
        "for int8/int4 weights (0 = off). Unset: for text generation the value measured best for the CPU's "
        "instruction set where measured, else the plugin's; status.decisions.dynamicQuantization says what runs.",
    )

    cache: CompileCache | None = Field(
        None,
        description="OpenVINO's compiled-model cache: off (default), node or pvc; status.startup says whether a "
        "pod's start hit it.",
    )
    observability: Observability | None = Field(
        None, description="Tracing of the runtime's requests (OpenTelemetry, OTLP/HTTP); metrics are always on."
    )

    @model_validator(mode="after")
    def _speculative_pipeline(self) -> LLMServingSpec:
        if self.speculative is not None and self.pipelineType not in (PipelineType.AUTO, PipelineType.LM_CB):
            raise ValueError(_SPEC_RULES[0]["message"])
        if self.speculative is not None and self.task not in (Task.AUTO, Task.TEXT_GENERATION):
            raise ValueError(_SPEC_RULES[1]["message"])
        return self


# ------------------------------------------------------------------------------------------- status


class Condition(BaseModel):
    """metav1.Condition."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(..., max_length=316, description="Condition type: Ready, PipelineResolved or Fallback.")
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    observedGeneration: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )
    lastTransitionTime: str = Field(
        ..., description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    reason: str = Field(..., min_length=1, max_length=1024, pattern=REASON_PATTERN, description="CamelCase reason.")
    message: str = Field("", max_length=32768, description="Human-readable details.")


class PipelineStatus(BaseModel):
    """The pipeline the runtime pods actually run, as they report it."""

    model_config = ConfigDict(extra="ignore")

    requested: PipelineType = Field(PipelineType.AUTO, description="spec.pipelineType.")
    resolved: str | None = Field(
        None,
        description="LM, LM_CB, VLM or VLM_CB as reported by the runtime; several comma-separated values "
        "when pods disagree (e.g. mid-rollout); empty until a pod has resolved.",
    )
    continuousBatching: bool = Field(False, description="True when a continuous-batching pipeline runs.")
    fallback: bool = Field(False, description="True when AUTO fell back to the legacy pipeline.")
    fallbackReason: str | None = Field(
        None, description="The reason of the fallback (e.g. PagedAttentionNotSupported); empty when none."
    )
    reason: str = Field("Loading", description="Why the pipeline is what it is (or why it failed).")
    message: str = Field("", description="Details, e.g. the original PagedAttention error.")


class SpeculativeStatus(BaseModel):
    """Speculative decoding as the current spec's pods run it."""

    model_config = ConfigDict(extra="ignore")

    requested: str = Field("none", description="draft or promptLookup (spec.speculative).")
    resolved: str | None = Field(
        None, description="What runs: draft, promptLookup or none; comma-separated when pods disagree."
    )
    fallback: bool = Field(False, description="True when requested but serving without speculation.")
    reason: str = Field("Loading", description="Speculating, or why not (e.g. DraftModelIncompatible).")
    message: str = Field("", description="Details, e.g. how the draft's tokenizer differs.")
    display: str = Field("", description="For the SPECULATIVE column: what runs, and the reason when it falls back.")


class TaskStatus(BaseModel):
    """What the serving does, as the current spec's pods resolved it."""

    model_config = ConfigDict(extra="ignore")

    requested: Task = Field(Task.AUTO, description="spec.task.")
    resolved: str | None = Field(
        None, description="text-generation, embeddings or rerank as the runtime resolved it; empty until then."
    )
    source: str = Field("", description="How it was decided, e.g. 'model: output last_hidden_state without LM head'.")


class PreviousPods(BaseModel):
    """Pods of an EARLIER spec that still exist (a rollout that has not finished, or cannot). Reported
    apart: status.pipeline and the conditions describe the current spec's pods only."""

    model_config = ConfigDict(extra="ignore")

    replicas: int = Field(0, ge=0, description="Pods of earlier specs that exist (not terminating).")
    readyReplicas: int = Field(0, ge=0, description="Of those, Ready with a ready runtime: they still get traffic.")
    resolved: str | None = Field(None, description="Pipeline(s) they report, comma-separated; empty when none.")
    fallbackReason: str | None = Field(None, description="Their fallback reason, if they fell back.")
    summary: str = Field("", description="One line for the PREVIOUS column, e.g. '1/1 serving LM (fallback)'.")


class AutoscalingStatus(BaseModel):
    """What the autoscaler wants and did, read back from KEDA's ScaledObject and its HPA."""

    model_config = ConfigDict(extra="ignore")

    scaledObject: str | None = Field(None, description="Name of the KEDA ScaledObject; empty when none exists.")
    minReplicas: int = Field(1, ge=0, description="spec.autoscaling.minReplicas.")
    maxReplicas: int = Field(1, ge=0, description="spec.autoscaling.maxReplicas.")
    desiredReplicas: int | None = Field(None, ge=0, description="Replicas the HPA last computed.")
    currentReplicas: int | None = Field(None, ge=0, description="Replicas the HPA last observed.")
    lastScaleTime: str | None = Field(None, description="When the HPA last changed the replica count (RFC 3339).")
    reason: str = Field(
        "Pending", description="The autoscaler's last reason (e.g. SucceededRescale, KEDANotInstalled)."
    )
    message: str = Field("", description="Details of the reason.")
    display: str = Field("", description="minReplicas-maxReplicas and the reason, for the AUTOSCALING column.")


class RoutingStatus(BaseModel):
    """The InferencePool of spec.routing as it is (docs/routing.md)."""

    model_config = ConfigDict(extra="ignore")

    pool: str | None = Field(None, description="Name of the InferencePool; empty while none of ours exists.")
    endpoints: int = Field(0, ge=0, description="Ready runtime pods the pool's selector matches.")
    picker: str | None = Field(None, description="The endpoint picker's Deployment, when the operator runs it.")
    pickerReady: bool | None = Field(
        None, description="Whether that Deployment is Available; absent when the operator runs no picker."
    )
    reason: str = Field(
        "PoolPending",
        description="PoolReady, PoolPending, PoolRefused, PickerNotReady, RoutingUnavailable or PolicyDenied.",
    )
    message: str = Field("", description="Details of the reason.")
    display: str = Field("", description="The pool's endpoints, or the reason, for the ROUTING column.")


class ResourceDefaultsStatus(BaseModel):
    """Requests the operator added because spec.resources leaves them unset (docs/operator.md)."""

    model_config = ConfigDict(extra="ignore")

    cpu: str | None = Field(None, description="The cpu request added; empty when the spec sets cpu.")
    memory: str | None = Field(None, description="The memory request added; empty when the spec sets memory.")
    message: str = Field("", description="How they were derived, and the settings that set them.")


class RolloutStatus(BaseModel):
    """An operator change of the pod template under the rollout budget (OVSERVE_ROLLOUT_BUDGET)."""

    model_config = ConfigDict(extra="ignore")

    held: bool = Field(False, description="True: waiting for a rollout slot; the pods stay on their template.")
    message: str = Field("", description="Why, and how many slots are in use.")


class StartupStatus(BaseModel):
    """How the most recently started pod of the current spec started (its runtime report's `startup`)."""

    model_config = ConfigDict(extra="ignore")

    pod: str = Field("", description="The pod whose start this is.")
    weightsReadSeconds: float | None = Field(None, description="Reading the model's weight files.")
    compileSeconds: float | None = Field(
        None, description="Constructing the pipeline: compiling, or loading the compiled blobs on a cache hit."
    )
    firstTokenSeconds: float | None = Field(None, description="The first one-token generation after it.")
    totalSeconds: float | None = Field(None, description="From the runtime process's start to ready.")
    cache: str = Field("off", description="off, hit, miss or bypassed (the cache could not be used; message).")
    previousVersions: str | None = Field(
        None, description="A miss with an entry of other OpenVINO / openvino-genai versions: a version change."
    )
    message: str = Field("", description="Why the cache was bypassed or an entry not used.")
    cacheHits: str = Field("", description="Current pods whose start hit the cache, of those that report one (k/n).")


class LLMServingStatus(BaseModel):
    """Observed state, recomputed from the runtime pods and their reports (never latched)."""

    model_config = ConfigDict(extra="ignore")

    observedGeneration: int | None = Field(None, description="metadata.generation this status reflects.")
    phase: Phase = Field(
        Phase.PENDING, description="Pending, Loading, Ready, Degraded or Failed (display; see conditions)."
    )
    pipeline: PipelineStatus = Field(default_factory=PipelineStatus, description="Requested and resolved pipeline.")
    replicas: int = Field(0, ge=0, description="Runtime pods that exist (not terminating).")
    readyReplicas: int = Field(0, ge=0, description="Up-to-date pods whose runtime reports ready.")
    readyDisplay: str = Field("0/0", description="readyReplicas/spec.replicas, for the READY column.")
    selector: str = Field("", description="Label selector of the runtime pods (scale subresource).")
    endpoint: str | None = Field(None, description="Cluster URL of the OpenAI-compatible API (…/v3).")
    previous: PreviousPods | None = Field(
        None, description="Pods of an earlier spec still running (their pipeline and count); absent when none."
    )
    computedAt: str | None = Field(
        None,
        description="When the operator computed the status as it reads now, i.e. when it last changed (RFC 3339). "
        "The status is recomputed every few seconds but written only when it changes, so an old value means "
        "nothing changed, not that no operator runs: the operator's Lease (renewTime) tells that.",
        json_schema_extra={"format": "date-time"},
    )
    autoscaling: AutoscalingStatus | None = Field(None, description="Autoscaler state when spec.autoscaling is set.")
    routing: RoutingStatus | None = Field(None, description="The InferencePool when spec.routing is on.")
    rollout: RolloutStatus | None = Field(
        None,
        description="Present while an operator upgrade's change of the pod template waits for, or holds, a "
        "rollout slot; absent otherwise.",
    )
    resourceDefaults: ResourceDefaultsStatus | None = Field(
        None, description="Requests of the runtime container the operator defaulted; absent when the spec sets all."
    )
    speculative: SpeculativeStatus | None = Field(
        None, description="Speculative decoding as requested and as it runs; absent when spec.speculative is not set."
    )
    task: TaskStatus | None = Field(None, description="The task requested and the one the pods resolved.")
    embeddings: EmbeddingsReport | None = Field(
        None, description="Task embeddings: pooling and normalization as resolved (and where from), the model's size."
    )
    capabilities: Capabilities | None = Field(
        None,
        description="What the served model and pipeline answer beyond plain text (structured output, images, tool "
        "and reasoning parsers, max context), as the current spec's pods report it; absent until one is ready.",
    )
    decisions: Decisions | None = Field(
        None,
        description="Every setting the runtime, openvino-genai or OpenVINO resolved (KV-cache and inference "
        "precision, threads, streams, KV-cache size and blocks, prefix caching, split-fuse, max context, device, "
        "speculative mode, versions), each asked for (source requested) or chosen (automatic), as the current "
        "spec's pods report it (the last record while none does); absent until one is ready.",
    )
    decisionsDiffer: str | None = Field(
        None, description="Pods of the current spec that resolved settings differently, and how; absent when none."
    )
    startup: StartupStatus | None = Field(
        None, description="Start phases and the compiled-model cache of the newest start; absent until one reports."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, PipelineResolved, Fallback, and Autoscaling when set (metav1.Condition).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class LLMServing(BaseModel):
    """An LLM served by the ovserve runtime; reports which pipeline really runs."""

    model_config = ConfigDict(extra="ignore")

    apiVersion: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMServingSpec
    status: LLMServingStatus | None = None


def parse_spec(spec: dict[str, Any]) -> LLMServingSpec:
    """Validate a spec dict (as the cached snapshot holds it) into the typed model; raises pydantic.ValidationError."""
    return LLMServingSpec.model_validate(dict(spec))


__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "REASON_PATTERN",
    "VERSION",
    "Autoscaling",
    "AutoscalingMetric",
    "AutoscalingStatus",
    "Condition",
    "ConditionStatus",
    "Device",
    "HostPathSource",
    "HuggingFaceSource",
    "KVCachePrecision",
    "LLMServing",
    "LLMServingSpec",
    "LLMServingStatus",
    "ModelSource",
    "NetworkPolicyConfig",
    "PVCSource",
    "Phase",
    "PipelineStatus",
    "PipelineType",
    "PreviousPods",
    "ResourceDefaultsStatus",
    "ResourceRequirements",
    "Rollout",
    "RolloutStatus",
    "RolloutStrategy",
    "Routing",
    "RoutingFailureMode",
    "RoutingPicker",
    "RoutingStatus",
    "SchedulerConfig",
    "SecretKeySelector",
    "parse_spec",
]
