"""Node faults: what a Node says about the runtime pods on it, and why a terminating pod was taken off its node.

Pure functions over plain dicts. The operator watches the Nodes (controller.py, one cluster-wide reflector) and
keeps of each only `snapshot`: its Ready condition, whether it is cordoned, and the node.kubernetes.io taints.
The status rules (rules.py) read what `fault` and `eviction` say through PodFacts and Facts, so that a pod that is
not ready because its node is NotReady, unreachable, gone or drained reads as that (NodeNotReady, PodRescheduled),
never as a model that is loading.

Kubernetes' own signals, in the order they come when a kubelet stops: the node controller sets the Node's Ready
condition Unknown after its grace period (node-monitor-grace-period) and taints it
node.kubernetes.io/unreachable; it marks the node's pods not Ready (their Service endpoints go); after the pods'
toleration of that taint (300 s by default) the taint manager deletes them with the pod condition DisruptionTarget
(reason DeletionByTaintManager). They stay Terminating until the kubelet comes back or the Node is deleted; the
Deployment's replacements start on the nodes that remain. A drain cordons the node (spec.unschedulable) and
evicts its pods through the Eviction API (DisruptionTarget, reason EvictionByEvictionAPI), as the
PodDisruptionBudget allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
KEPT_TAINTS = frozenset({TAINT_UNREACHABLE, TAINT_NOT_READY, TAINT_UNSCHEDULABLE})
MESSAGE_MAX = 256  # of the Node's Ready message kept (the kubelet's can be long)

# the pod condition Kubernetes sets on a pod it is about to delete, and its reasons (k8s.io/api core/v1)
DISRUPTION_TARGET = "DisruptionTarget"
BY_EVICTION_API = "EvictionByEvictionAPI"  # kubectl drain, or any client of the Eviction API
BY_TAINT_MANAGER = "DeletionByTaintManager"  # its node NotReady or unreachable past the pod's toleration
BY_POD_GC = "DeletionByPodGC"  # its Node object was deleted
BY_KUBELET = "TerminationByKubelet"  # node-pressure eviction or a graceful node shutdown


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One Node as the status rules need it."""

    name: str
    ready: str = ""  # the Ready condition's status: "True", "False", "Unknown"; "" before the kubelet said
    since: str = ""  # its lastTransitionTime
    reason: str = ""
    message: str = ""
    unschedulable: bool = False  # cordoned (kubectl cordon, drain)
    taints: frozenset[str] = frozenset()  # of KEPT_TAINTS


def snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a Node (in the reflector's thread): its name and what `view` reads. Node objects are large
    (images, addresses, capacity): none of that is kept."""
    meta, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
    return {
        "name": meta.get("name") or "",
        "uid": meta.get("uid") or "",
        "ready": str(ready.get("status") or ""),
        "since": str(ready.get("lastTransitionTime") or ""),
        "reason": str(ready.get("reason") or ""),
        "message": str(ready.get("message") or "")[:MESSAGE_MAX],
        "unschedulable": bool(spec.get("unschedulable")),
        "taints": sorted({t.get("key") for t in spec.get("taints") or [] if t.get("key") in KEPT_TAINTS}),
    }


def view(snap: Mapping[str, Any]) -> NodeView:
    return NodeView(
        name=snap.get("name") or "",
        ready=snap.get("ready") or "",
        since=snap.get("since") or "",
        reason=snap.get("reason") or "",
        message=snap.get("message") or "",
        unschedulable=bool(snap.get("unschedulable")),
        taints=frozenset(snap.get("taints") or ()),
    )


def node_name(pod: Mapping[str, Any]) -> str:
    """The node a pod is bound to ("" while unscheduled)."""
    return (pod.get("spec") or {}).get("nodeName") or ""


def fault(name: str, node: NodeView | None, known: bool) -> str | None:
    """Why pods on node `name` cannot serve, or None (the node is fine, or nothing is known of it). `node`: the
    Node as cached (None: not in the cache); `known`: the Nodes are watched and listed (a Node absent then was
    deleted; when they cannot be read, an absent Node says nothing)."""
    if not name:
        return None
    if node is None:
        return f"node {name} is gone (its Node object was deleted)" if known else None
    since = f" since {node.since}" if node.since else ""
    why = ": ".join(x for x in (node.reason, node.message) if x)
    why = f" ({why})" if why else ""
    if node.ready == "Unknown":
        return f"node {name} is unreachable: its kubelet stopped reporting (Ready Unknown{since}{why})"
    if node.ready == "False":
        return f"node {name} is NotReady{since}{why}"
    if TAINT_UNREACHABLE in node.taints:
        return f"node {name} is unreachable (tainted {TAINT_UNREACHABLE})"
    if TAINT_NOT_READY in node.taints:
        return f"node {name} is not ready (tainted {TAINT_NOT_READY})"
    return None


def disruption(pod: Mapping[str, Any]) -> str | None:
    """The reason of a pod's DisruptionTarget condition (Kubernetes is deleting it, and says why), or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            return str(c.get("reason") or "")
    return None


def eviction(pod: Mapping[str, Any], node: NodeView | None, known: bool) -> str | None:
    """Why a terminating pod was taken off its node, when a node fault or a drain did it (None: deleted for any
    other reason, e.g. a rollout or a scale-down, which the rules do not name)."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    name = node_name(pod)
    reason, bad = disruption(pod), fault(name, node, known)
    if reason == BY_EVICTION_API and node is not None and node.unschedulable:
        return f"evicted by a drain of node {name} (cordoned)"
    if reason == BY_TAINT_MANAGER:
        return f"evicted: {bad}" if bad else f"evicted from node {name} by the taint manager"
    if reason == BY_POD_GC:
        return f"deleted with node {name}"
    if reason == BY_KUBELET:
        return f"evicted by the kubelet of node {name} (node pressure or shutdown)"
    if reason == BY_EVICTION_API:
        return f"evicted from node {name} through the Eviction API"
    return f"terminating: {bad}" if bad else None
