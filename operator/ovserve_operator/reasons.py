"""Every condition and Event reason the operator writes, each with its phase and a one-line doc.

The one registry of reasons: the status rules (rules.py) use these constants, never string literals;
`phase_of` derives status.phase from the Ready reason; docs/operator.md's reason table is generated
from this module (`python -m ovserve_operator.reasons --write docs/operator.md`) and a unit test fails
when the two drift. Runtime reasons (ovserve_runtime.report.Reason) are registered here too, so that a
reason the runtime reports has a documented phase.
"""

from __future__ import annotations

import dataclasses
import sys

from ovserve_runtime import docblock
from ovserve_runtime.report import Reason as RuntimeReason
from ovserve_runtime.report import SpeculativeReason

from .spec import Phase

# Ready=False reasons are sorted into phases; the others (Ready=True, PipelineResolved, Fallback, Events)
# carry phase None.
PENDING, LOADING, DEGRADED, FAILED = Phase.PENDING, Phase.LOADING, Phase.DEGRADED, Phase.FAILED


@dataclasses.dataclass(frozen=True)
class ReasonDoc:
    name: str
    used_in: str  # where it appears: conditions and/or Event
    phase: Phase | None  # status.phase when it is the Ready reason with status False
    doc: str


REGISTRY: dict[str, ReasonDoc] = {}


def _r(name: str, used_in: str, phase: Phase | None, doc: str) -> str:
    assert name not in REGISTRY, name
    REGISTRY[name] = ReasonDoc(name, used_in, phase, doc)
    return name


# ------------------------------------------------------------------------- Ready True
ALL_REPLICAS_READY = _r(
    "AllReplicasReady",
    "Ready=True",
    None,
    "every desired replica of the current spec is Ready and its runtime reports ready",
)

# ------------------------------------------------------------------------- operator: spec and children
INVALID_SPEC = _r(
    "InvalidSpec", "Ready", FAILED, "the spec is refused by the operator's typed model (nothing rendered)"
)
APPLY_FAILED = _r(
    "ApplyFailed",
    "Ready",
    FAILED,
    "the apiserver refused a child (4xx: invalid field, webhook, quota): its message, at that generation",
)
POLICY_DENIED = _r(
    "PolicyDenied",
    "Ready",
    FAILED,
    "the operator's tenant policy denies part of the spec (hostPath, image, scheduling): the setting is named",
)
NAME_CONFLICT = _r(
    "NameConflict",
    "Ready",
    FAILED,
    "an object of a child's name exists and is not controlled by this LLMServing: left alone, named",
)
CHILD_MISSING = _r(
    "ChildMissing",
    "Ready",
    PENDING,
    "the Service or Deployment of the LLMServing is gone (deleted by hand): named; the operator re-creates it "
    "within seconds (status.endpoint is absent while the Service is)",
)
NAMESPACE_UNREADABLE = _r(
    "NamespaceUnreadable",
    "Ready=Unknown, Event",
    DEGRADED,
    "the operator's LIST or watch of this namespace is refused (401/403, e.g. its RoleBinding deleted): what runs "
    "is unknown, the rest of the last status is kept; the apiserver's message; the other namespaces go on (a "
    "Warning Event on the operator's Lease too)",
)
NAMESPACE_READABLE_EVENT = _r(
    "NamespaceReadable", "Event", None, "Normal, on the operator's Lease: a refused namespace is read again"
)
FAILED_CREATE = _r(
    "FailedCreate", "Ready", FAILED, "the Deployment cannot create pods (admission, quota): the Deployment's message"
)
SCALED_TO_ZERO = _r(
    "ScaledToZero",
    "Ready",
    Phase.SCALED_TO_ZERO,
    "no replica by intent: spec.replicas is 0, or KEDA took the last one away after autoscaling.idleSeconds without "
    "demand (minReplicas 0); the gateway holds the next request and KEDA brings a replica back for it",
)
ACTIVATING = _r(
    "Activating",
    "Ready",
    Phase.ACTIVATING,
    "demand reached a serving scaled to zero: KEDA brought a replica back and it is starting; the gateway holds the "
    "requests until it is Ready (a failure of the starting pod is named instead)",
)
PODS_NOT_CREATED = _r("PodsNotCreated", "Ready", PENDING, "no pod of the current spec exists yet")
UNSCHEDULABLE = _r("Unschedulable", "Ready", PENDING, "the scheduler places no pod: its message (e.g. no GPU node)")

# ------------------------------------------------------------------------- model source
MODEL_NOT_FOUND = _r(
    RuntimeReason.MODEL_NOT_FOUND.value,
    "Ready, PipelineResolved",
    FAILED,
    "the model is missing: hostPath or claim not found (kubelet, scheduler) or no IR at the path (runtime)",
)
VOLUME_MOUNT_FAILED = _r(
    "VolumeMountFailed",
    "Ready",
    FAILED,
    "the kubelet cannot mount the model volume: its FailedMount message, once its retry failed alike (a one-off "
    'refusal the retry gets past never counts, nor the Node authorizer\'s lag "no relationship found between node")',
)
MODEL_DOWNLOADING = _r("ModelDownloading", "Ready", PENDING, "the Hugging Face init container is downloading the model")
MODEL_DOWNLOAD_FAILED = _r(
    "ModelDownloadFailed", "Ready", FAILED, "the Hugging Face init container failed and is backing off: its message"
)

# ------------------------------------------------------------------------- kubelet waiting reasons (passed through)
CONTAINER_CREATING = _r("ContainerCreating", "Ready", PENDING, "kubelet: the container is being created")
POD_INITIALIZING = _r("PodInitializing", "Ready", PENDING, "kubelet: init containers have not finished")
ERR_IMAGE_PULL = _r("ErrImagePull", "Ready", PENDING, "kubelet: the image pull failed (retried)")
IMAGE_PULL_BACK_OFF = _r("ImagePullBackOff", "Ready", PENDING, "kubelet: backing off pulling the image")
CRASH_LOOP_BACK_OFF = _r("CrashLoopBackOff", "Ready", FAILED, "kubelet: the container keeps exiting")
CREATE_CONTAINER_CONFIG_ERROR = _r(
    "CreateContainerConfigError", "Ready", FAILED, "kubelet: e.g. a Secret or key the pod needs does not exist"
)
CREATE_CONTAINER_ERROR = _r("CreateContainerError", "Ready", FAILED, "kubelet: the runtime cannot create the container")
INVALID_IMAGE_NAME = _r("InvalidImageName", "Ready", FAILED, "kubelet: the image reference does not parse")
ERR_IMAGE_NEVER_PULL = _r("ErrImageNeverPull", "Ready", FAILED, "kubelet: pull policy Never and no such image")
RUN_CONTAINER_ERROR = _r("RunContainerError", "Ready", FAILED, "kubelet: the container cannot start")

KUBELET_WAITING = {
    CONTAINER_CREATING,
    POD_INITIALIZING,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    CRASH_LOOP_BACK_OFF,
    CREATE_CONTAINER_CONFIG_ERROR,
    CREATE_CONTAINER_ERROR,
    INVALID_IMAGE_NAME,
    ERR_IMAGE_NEVER_PULL,
    RUN_CONTAINER_ERROR,
}

# ------------------------------------------------------------------------- runtime (reported by the pods)
LOADING_REASON = _r(
    RuntimeReason.LOADING.value, "Ready, PipelineResolved, Fallback", LOADING, "pods of the current spec are loading"
)
PAGED_ATTENTION_NOT_SUPPORTED = _r(
    RuntimeReason.PAGED_ATTENTION_NOT_SUPPORTED.value,
    "Ready, PipelineResolved, Fallback, Event",
    FAILED,
    "no PagedAttention in the model: AUTO fell back (Fallback=True), a pinned *_CB is refused (Ready=False)",
)
PIPELINE_TYPE_MISMATCH = _r(
    RuntimeReason.PIPELINE_TYPE_MISMATCH.value,
    "Ready, PipelineResolved",
    FAILED,
    "the pipelineType does not match the model directory (VLM on a text model, LM on a VLM)",
)
MODEL_LOAD_FAILED = _r(
    RuntimeReason.MODEL_LOAD_FAILED.value, "Ready, PipelineResolved", FAILED, "the runtime could not load the model"
)
ENGINE_FAILED = _r(
    RuntimeReason.ENGINE_FAILED.value,
    "Ready, PipelineResolved",
    FAILED,
    "the pipeline failed while serving (the model had loaded): the engine's error; the container restarts",
)
OOM_KILLED = _r(
    "OOMKilled",
    "Ready",
    FAILED,
    "the kernel killed the runtime for memory (now, or last time while it is not running again): the memory "
    "limit is named",
)
DEGRADED_REASON = _r(
    "Degraded",
    "Ready",
    DEGRADED,
    "some pods of the current spec serve, others fail (crash loop, OOMKilled, a failed report): counts and the "
    "first failure",
)
NODE_NOT_READY = _r(
    "NodeNotReady",
    "Ready",
    PENDING,
    "the pods of the current spec sit on a node that is NotReady, unreachable (its kubelet stopped reporting) or "
    "gone: the node, its condition and since when are named; Kubernetes evicts the pods after their toleration "
    "and the reason clears when replicas are Ready again (with some replicas serving elsewhere: Degraded, naming it)",
)
POD_RESCHEDULED = _r(
    "PodRescheduled",
    "Ready",
    LOADING,
    "no replica serves: pods were evicted by a node fault or a drain (named) and their replacements are starting "
    "on other nodes (with some replicas serving: Degraded, naming the eviction)",
)
DEVICE_UNAVAILABLE = _r(
    RuntimeReason.DEVICE_UNAVAILABLE.value, "Ready, PipelineResolved", FAILED, "OpenVINO sees no such device in the pod"
)
TASK_MISMATCH = _r(
    RuntimeReason.TASK_MISMATCH.value,
    "Ready, PipelineResolved",
    FAILED,
    "spec.task does not match the model (e.g. rerank on an LLM), or a pinned pipelineType with embeddings/rerank",
)
TASK_NOT_SUPPORTED = _r(
    RuntimeReason.TASK_NOT_SUPPORTED.value,
    "Ready, PipelineResolved",
    FAILED,
    "AUTO found a model of no served task (e.g. a sequence classifier with several labels)",
)
TASK_PIPELINE = _r(
    RuntimeReason.TASK_PIPELINE.value,
    "PipelineResolved, Fallback",
    None,
    "task embeddings or rerank: its own pipeline (TextEmbedding, TextRerank) runs; pipelineType does not apply",
)
RUNTIME_FAILED = _r("RuntimeFailed", "Ready", FAILED, "the runtime reported failure without a more precise reason")
CONTINUOUS_BATCHING = _r(
    RuntimeReason.CONTINUOUS_BATCHING.value,
    "PipelineResolved, Fallback, Event",
    None,
    "a continuous-batching pipeline (LM_CB, VLM_CB) runs",
)
LEGACY_REQUESTED = _r(
    RuntimeReason.LEGACY_REQUESTED.value,
    "PipelineResolved, Fallback",
    None,
    "LM / VLM pinned: the legacy pipeline runs",
)

# ------------------------------------------------------------------------- operator: pods and readback
PODS_DISAGREE = _r(
    "PodsDisagree",
    "Ready, PipelineResolved, Fallback, Event",
    LOADING,
    "pods of the current spec resolved different pipelines",
)
READBACK_FAILED = _r(
    "ReadbackFailed",
    "Ready",
    LOADING,
    "a Ready pod's GET /v1/status kept failing beyond the grace period: what failed (since when: the "
    "condition's lastTransitionTime)",
)
PINNED_PIPELINE = _r(
    "PinnedPipeline", "Fallback", None, "a pinned LM_CB / VLM_CB never falls back (Fallback stays False)"
)

# ------------------------------------------------------------------------- speculative decoding
SPECULATIVE_UNAVAILABLE = _r(
    RuntimeReason.SPECULATIVE_UNAVAILABLE.value,
    "Ready, PipelineResolved",
    FAILED,
    "spec.speculative.required and speculative decoding cannot run: the runtime refused (the message names why)",
)
SPECULATING = _r(
    SpeculativeReason.SPECULATING.value, "SpeculativeDecoding=True", None, "the requested speculative mode runs"
)
DRAFT_MODEL_NOT_FOUND = _r(
    SpeculativeReason.DRAFT_MODEL_NOT_FOUND.value,
    "SpeculativeDecoding=False",
    None,
    "the draft model directory is missing or holds no model: serving without speculation",
)
DRAFT_MODEL_INCOMPATIBLE = _r(
    SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE.value,
    "SpeculativeDecoding=False",
    None,
    "the draft's tokenizer differs from the model's, or the draft cannot run paged (no SDPA, stateless, a VLM): "
    "serving without speculation",
)
DRAFT_MODEL_LOAD_FAILED = _r(
    SpeculativeReason.DRAFT_MODEL_LOAD_FAILED.value,
    "SpeculativeDecoding=False",
    None,
    "the pipeline with the draft failed to construct, without it it loads: serving without speculation",
)
SPECULATIVE_NEEDS_CB = _r(
    SpeculativeReason.NEEDS_CONTINUOUS_BATCHING.value,
    "SpeculativeDecoding=False",
    None,
    "the model resolved to a legacy or VLM pipeline: speculative decoding needs LM_CB; serving without",
)
SPECULATIVE_CONDITION = "SpeculativeDecoding"

# ------------------------------------------------------------------------- routing (status.routing.reason)
POOL_READY = _r(
    "PoolReady",
    "status.routing",
    None,
    "spec.routing: the InferencePool exists as rendered; `endpoints` counts the Ready pods it selects",
)
POOL_PENDING = _r(
    "PoolPending",
    "status.routing",
    None,
    "spec.routing: the InferencePool is not created yet, or is being re-created (deleted by hand)",
)
POOL_REFUSED = _r(
    "PoolRefused",
    "status.routing",
    None,
    "spec.routing: the apiserver refused the InferencePool (RBAC: chart routing.enabled; a webhook), or one of "
    "that name is not this LLMServing's: the message says which; the serving runs without it",
)
PICKER_NOT_READY = _r(
    "PickerNotReady",
    "status.routing",
    None,
    "spec.routing.picker: the pool exists, the endpoint picker's Deployment is not Available yet (image pull, "
    "start, gRPC health)",
)
ROUTING_UNAVAILABLE = _r(
    "RoutingUnavailable",
    "status.routing",
    None,
    "spec.routing: the InferencePool CRD (inference.networking.k8s.io/v1) is not installed: no pool, the "
    "serving runs behind its Service",
)

# ------------------------------------------------------------------------- Events only
PIPELINE_FALLBACK_EVENT = _r(
    "PipelineFallback", "Event", None, "Warning: Fallback became True (AUTO runs the legacy pipeline)"
)
READY_EVENT = _r("Ready", "Event", None, "Normal: Ready became True")
SPECULATIVE_FALLBACK_EVENT = _r(
    "SpeculativeFallback",
    "Event",
    None,
    "Warning: SpeculativeDecoding became False (serving without the requested speculation; the reason names why)",
)
DECISIONS_DIFFER_EVENT = _r(
    "DecisionsDiffer",
    "Event",
    None,
    "Warning: pods of the current spec resolved a setting differently (status.decisionsDiffer names them)",
)
DECISION_CHANGED_EVENT = _r(
    "DecisionChanged",
    "Event",
    None,
    "Warning: a resolved setting in status.decisions changed while what was asked stayed the same (an image "
    "upgrade, another node): old -> new",
)
COMPILE_CACHE_VERSION_MISS_EVENT = _r(
    "CompileCacheVersionMiss",
    "Event",
    None,
    "Warning: a pod's start missed the compiled-model cache while it held the model for other OpenVINO / "
    "openvino-genai versions (an image upgrade: the next starts hit again); once per pod and versions",
)

_ALL_RUNTIME = {r.value for r in RuntimeReason}
assert _ALL_RUNTIME <= set(REGISTRY), _ALL_RUNTIME - set(REGISTRY)

FAILED_REASONS = frozenset(n for n, d in REGISTRY.items() if d.phase == FAILED)
PENDING_REASONS = frozenset(n for n, d in REGISTRY.items() if d.phase == PENDING)


def phase_of(ready_status: str, ready_reason: str) -> Phase:
    """status.phase from the Ready condition (display only): True -> Ready, else the reason's phase."""
    if ready_status == "True":
        return Phase.READY
    doc = REGISTRY.get(ready_reason)
    return doc.phase if doc is not None and doc.phase is not None else Phase.LOADING


# ------------------------------------------------------------------------- docs


def _rows() -> list[tuple[str, ...]]:
    return [(f"`{d.name}`", d.used_in, d.phase.value if d.phase else "", d.doc) for d in REGISTRY.values()]


DOCS = docblock.Block(
    "reasons",
    "ovserve_operator.reasons",
    "docs/operator.md",
    ("reason", "where", "phase (as Ready=False)", "meaning"),
    _rows,
)
render_into = DOCS.render_into


if __name__ == "__main__":
    sys.exit(DOCS.main())
