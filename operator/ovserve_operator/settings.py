"""Operator configuration (OVSERVE_* environment, typed) and the kopf settings derived from it.

The configuration table of docs/operator.md is generated from `Settings`
(python -m ovserve_operator.settings --write docs/operator.md; a unit test fails on drift).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from ovserve_runtime import docblock, sources
from ovserve_runtime import flags as runtime_flags
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .routing import DEFAULT_PICKER_IMAGE
from .spec import QUANTITY_PATTERN

FIELD_MANAGER = "ovserve-operator"
MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"  # the subset resourcedefaults adds up


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_selector(value: str) -> dict[str, str]:
    """`k=v,k2=v2` -> dict; empty -> {}."""
    out: dict[str, str] = {}
    for item in _list(value):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected a comma list of key=value, got {item!r}")
        out[key.strip()] = val.strip()
    return out


def _env(default: Any, env: str | tuple[str, ...] | None, doc: str, *, shown: str | None = None, **kw: Any) -> Any:
    """A setting read from the environment variable(s) `env` (the first one set wins); `doc` and `shown` (the
    default as the docs say it) make its row of the generated table in docs/operator.md."""
    names = (env,) if isinstance(env, str) else (env or ())
    extra = {"env": list(names), "shown": shown}
    if callable(default):
        return Field(default_factory=default, description=doc, json_schema_extra=extra, **kw)
    return Field(default, description=doc, json_schema_extra=extra, **kw)


Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LIST_FIELDS = ("watch_namespaces", "allowed_images", "gpu_supplemental_groups")  # comma lists; empty = none
# an empty variable sets these (to none), not unset
EMPTY_MEANS_NONE = (
    *LIST_FIELDS,
    "gpu_node_selector",
    "operator_pod_labels",
    "default_cpu_request",
    "default_memory_request",
)


class Settings(BaseModel):
    """The operator's configuration: OVSERVE_* environment variables (`from_env`), overridden by the flags of
    `ovserve-operator --help` (cli.py). Fields with an `env` are the rows of docs/operator.md's table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    watch_namespaces: tuple[str, ...] = _env(
        (),
        "OVSERVE_WATCH_NAMESPACES",
        "comma list of namespace names (no globs: refused at start)",
        shown="empty = whole cluster",
    )
    runtime_image: str = _env(
        "localhost/ovserve:dev",
        "OVSERVE_RUNTIME_IMAGE",
        "runtime image (`spec.image` overrides per object)",
        min_length=1,
    )
    runtime_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = _env(
        "IfNotPresent", "OVSERVE_RUNTIME_IMAGE_PULL_POLICY", "`Always`, `IfNotPresent`, `Never`"
    )
    gpu_resource: str = _env(
        "gpu.intel.com/i915",
        "OVSERVE_GPU_RESOURCE",
        "device-plugin resource for `device: GPU` (e.g. `gpu.intel.com/xe`)",
        min_length=1,
    )
    gpu_node_selector: dict[str, str] = _env(
        lambda: {"intel.feature.node.kubernetes.io/gpu": "true"},
        "OVSERVE_GPU_NODE_SELECTOR",
        "comma list of `k=v` added for GPU pods; empty = none",
        shown="`intel.feature.node.kubernetes.io/gpu=true`",
    )
    gpu_supplemental_groups: tuple[int, ...] = _env(
        (), "OVSERVE_GPU_SUPPLEMENTAL_GROUPS", "gids (e.g. the node's `render` group) added to GPU pods", shown="none"
    )
    hf_endpoint: str = _env(
        "",
        "OVSERVE_HF_ENDPOINT",
        "`HF_ENDPOINT` of the download init container (a mirror)",
        shown="the Hub",
    )
    hf_allow_http: bool = _env(
        False,
        "OVSERVE_HF_ALLOW_HTTP",
        "allow a plain-http `OVSERVE_HF_ENDPOINT` (a mirror inside the cluster; refused at start otherwise, and "
        "the downloader refuses it too): tokens and models travel unencrypted",
    )
    hf_download_size_limit: str = _env(
        "20Gi",
        "OVSERVE_HF_DOWNLOAD_SIZE_LIMIT",
        "`sizeLimit` of the emptyDir a `huggingFace` model is downloaded into, unless `spec.model.huggingFace."
        "sizeLimit` sets it (a resource.Quantity)",
        pattern=QUANTITY_PATTERN,
    )
    # Requests of runtime containers whose spec leaves them unset (resourcedefaults.py): never BestEffort.
    default_cpu_request: str = _env(
        "100m",
        "OVSERVE_DEFAULT_CPU_REQUEST",
        "runtime pods: cpu request when `spec.resources` names no cpu (a scheduling floor); empty = none",
        pattern=r"^$|^[0-9]+(\.[0-9]+)?m?$",
    )
    default_memory_request: str = _env(
        "1Gi",
        "OVSERVE_DEFAULT_MEMORY_REQUEST",
        "runtime pods: memory request when `spec.resources` names no memory: the runtime and the weights of a small "
        "model, plus `scheduler.cacheSizeGB` on CPU; empty = none",
        pattern=f"^$|{MEMORY_PATTERN}",
    )
    # Operator upgrades (rolloutbudget.py): template changes that do not come from a spec roll a few at a time.
    rollout_budget: int = _env(
        2,
        "OVSERVE_ROLLOUT_BUDGET",
        "LLMServings whose pods roll at once because the operator (an upgrade, a setting), not their spec, "
        "changed their pod template; the others keep their pods until a slot frees (`status.rollout`); 0 = only "
        "at their next spec change",
        ge=0,
    )
    api_threads: int = _env(
        8,
        "OVSERVE_API_THREADS",
        "threads for the operator's own API calls, in two pools of this size: one applies children (create, "
        "update, re-apply), the other writes statuses and Events and reads autoscalers, so that a bulk create "
        "never holds the status writes back",
        ge=1,
    )
    rollout_budget_timeout_s: Seconds = _env(
        900.0,
        "OVSERVE_ROLLOUT_BUDGET_TIMEOUT_SECONDS",
        "a rollout slot frees when its LLMServing's rollout finished, or after this long (a rollout that "
        "cannot finish, e.g. a model that never loads, does not stop the others forever)",
    )
    # Tenant policy (policy.py): secure by default; the chart and the tests turn on what they need.
    allow_host_path: bool = _env(
        False, "OVSERVE_ALLOW_HOSTPATH", "tenant policy: allow `spec.model.hostPath`; denied specs read `PolicyDenied`"
    )
    cache_host_root: str = _env(
        "/var/cache/ovserve/compiled",
        "OVSERVE_CACHE_HOST_ROOT",
        "root of `spec.cache.mode: node` on the nodes (a hostPath mounted into the runtime pods; each namespace "
        "caches in its own directory under it). It must exist on the nodes, writable by the runtime's UID 10001 "
        "(e.g. mode 1777); the mode follows the tenant policy OVSERVE_ALLOW_HOSTPATH",
        pattern=r"^/.+",
    )
    allowed_images: tuple[str, ...] = _env(
        (),
        "OVSERVE_ALLOWED_IMAGES",
        "tenant policy: image prefixes allowed in `spec.image` (`*` = any; the runtime image is always allowed)",
        shown="empty",
    )
    allow_scheduling_passthrough: bool = _env(
        True,
        "OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH",
        "tenant policy: pass `spec.nodeSelector` / `spec.tolerations` / `spec.affinity` to runtime pods",
    )
    network_policies: bool = _env(
        False,
        "OVSERVE_NETWORK_POLICIES",
        "the operator may manage a NetworkPolicy per LLMServing (`spec.networkPolicy`; needs RBAC on "
        "networkpolicies, chart `networkPolicy.enabled`); off: a spec asking for one reads `PolicyDenied`",
    )
    routing: bool = _env(
        False,
        "OVSERVE_ROUTING",
        "tenant policy: the operator may create an InferencePool per LLMServing (`spec.routing`; needs RBAC on "
        "inferencepools, chart `routing.enabled`); off: a spec asking for one reads `PolicyDenied`",
    )
    routing_picker: bool = _env(
        False,
        "OVSERVE_ROUTING_PICKER",
        "tenant policy: the operator may run an endpoint picker per LLMServing (`spec.routing.picker`; needs RBAC on "
        "configmaps, serviceaccounts, roles and rolebindings, chart `routing.picker`); off: `PolicyDenied`",
    )
    picker_image: str = _env(
        DEFAULT_PICKER_IMAGE,
        "OVSERVE_PICKER_IMAGE",
        "the endpoint picker's image (`spec.routing.picker.image` overrides it within `OVSERVE_ALLOWED_IMAGES`)",
        min_length=1,
    )
    network_policy_default: bool = _env(
        False,
        "OVSERVE_NETWORK_POLICY_DEFAULT",
        "LLMServings without `spec.networkPolicy` get one too (same-namespace pods and the operator only)",
    )
    operator_namespace: str = _env(
        "", "POD_NAMESPACE", "the operator's namespace: NetworkPolicies admit the operator from it", shown="none"
    )
    operator_pod_labels: dict[str, str] = _env(
        dict,
        "OVSERVE_OPERATOR_POD_LABELS",
        "comma list of `k=v` of the operator pods, for NetworkPolicies; empty = any pod of its namespace",
        shown="none",
    )
    leader_election: bool = _env(True, "OVSERVE_LEADER_ELECTION", "act only while holding the Lease")
    lease_namespace: str = _env(
        "default",
        ("OVSERVE_LEASE_NAMESPACE", "POD_NAMESPACE"),
        "namespace of the Lease",
        shown="`POD_NAMESPACE` or `default`",
        min_length=1,
    )
    lease_name: str = _env("ovserve-operator", "OVSERVE_LEASE_NAME", "name of the Lease", min_length=1)
    identity: str = _env(
        lambda: f"{socket.gethostname()}-{os.getpid()}",
        "POD_NAME",
        "holder identity",
        shown="hostname-pid",
        min_length=1,
    )
    lease_duration_s: Seconds = _env(
        15.0, "OVSERVE_LEASE_DURATION_SECONDS", "client-go semantics; retry period < renew deadline < duration"
    )
    renew_deadline_s: Seconds = _env(10.0, "OVSERVE_LEASE_RENEW_DEADLINE_SECONDS", "see the lease duration")
    retry_period_s: Seconds = _env(2.0, "OVSERVE_LEASE_RETRY_PERIOD_SECONDS", "see the lease duration")
    health_port: int = _env(
        8080, "OVSERVE_HEALTH_PORT", "`GET /healthz` (liveness) and `GET /metrics`; 0 = any", ge=0, le=65535
    )
    status_interval_s: Seconds = _env(
        5.0, "OVSERVE_STATUS_INTERVAL_SECONDS", "status resync period (pod events trigger a refresh at once)"
    )
    status_resync_per_s: float = _env(
        50.0,
        "OVSERVE_STATUS_RESYNC_PER_SECOND",
        "the resync's budget: at most this many periodic refreshes a second, so that with more objects than "
        "budget x period the period grows (10,000 objects: 200 s) instead of the operator's CPU; events and "
        "first refreshes are not budgeted; 0 = no budget",
        ge=0,
    )
    status_http_timeout_s: Seconds = 2.0  # per GET /v1/status of a pod (not configurable)
    readback_grace_s: Seconds = _env(
        30.0,
        "OVSERVE_READBACK_GRACE_SECONDS",
        "a Ready pod whose `/v1/status` cannot be read keeps its last good report this long",
    )
    # Where KEDA's Prometheus trigger queries the runtime metrics (spec.autoscaling); kube-prometheus-stack's default.
    prometheus_url: str = _env(
        "http://prometheus-operated.monitoring.svc:9090",
        "OVSERVE_PROMETHEUS_URL",
        "Prometheus that KEDA's trigger queries for `spec.autoscaling` ([autoscaling.md](autoscaling.md))",
    )
    # Graceful termination of runtime pods (render.termination derives the pod-spec numbers from these two):
    runtime_prestop_s: int = _env(
        5,
        "OVSERVE_RUNTIME_PRESTOP_SECONDS",
        "runtime pods: preStop sleep before SIGTERM, so that endpoints drop the pod first (0 = no hook)",
        ge=0,
    )
    runtime_drain_timeout_s: int = _env(
        30,
        "OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS",
        "runtime pods: `--drain-timeout-seconds`, how long in-flight requests may finish after SIGTERM; raise it "
        "for long generations",
        ge=0,
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = _env(
        "INFO", "OVSERVE_LOG_LEVEL", "`DEBUG`, `INFO`, `WARNING`, `ERROR`"
    )
    otlp_traces_endpoint: str | None = _env(
        None,
        "OVSERVE_OTLP_TRACES_ENDPOINT",
        "OpenTelemetry traces of the sync passes (reconcile / observe / decide / act) to this OTLP/HTTP collector, "
        "e.g. http://jaeger-collector.observability:4318 (docs/observability.md)",
        shown="unset: off",
        pattern=runtime_flags.OTLP_URL_PATTERN,
    )
    trace_sample_ratio: float = _env(
        1.0, "OVSERVE_TRACE_SAMPLE_RATIO", "the share of sync passes traced", ge=0, le=1, allow_inf_nan=False
    )

    @field_validator(*LIST_FIELDS, mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        return tuple(_list(v)) if isinstance(v, str) else v

    @field_validator("watch_namespaces")
    @classmethod
    def _namespaces(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # kopf matches globs (`team-*`, `!kube-system`) only by listing namespaces, i.e. with its cluster scanning,
        # which is off (configure_kopf: least-privilege RBAC forbids listing namespaces): it would drop them
        # silently and watch nothing there. Refused, naming each.
        if bad := [n for n in v if not _NAMESPACE.fullmatch(n)]:
            raise ValueError(f"not namespace names (globs are not supported; list each namespace): {', '.join(bad)}")
        return v

    @field_validator("gpu_node_selector", "operator_pod_labels", mode="before")
    @classmethod
    def _selector(cls, v: Any) -> Any:
        return parse_selector(v) if isinstance(v, str) else v

    @field_validator("hf_endpoint", "prometheus_url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip().rstrip("/")
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("expected an http(s) URL")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.hf_endpoint.startswith("http://") and not self.hf_allow_http:
            raise ValueError(
                f"OVSERVE_HF_ENDPOINT {self.hf_endpoint} is plain http: Hub tokens and models would travel "
                "unencrypted; set OVSERVE_HF_ALLOW_HTTP=true only for a mirror you trust"
            )
        if self.network_policy_default and not self.network_policies:
            raise ValueError("OVSERVE_NETWORK_POLICY_DEFAULT needs OVSERVE_NETWORK_POLICIES (the RBAC to manage them)")
        if not (self.retry_period_s < self.renew_deadline_s < self.lease_duration_s):
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}"
            )
        return self

    @property
    def clusterwide(self) -> bool:
        return not self.watch_namespaces

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings of the environment; a variable set empty counts as unset, except for a list or the
        GPU node selector, where it means none. Raises sources.ConfigError (a ValueError) naming each bad one."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        source: dict[str, str] = {}
        for field in cls.model_fields:
            for name in env_names(field):
                raw = env.get(name)
                if raw is not None and not raw.strip() and field in EMPTY_MEANS_NONE:
                    values[field], source[field] = "", f"{name}={raw!r}"
                    break
                if (found := sources.env_value(env, name)) is not None:
                    values[field], source[field] = found
                    break
        return sources.validate(cls, values, source)

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`, validated like the rest."""
        return type(self).model_validate({**self.model_dump(), **changes})


def env_names(field: str) -> list[str]:
    extra = Settings.model_fields[field].json_schema_extra
    return list(extra["env"]) if isinstance(extra, dict) else []  # type: ignore[arg-type]


def _shown(field: str) -> str:
    info = Settings.model_fields[field]
    extra = info.json_schema_extra
    if isinstance(extra, dict) and extra.get("shown"):
        return str(extra["shown"])
    default = info.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f"`{default}`"


def _rows() -> list[tuple[str, ...]]:
    rows = []
    for field, info in Settings.model_fields.items():
        if names := env_names(field):
            variable = " (else ".join(f"`{n}`" for n in names) + ")" * (len(names) - 1)
            rows.append((variable, _shown(field), str(info.description)))
    return rows


DOCS = docblock.Block(
    "settings", "ovserve_operator.settings", "docs/operator.md", ("variable", "default", "meaning"), _rows
)


def configure_kopf(kopf_settings: Any, settings: Settings) -> None:
    """kopf runs the lifecycle only (startup and cleanup handlers, handlers.py); it watches no resource, so it
    needs no storages nor queues: no peering (the Lease is leader.py's), no CRD or namespace scanning (least-
    privilege RBAC forbids listing them, and kopf would retry the 403s for about a minute at every start)."""
    kopf_settings.peering.standalone = True
    kopf_settings.peering.clusterwide = settings.clusterwide
    kopf_settings.scanning.disabled = True


if __name__ == "__main__":
    sys.exit(DOCS.main())
