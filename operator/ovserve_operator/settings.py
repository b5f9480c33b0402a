"""Operator configuration (environment, docs/interfaces.md) and the kopf settings derived from it."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

FIELD_MANAGER = "ovserve-operator"
STORAGE_PREFIX = "ovserve.dev"
FINALIZER = "ovserve.dev/finalizer"

_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n", ""}


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}: expected true or false, got {value!r}")


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_selector(name: str, value: str) -> dict[str, str]:
    """`k=v,k2=v2` -> dict; empty -> {}."""
    out: dict[str, str] = {}
    for item in _list(value):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{name}: expected a comma list of key=value, got {item!r}")
        out[key.strip()] = val.strip()
    return out


def _seconds(name: str, value: str) -> int:
    """A whole number of seconds >= 0 (what pod-spec fields take)."""
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name}: expected a whole number of seconds, got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name}: must be >= 0, got {value!r}")
    return n


def _float(name: str, value: str, *, minimum: float = 0.0) -> float:
    try:
        f = float(value)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if f <= minimum:
        raise ValueError(f"{name}: must be > {minimum}, got {value!r}")
    return f


@dataclasses.dataclass(frozen=True)
class Settings:
    watch_namespaces: tuple[str, ...] = ()
    runtime_image: str = "localhost/ovserve:dev"
    runtime_image_pull_policy: str = "IfNotPresent"
    gpu_resource: str = "gpu.intel.com/i915"
    gpu_node_selector: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"intel.feature.node.kubernetes.io/gpu": "true"}
    )
    gpu_supplemental_groups: tuple[int, ...] = ()
    hf_endpoint: str = ""  # Hugging Face Hub endpoint for the download init container (mirrors); "" = the Hub
    hf_allow_http: bool = False  # a plain-http hf_endpoint (a mirror inside the cluster): token and model unencrypted
    # Tenant policy (policy.py): secure by default; the chart and the tests turn on what they need.
    allow_host_path: bool = False
    allowed_images: tuple[str, ...] = ()  # image prefixes a spec.image may use; "*" = any; () = none
    allow_scheduling_passthrough: bool = True
    leader_election: bool = True
    lease_namespace: str = "default"
    lease_name: str = "ovserve-operator"
    identity: str = dataclasses.field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    health_port: int = 8080
    status_interval_s: float = 5.0
    status_http_timeout_s: float = 2.0
    readback_grace_s: float = 30.0  # a Ready pod keeps its last good report this long when unreadable
    status_heartbeat_s: float = 60.0  # status.computedAt is rewritten at least this often
    log_level: str = "INFO"
    # Graceful termination of runtime pods (render.termination derives the pod-spec numbers from these two):
    runtime_prestop_s: int = 5  # preStop sleep: endpoints drop the pod before it gets SIGTERM
    runtime_drain_timeout_s: int = 30  # the runtime's --drain-timeout-seconds
    # Where KEDA's Prometheus trigger queries the runtime metrics (spec.autoscaling); kube-prometheus-stack's default.
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"

    @property
    def clusterwide(self) -> bool:
        return not self.watch_namespaces

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        kw: dict[str, Any] = {}

        def get(name: str) -> str | None:
            value = env.get(name)
            return None if value is None else value.strip()

        if (v := get("OVSERVE_WATCH_NAMESPACES")) is not None:
            kw["watch_namespaces"] = tuple(_list(v))
        if v := get("OVSERVE_RUNTIME_IMAGE"):
            kw["runtime_image"] = v
        if v := get("OVSERVE_RUNTIME_IMAGE_PULL_POLICY"):
            if v not in ("Always", "IfNotPresent", "Never"):
                raise ValueError(f"OVSERVE_RUNTIME_IMAGE_PULL_POLICY: Always, IfNotPresent or Never, got {v!r}")
            kw["runtime_image_pull_policy"] = v
        if v := get("OVSERVE_GPU_RESOURCE"):
            kw["gpu_resource"] = v
        if (v := get("OVSERVE_GPU_NODE_SELECTOR")) is not None:
            kw["gpu_node_selector"] = parse_selector("OVSERVE_GPU_NODE_SELECTOR", v)
        if v := get("OVSERVE_GPU_SUPPLEMENTAL_GROUPS"):
            try:
                kw["gpu_supplemental_groups"] = tuple(int(g) for g in _list(v))
            except ValueError:
                raise ValueError(f"OVSERVE_GPU_SUPPLEMENTAL_GROUPS: expected a comma list of gids, got {v!r}") from None
        if v := get("OVSERVE_HF_ENDPOINT"):
            if not v.startswith(("http://", "https://")):
                raise ValueError(f"OVSERVE_HF_ENDPOINT: expected an http(s) URL, got {v!r}")
            kw["hf_endpoint"] = v.rstrip("/")
        if v := get("OVSERVE_HF_ALLOW_HTTP"):
            kw["hf_allow_http"] = _bool("OVSERVE_HF_ALLOW_HTTP", v)
        if v := get("OVSERVE_ALLOW_HOSTPATH"):
            kw["allow_host_path"] = _bool("OVSERVE_ALLOW_HOSTPATH", v)
        if (v := get("OVSERVE_ALLOWED_IMAGES")) is not None:
            kw["allowed_images"] = tuple(_list(v))
        if v := get("OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH"):
            kw["allow_scheduling_passthrough"] = _bool("OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH", v)
        if (v := get("OVSERVE_LEADER_ELECTION")) is not None:
            kw["leader_election"] = _bool("OVSERVE_LEADER_ELECTION", v) if v else True
        kw["lease_namespace"] = get("OVSERVE_LEASE_NAMESPACE") or get("POD_NAMESPACE") or "default"
        if v := get("OVSERVE_LEASE_NAME"):
            kw["lease_name"] = v
        if v := get("POD_NAME"):
            kw["identity"] = v
        if v := get("OVSERVE_LEASE_DURATION_SECONDS"):
            kw["lease_duration_s"] = _float("OVSERVE_LEASE_DURATION_SECONDS", v)
        if v := get("OVSERVE_LEASE_RENEW_DEADLINE_SECONDS"):
            kw["renew_deadline_s"] = _float("OVSERVE_LEASE_RENEW_DEADLINE_SECONDS", v)
        if v := get("OVSERVE_LEASE_RETRY_PERIOD_SECONDS"):
            kw["retry_period_s"] = _float("OVSERVE_LEASE_RETRY_PERIOD_SECONDS", v)
        if v := get("OVSERVE_HEALTH_PORT"):
            try:
                port = int(v)
            except ValueError:
                raise ValueError(f"OVSERVE_HEALTH_PORT: expected a port number, got {v!r}") from None
            if not 0 <= port <= 65535:
                raise ValueError(f"OVSERVE_HEALTH_PORT: out of range: {port}")
            kw["health_port"] = port
        if v := get("OVSERVE_STATUS_INTERVAL_SECONDS"):
            kw["status_interval_s"] = _float("OVSERVE_STATUS_INTERVAL_SECONDS", v)
        if v := get("OVSERVE_READBACK_GRACE_SECONDS"):
            kw["readback_grace_s"] = _float("OVSERVE_READBACK_GRACE_SECONDS", v)
        if v := get("OVSERVE_STATUS_HEARTBEAT_SECONDS"):
            kw["status_heartbeat_s"] = _float("OVSERVE_STATUS_HEARTBEAT_SECONDS", v)
        if v := get("OVSERVE_PROMETHEUS_URL"):
            if not v.startswith(("http://", "https://")):
                raise ValueError(f"OVSERVE_PROMETHEUS_URL: expected an http(s) URL, got {v!r}")
            kw["prometheus_url"] = v.rstrip("/")
        if v := get("OVSERVE_RUNTIME_PRESTOP_SECONDS"):
            kw["runtime_prestop_s"] = _seconds("OVSERVE_RUNTIME_PRESTOP_SECONDS", v)
        if v := get("OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS"):
            kw["runtime_drain_timeout_s"] = _seconds("OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS", v)
        if v := get("OVSERVE_LOG_LEVEL"):
            kw["log_level"] = v.upper()
        settings = cls(**kw)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.hf_endpoint.startswith("http://") and not self.hf_allow_http:
            raise ValueError(
                f"OVSERVE_HF_ENDPOINT {self.hf_endpoint} is plain http: Hub tokens and models would travel "
                "unencrypted; set OVSERVE_HF_ALLOW_HTTP=true only for a mirror you trust"
            )
        if not (self.retry_period_s < self.renew_deadline_s < self.lease_duration_s):
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}"
            )


def configure_kopf(kopf_settings: Any, settings: Settings) -> None:
    """Production kopf settings: annotation storages with our prefix, no peering, explicit events only."""
    import kopf

    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=STORAGE_PREFIX)
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=STORAGE_PREFIX, key="last-handled-configuration"
    )
    kopf_settings.persistence.finalizer = FINALIZER
    # Only events we post explicitly (kopf.event); Normal included so that Ready/CB events appear.
    kopf_settings.posting.enabled = True
    kopf_settings.posting.loggers = False
    kopf_settings.posting.level = logging.INFO
    kopf_settings.posting.reporting_component = FIELD_MANAGER
    kopf_settings.posting.reporting_instance = settings.identity[:128]
    kopf_settings.posting.event_name_prefix = "ovserve-"
    # Leader election is a Lease (leader.py); kopf's peering is not used.
    kopf_settings.peering.standalone = True
    # No CRD/namespace scanning: the resource and the namespaces are known, and least-privilege RBAC forbids
    # listing them (kopf would retry the 403s for about a minute at every start and failover).
    kopf_settings.scanning.disabled = True
    kopf_settings.peering.clusterwide = settings.clusterwide
    kopf_settings.watching.server_timeout = 300
    kopf_settings.watching.client_timeout = 330
    kopf_settings.watching.connect_timeout = 30
    kopf_settings.networking.request_timeout = 60
    kopf_settings.networking.connect_timeout = 10
    kopf_settings.execution.max_workers = 16
    # Only the runtime pods and Deployments stream to the operator: the selector goes to the apiserver
    # (kopf's `labels=` on the indexes filters client-side, after every Pod of the cluster was sent).
    from .render import LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY

    children = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_OWNER}"
    kopf_settings.watching.label_selectors["v1", "pods"] = f"{children},{LABEL_COMPONENT}=runtime"
    kopf_settings.watching.label_selectors["apps", "deployments"] = children
