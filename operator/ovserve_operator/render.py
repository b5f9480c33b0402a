"""Pure rendering: LLMServing spec -> the Deployment and Service that run the runtime.

No I/O here; handlers apply the result with server-side apply. Every pod template carries a hash of
itself (annotation ovserve.dev/template-hash) so that status can tell up-to-date pods from old ones.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ovserve_runtime import endpoints
from ovserve_runtime.flags import RuntimeFlags
from ovserve_runtime.report import PipelineType, Task

from . import networkpolicy, resourcedefaults, routing, scaledobject
from . import spec as api
from .settings import Settings

CONTAINER_NAME = "runtime"
INIT_CONTAINER_NAME = "model-download"
PORT = endpoints.PORT
PORT_NAME = "http"
RUNTIME_UID = 10001
MODELS_ROOT = "/models"
TERMINATION_LOG = endpoints.TERMINATION_LOG

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_OWNER = "ovserve.dev/llmserving"
MANAGED_BY = "ovserve-operator"
ANNOTATION_TEMPLATE_HASH = "ovserve.dev/template-hash"
HF_TOKEN_ENV = "HF_TOKEN"
# After the drain: the engine child stops and the process exits (seconds; part of the grace period)
TERMINATION_MARGIN_S = 10


@dataclass(frozen=True)
class Termination:
    """The numbers of a graceful pod termination, from one place (Settings), so that they always fit:
    Kubernetes counts the preStop hook inside terminationGracePeriodSeconds, and SIGKILL at its end must
    come after the runtime's drain bound and its exit."""

    prestop_s: int
    drain_timeout_s: int

    @property
    def grace_period_s(self) -> int:
        return self.prestop_s + self.drain_timeout_s + TERMINATION_MARGIN_S


def termination(settings: Settings) -> Termination:
    return Termination(prestop_s=settings.runtime_prestop_s, drain_timeout_s=settings.runtime_drain_timeout_s)


def labels(name: str) -> dict[str, str]:
    return {
        LABEL_NAME: "ovserve-runtime",
        LABEL_INSTANCE: name,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "runtime",
        LABEL_OWNER: name,
    }


def selector_labels(name: str) -> dict[str, str]:
    return {LABEL_OWNER: name, LABEL_COMPONENT: "runtime"}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def endpoint(name: str, namespace: str) -> str:
    return f"http://{name}.{namespace}.svc:{PORT}/v3"


def model_path(name: str) -> str:
    return f"{MODELS_ROOT}/{name}"


def draft_path(name: str) -> str:
    return f"{MODELS_ROOT}/{name}-draft"


DRAFT_VOLUME = "draft-model"
CACHE_VOLUME = "compile-cache"
CACHE_MOUNT = "/var/cache/ovserve-compiled"
# node mode: one directory per namespace under the operator's root; the kubelet expands $(VAR) in args, and the
# runtime creates the directory itself (as its UID: a subPath would be created by the kubelet as root)
NODE_CACHE_DIR = CACHE_MOUNT + "/$(POD_NAMESPACE)"
DRAFT_INIT_CONTAINER_NAME = "draft-download"


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(name: str, namespace: str, uid: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": labels(name),
        "ownerReferences": [owner_reference(name, uid)],
    }


def runtime_flags(name: str, spec: api.LLMServingSpec, drain_timeout_s: int) -> RuntimeFlags:
    """The runtime's flags for this spec: what the spec leaves unset stays unset, so the runtime's own default
    (or openvino-genai's) applies."""
    sched = spec.scheduler or api.SchedulerConfig()
    serving = spec.serving or api.ServingConfig()
    emb = spec.embeddings or api.EmbeddingsConfig()
    rerank = spec.rerank or api.RerankConfig()
    given: dict[str, Any] = {
        "model_path": model_path(name),
        "served_name": spec.model.servedName or name,
        "pipeline_type": spec.pipelineType,
        "device": str(spec.device),
        "host": "0.0.0.0",
        "port": PORT,
        "termination_log": TERMINATION_LOG,
        "drain_timeout_seconds": drain_timeout_s,
        "cache_size_gb": sched.cacheSizeGB,
        "max_num_seqs": sched.maxNumSeqs,
        "max_num_batched_tokens": sched.maxNumBatchedTokens,
        # false is openvino-genai's default: not rendered, as before (an unchanged template hash)
        "enable_prefix_caching": sched.enablePrefixCaching or None,
        "dynamic_split_fuse": sched.dynamicSplitFuse,
        "kv_cache_precision": str(sched.kvCachePrecision) if sched.kvCachePrecision is not None else None,
        "max_queued_requests": serving.maxQueuedRequests,
        "stream_interval_ms": serving.streamIntervalMs,
        "tool_parser": serving.toolParser,
        "reasoning_parser": serving.reasoningParser,
        "chat_template_kwargs": (
            json.dumps(serving.chatTemplateKwargs, sort_keys=True, separators=(",", ":"))
            if serving.chatTemplateKwargs
            else None
        ),
        # AUTO is the runtime's default: not rendered (an unchanged template hash for existing servings)
        "task": spec.task if spec.task != Task.AUTO else None,
        "embeddings_pooling": emb.pooling,
        "embeddings_normalize": emb.normalize,
        "embeddings_matryoshka": emb.matryoshka,
        "embeddings_max_batch": emb.maxBatch,
        "rerank_max_documents": rerank.maxDocuments,
        "inference_precision": spec.inferencePrecision,
        "dynamic_quantization_group_size": spec.dynamicQuantizationGroupSize,
        **_eviction_flags(sched),
        **_speculative_flags(name, spec),
        **_cache_flags(spec),
        **_tracing_flags(spec),
    }
    return RuntimeFlags(**{k: v for k, v in given.items() if v is not None})


def _tracing_flags(spec: api.LLMServingSpec) -> dict[str, Any]:
    tracing = spec.observability.tracing if spec.observability is not None else None
    if tracing is None:
        return {}
    return {"otlp_traces_endpoint": tracing.endpoint, "trace_sample_ratio": tracing.sampleRatio}


def _eviction_flags(sched: api.SchedulerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"sparse_attention": sched.sparseAttention}
    ev = sched.cacheEviction
    if ev is not None:
        out.update(
            cache_eviction_max_tokens=ev.maxTokens,
            cache_eviction_start_tokens=ev.startTokens,
            cache_eviction_recent_tokens=ev.recentTokens,
            cache_eviction_aggregation=ev.aggregation,
        )
    return out


def _cache_flags(spec: api.LLMServingSpec) -> dict[str, Any]:
    c = spec.cache
    if c is None or c.mode == api.CompileCacheMode.OFF:
        return {}
    where = NODE_CACHE_DIR if c.mode == api.CompileCacheMode.NODE else CACHE_MOUNT
    return {"cache_dir": where, "cache_max_gb": c.maxSizeGB}


def cache_volume(spec: api.LLMServingSpec, settings: Settings) -> tuple[dict, dict, list[dict]] | None:
    """(volume, mount, env to add) of spec.cache; None when off."""
    c = spec.cache
    if c is None or c.mode == api.CompileCacheMode.OFF:
        return None
    mount = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}
    if c.mode == api.CompileCacheMode.PVC:
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": c.claimName}}, mount, []
    # Directory, not DirectoryOrCreate: the root is the operator's, provisioned writable for the runtime's UID
    volume = {"name": CACHE_VOLUME, "hostPath": {"path": settings.cache_host_root, "type": "Directory"}}
    env = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    return volume, mount, env


def _speculative_flags(name: str, spec: api.LLMServingSpec) -> dict[str, Any]:
    sp = spec.speculative
    if sp is None:
        return {}
    out: dict[str, Any] = {"speculative_required": sp.required or None}
    if sp.draftModel is not None:
        out.update(
            draft_model_path=draft_path(name),
            draft_device=str(sp.draftDevice) if sp.draftDevice is not None else None,
            num_assistant_tokens=sp.numAssistantTokens,
            assistant_confidence_threshold=sp.assistantConfidenceThreshold,
        )
    elif sp.promptLookup is not None:
        out.update(
            prompt_lookup=True,
            num_assistant_tokens=sp.promptLookup.numAssistantTokens,
            max_ngram_size=sp.promptLookup.maxNgramSize,
        )
    return out


def runtime_args(name: str, spec: api.LLMServingSpec, drain_timeout_s: int) -> list[str]:
    return runtime_flags(name, spec, drain_timeout_s).to_args()


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _resources(spec: api.LLMServingSpec, settings: Settings) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if spec.resources is not None:
        if spec.resources.requests:
            res["requests"] = {k: str(v) for k, v in spec.resources.requests.items()}
        if spec.resources.limits:
            res["limits"] = {k: str(v) for k, v in spec.resources.limits.items()}
    if added := resourcedefaults.defaults(spec, settings).requests:  # never BestEffort
        res["requests"] = {**res.get("requests", {}), **added}
    if spec.device == api.Device.GPU:
        limits = res.setdefault("limits", {})
        if not any(k.startswith("gpu.intel.com/") for k in limits):
            limits[settings.gpu_resource] = "1"
    return res


def strategy(spec: api.LLMServingSpec) -> dict[str, Any]:
    """The Deployment strategy: spec.rollout, its unset bounds from the device-aware default (a GPU pool
    sized to the replicas has no device for a surge pod: it would stay Pending and the rollout never end)."""
    rollout = spec.rollout or api.Rollout()
    if rollout.strategy == api.RolloutStrategy.Recreate:
        return {"type": "Recreate"}
    gpu = spec.device == api.Device.GPU
    surge = rollout.maxSurge if rollout.maxSurge is not None else (0 if gpu else 1)
    unavailable = rollout.maxUnavailable if rollout.maxUnavailable is not None else (1 if gpu else 0)
    if str(surge).rstrip("%") == "0" and str(unavailable).rstrip("%") == "0":
        unavailable = 1  # only one bound given as 0 and the default other one 0 too: keep the rollout moving
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def _model_volume(name: str, spec: api.LLMServingSpec, settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount of the runtime container)."""
    src = spec.model
    mount: dict[str, Any] = {"name": "model", "mountPath": model_path(name), "readOnly": True}
    if src.hostPath is not None:
        volume = {"name": "model", "hostPath": {"path": src.hostPath.path, "type": "Directory"}}
    elif src.pvc is not None:
        volume = {
            "name": "model",
            "persistentVolumeClaim": {"claimName": src.pvc.claimName, "readOnly": True},
        }
        if src.pvc.path:
            mount["subPath"] = src.pvc.path
    elif src.huggingFace is not None:
        # bounded: a repository larger than expected must not fill the node's disk
        limit = src.huggingFace.sizeLimit or settings.hf_download_size_limit
        volume = {"name": "model", "emptyDir": {"sizeLimit": str(limit)}}
    else:  # the CRD's CEL rule refuses this; keep the renderer total anyway
        raise ValueError("spec.model: exactly one of pvc, hostPath, huggingFace must be set")
    return volume, mount


def _draft_volume(name: str, spec: api.LLMServingSpec, settings: Settings) -> tuple[dict | None, dict] | None:
    """(volume or None when it shares the model's, mount) of the draft model, like the model's; None without one."""
    src = spec.speculative.draftModel if spec.speculative is not None else None
    if src is None:
        return None
    mount: dict[str, Any] = {"name": DRAFT_VOLUME, "mountPath": draft_path(name), "readOnly": True}
    model_pvc = spec.model.pvc
    if src.pvc is not None and model_pvc is not None and src.pvc.claimName == model_pvc.claimName:
        # the model's claim: a second mount of its volume (a pod that names one claim in two volumes waits for
        # the second forever: the kubelet mounts a PersistentVolume once per pod)
        mount = {"name": "model", "mountPath": draft_path(name), "readOnly": True}
        if src.pvc.path:
            mount["subPath"] = src.pvc.path
        return None, mount
    if src.hostPath is not None:
        # Directory, as the model's: DirectoryOrCreate would let a spec create directories (as root) on the node;
        # a missing draft is a pod that cannot mount it, ModelNotFound naming the draft (rules.model_missing)
        volume: dict[str, Any] = {"name": DRAFT_VOLUME, "hostPath": {"path": src.hostPath.path, "type": "Directory"}}
    elif src.pvc is not None:
        volume = {"name": DRAFT_VOLUME, "persistentVolumeClaim": {"claimName": src.pvc.claimName, "readOnly": True}}
        if src.pvc.path:
            mount["subPath"] = src.pvc.path
    else:
        assert src.huggingFace is not None
        limit = src.huggingFace.sizeLimit or settings.hf_download_size_limit
        volume = {"name": DRAFT_VOLUME, "emptyDir": {"sizeLimit": str(limit)}}
    return volume, mount


def _download_init_container(
    name: str,
    spec: api.LLMServingSpec,
    image: str,
    pull_policy: str,
    settings: Settings,
    hf: api.HuggingFaceSource | None = None,
    draft: bool = False,
) -> dict[str, Any]:
    """The init container that downloads spec.model.huggingFace (or `hf`, the draft's, when `draft`)."""
    hf = hf or spec.model.huggingFace
    assert hf is not None
    dest, volume = (draft_path(name), DRAFT_VOLUME) if draft else (model_path(name), "model")
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if settings.hf_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": settings.hf_endpoint})
    if settings.hf_allow_http:  # the downloader refuses plain http on its own too
        env.append({"name": "OVSERVE_HF_ALLOW_HTTP", "value": "true"})
    if hf.tokenSecretRef is not None:
        # The token reaches the process as an env var only: never an argument, never logged.
        env.append(
            {
                "name": HF_TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": hf.tokenSecretRef.name, "key": hf.tokenSecretRef.key}},
            }
        )
    return {
        "name": DRAFT_INIT_CONTAINER_NAME if draft else INIT_CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python", "-m", "ovserve_operator.hfdownload"],
        "args": ["--repo", hf.repo, "--revision", hf.revision, "--dest", dest],
        "env": env,
        "securityContext": container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": volume, "mountPath": dest},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def pod_template(name: str, spec: api.LLMServingSpec, settings: Settings) -> dict[str, Any]:
    image = spec.image or settings.runtime_image
    pull_policy = settings.runtime_image_pull_policy
    volume, model_mount = _model_volume(name, spec, settings)
    term = termination(settings)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["ovserve-runtime"],
        "args": runtime_args(name, spec, term.drain_timeout_s),
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "startupProbe": {
            "httpGet": {"path": endpoints.LIVE, "port": PORT_NAME},
            "periodSeconds": 2,
            "failureThreshold": 150,
            "timeoutSeconds": 2,
        },
        # Lenient: on a saturated node a model load can starve the HTTP loop for seconds; a liveness kill
        # then restarts the load and makes it worse (seen on the 2-core test node).
        "livenessProbe": {
            "httpGet": {"path": endpoints.LIVE, "port": PORT_NAME},
            "periodSeconds": 10,
            "failureThreshold": 6,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": endpoints.READY, "port": PORT_NAME},
            "periodSeconds": 2,
            "failureThreshold": 3,
            "timeoutSeconds": 2,
        },
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(),
        "volumeMounts": [model_mount, {"name": "tmp", "mountPath": "/tmp"}],
    }
    if term.prestop_s:
        # Endpoint removal (EndpointSlices, kube-proxy, ingress) runs in parallel with termination: the pod keeps
        # serving normally for this long before SIGTERM starts the drain. The image has no shell: the native
        # sleep action (Kubernetes >= 1.30), not an exec of `sleep`.
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": term.prestop_s}}}
    resources = _resources(spec, settings)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "runAsGroup": RUNTIME_UID,
            "fsGroup": RUNTIME_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [volume, {"name": "tmp", "emptyDir": {}}],
        "terminationGracePeriodSeconds": term.grace_period_s,
    }
    if spec.model.huggingFace is not None:
        pod_spec["initContainers"] = [_download_init_container(name, spec, image, pull_policy, settings)]
    if (draft := _draft_volume(name, spec, settings)) is not None:  # added after everything else: hashes unchanged
        if draft[0] is not None:
            pod_spec["volumes"].append(draft[0])
        container["volumeMounts"].append(draft[1])
        draft_hf = spec.speculative.draftModel.huggingFace  # type: ignore[union-attr]
        if draft_hf is not None:
            pod_spec.setdefault("initContainers", []).append(
                _download_init_container(name, spec, image, pull_policy, settings, draft_hf, draft=True)
            )
    if (cache := cache_volume(spec, settings)) is not None:  # after everything else: other hashes unchanged
        pod_spec["volumes"].append(cache[0])
        container["volumeMounts"].append(cache[1])
        container["env"].extend(cache[2])
    node_selector: dict[str, str] = {}
    if spec.device == api.Device.GPU:
        node_selector.update(settings.gpu_node_selector)
        if settings.gpu_supplemental_groups:
            pod_spec["securityContext"]["supplementalGroups"] = list(settings.gpu_supplemental_groups)
    node_selector.update(spec.nodeSelector or {})
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if spec.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(spec.tolerations)
    if spec.affinity:
        pod_spec["affinity"] = copy.deepcopy(spec.affinity)
    if (spread := topology_spread(spec)) is not None:
        pod_spec["topologySpreadConstraints"] = spread
    pod_labels = labels(name)
    if routing.enabled(spec):  # only then: the label is in the template hash (setting it rolls the pods)
        pod_labels.update(routing.POD_LABELS)
    template: dict[str, Any] = {"metadata": {"labels": pod_labels}, "spec": pod_spec}
    template["metadata"]["annotations"] = {ANNOTATION_TEMPLATE_HASH: template_hash(template)}
    return template


def topology_spread(spec: api.LLMServingSpec) -> list[dict[str, Any]] | None:
    """spec.topologySpreadConstraints as written ([] or unset: none rendered). Unset, kube-scheduler's own default
    spread applies to the pods of a ReplicaSet (PodTopologySpread, `defaultingType: System`: kubernetes.io/hostname
    maxSkew 3 and topology.kubernetes.io/zone maxSkew 5, ScheduleAnyway): the replicas go to different nodes when
    nothing outweighs it. An explicit default here cost the bulk load of 1,000 servings 65 s on a 2-core
    control plane (docs/operator.md, Node faults) for no more than that preference."""
    return copy.deepcopy(spec.topologySpreadConstraints) or None


def needs_budget(spec: api.LLMServingSpec) -> bool:
    """A PodDisruptionBudget only where it can hold anything: more than one replica (now, or with autoscaling). A
    single replica's budget would let its only pod go anyway, and costs the control plane a controller lookup per
    pod change."""
    most = spec.autoscaling.maxReplicas if spec.autoscaling is not None else spec.replicas
    return max(spec.replicas, most) > 1


def disruption_budget(spec: api.LLMServingSpec) -> int | str:
    """The PodDisruptionBudget's maxUnavailable: spec.disruptionBudget's, else the rollout's when above 0, else 1."""
    if spec.disruptionBudget is not None and spec.disruptionBudget.maxUnavailable is not None:
        return spec.disruptionBudget.maxUnavailable
    rolling = strategy(spec).get("rollingUpdate") or {}
    unavailable = rolling.get("maxUnavailable", 1)
    return 1 if str(unavailable).rstrip("%") == "0" else unavailable


def render_pdb(name: str, namespace: str, uid: str, spec: api.LLMServingSpec) -> dict[str, Any]:
    """The runtime pods' PodDisruptionBudget: a drain evicts at most `disruption_budget` of them at once; pods not
    Ready may always go (AlwaysAllow: a crash-looping or loading pod never blocks a drain)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(name, namespace, uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(name)},
            "maxUnavailable": disruption_budget(spec),
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def template_hash(template: dict[str, Any]) -> str:
    """Hash of a pod template without its own hash annotation."""
    t = copy.deepcopy(template)
    meta = t.get("metadata") or {}
    annotations = meta.get("annotations")
    if annotations is not None:
        annotations.pop(ANNOTATION_TEMPLATE_HASH, None)
        if not annotations:
            meta.pop("annotations")
    blob = json.dumps(t, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def render_deployment(name: str, namespace: str, uid: str, spec: api.LLMServingSpec, settings: Settings) -> dict:
    template = pod_template(name, spec, settings)
    meta = _metadata(name, namespace, uid)
    meta["annotations"] = {ANNOTATION_TEMPLATE_HASH: template["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": strategy(spec),
            "template": template,
        },
    }


def render_service(name: str, namespace: str, uid: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, uid),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(name),
            "ports": [{"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def render_network_policy(name: str, namespace: str, uid: str, spec: api.LLMServingSpec, settings: Settings) -> dict:
    return networkpolicy.render_network_policy(
        name, spec, settings, _metadata(name, namespace, uid), selector_labels(name)
    )


def render_scaled_object(
    name: str, namespace: str, uid: str, spec: api.LLMServingSpec, prometheus_url: str
) -> dict[str, Any] | None:
    """The KEDA ScaledObject for spec.autoscaling (scaledobject.py), or None when autoscaling is off."""
    if spec.autoscaling is None:
        return None
    metadata = _metadata(name, namespace, uid)
    hold_pool = routing.pool_name(name) if routing.enabled(spec) else None
    return scaledobject.render_scaled_object(name, namespace, spec.autoscaling, prometheus_url, metadata, hold_pool)


def picker_wanted(spec: api.LLMServingSpec) -> bool:
    """spec.routing.picker is set and on (with routing on)."""
    picker = spec.routing.picker if spec.routing is not None else None
    return routing.enabled(spec) and picker is not None and picker.enabled


def render_routing(name: str, namespace: str, uid: str, spec: api.LLMServingSpec, settings: Settings) -> list[dict]:
    """The routing children of spec.routing (routing.py): the InferencePool, and the endpoint picker's six objects
    with spec.routing.picker; none when routing is off. They carry the serving's labels but the owner label, so
    that the reflectors, which cache children by it, never take the picker's Deployment and Service for the
    runtime's (the pool and the picker have their own write and read, routing_io.py)."""
    if not routing.enabled(spec):
        return []
    owner_labels = {k: v for k, v in labels(name).items() if k != LABEL_OWNER}
    owner = routing.Owner(name, namespace, owner_labels, owner_reference(name, uid))
    params = routing.params(spec)
    if picker_wanted(spec):
        image = spec.routing.picker.image or settings.picker_image  # type: ignore[union-attr]
        params = dataclasses.replace(params, picker=True, picker_image=image)
    return routing.render_routing(owner, selector_labels(name), params)


def render(name: str, namespace: str, uid: str, spec: api.LLMServingSpec, settings: Settings) -> list[dict]:
    """Every desired child object, in apply order: the NetworkPolicy first (no pod without it), the ScaledObject
    and the InferencePool last (spec.autoscaling, spec.routing; each written by its own path, autoscaling_io.write
    and routing_io.write, since KEDA and the Inference Extension may be absent)."""
    objs = [render_service(name, namespace, uid), render_deployment(name, namespace, uid, spec, settings)]
    if needs_budget(spec):
        objs.append(render_pdb(name, namespace, uid, spec))
    if networkpolicy.wanted(spec, settings):
        objs.insert(0, render_network_policy(name, namespace, uid, spec, settings))
    if (scaled := render_scaled_object(name, namespace, uid, spec, settings.prometheus_url)) is not None:
        objs.append(scaled)
    objs += render_routing(name, namespace, uid, spec, settings)
    return objs


__all__ = [
    "ANNOTATION_TEMPLATE_HASH",
    "CONTAINER_NAME",
    "LABEL_OWNER",
    "PORT",
    "PipelineType",
    "Termination",
    "endpoint",
    "labels",
    "needs_budget",
    "pod_template",
    "render",
    "render_deployment",
    "render_network_policy",
    "render_pdb",
    "render_routing",
    "render_scaled_object",
    "render_service",
    "runtime_args",
    "selector_labels",
    "selector_string",
    "strategy",
    "template_hash",
    "termination",
    "topology_spread",
]
