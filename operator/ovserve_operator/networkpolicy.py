"""The optional NetworkPolicy of an LLMServing's runtime pods (pure).

A tenant's model API is open to every pod of the cluster unless something says otherwise. With
`spec.networkPolicy` (or the operator's default, OVSERVE_NETWORK_POLICY_DEFAULT) the runtime pods admit
ingress only on port 8000, and only from: the pods of their own namespace (unless turned off), the
namespaces the spec names or selects by label, and the operator's pods (which read each pod's
/v1/status). Kubelet probes come from the node, which NetworkPolicy implementations admit.
"""

from __future__ import annotations

from typing import Any

from ovserve_runtime import endpoints

from . import spec as api
from .settings import Settings

NAME_LABEL = "kubernetes.io/metadata.name"  # set by the apiserver on every namespace


def wanted(spec: api.LLMServingSpec, settings: Settings) -> bool:
    """Whether this LLMServing gets a NetworkPolicy: its spec says so, else the operator's default."""
    if spec.networkPolicy is not None:
        return spec.networkPolicy.enabled
    return settings.network_policy_default


def peers(spec: api.LLMServingSpec, settings: Settings) -> list[dict[str, Any]]:
    """The `from` list: who may connect to port 8000."""
    cfg = spec.networkPolicy or api.NetworkPolicyConfig()
    out: list[dict[str, Any]] = []
    if cfg.allowSameNamespace:
        out.append({"podSelector": {}})
    if cfg.allowedNamespaces:
        names = sorted(set(cfg.allowedNamespaces))
        out.append(
            {"namespaceSelector": {"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": names}]}}
        )
    if cfg.allowedNamespaceLabels:
        out.append({"namespaceSelector": {"matchLabels": dict(cfg.allowedNamespaceLabels)}})
    if settings.operator_namespace:
        operator: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAME_LABEL: settings.operator_namespace}}}
        if settings.operator_pod_labels:
            operator["podSelector"] = {"matchLabels": dict(settings.operator_pod_labels)}
        out.append(operator)
    return out


def render_network_policy(
    name: str, spec: api.LLMServingSpec, settings: Settings, metadata: dict[str, Any], selector: dict[str, str]
) -> dict[str, Any]:
    """The NetworkPolicy child (metadata and pod selector from render.py)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress"],
            "ingress": _ingress(peers(spec, settings)),
        },
    }


def _ingress(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A rule with an empty `from` admits everyone: with no peer at all there is no rule, which admits no one.
    return [{"from": sources, "ports": [{"protocol": "TCP", "port": endpoints.PORT}]}] if sources else []


__all__ = ["NAME_LABEL", "peers", "render_network_policy", "wanted"]
