"""Intake: each listed object or watch event of an LLMServing or a child, reduced to what the controller keeps.

Pure and run in the reflector's thread (reflector.py), so that only a slim, `cache.pack`ed snapshot reaches the
event loop: the labels and annotations the operator reads, the child's controller reference, a pod's container
identity and status. The controller (controller.py) puts each change into its caches on the loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import cache, echo, nodes, render, rolloutbudget
from . import spec as api

Key = tuple[str, str]  # (namespace, name)
PRESENT = object()  # a label selector value: the label is set, whatever its value
RUNTIME_POD_LABELS = {
    render.LABEL_MANAGED_BY: render.MANAGED_BY,
    render.LABEL_COMPONENT: "runtime",
    render.LABEL_OWNER: PRESENT,
}


# The labels and annotations the operator reads of a child (the owner key, drift of the rendered labels, the
# template hash, the rollout budget's generation): only these are cached, so that whoever can label a pod cannot
# grow the operator's memory with annotations (issue 38). A longer value than any the operator writes is dropped.
KEPT_LABELS = frozenset(render.labels("-"))
KEPT_ANNOTATIONS = frozenset({render.ANNOTATION_TEMPLATE_HASH, rolloutbudget.ANNOTATION_GENERATION})
KEPT_VALUE_MAX = 256


def kept(values: Mapping[str, Any] | None, keys: frozenset[str]) -> dict[str, str]:
    """Of a label or annotation map, the entries the operator reads."""
    return {k: v for k, v in (values or {}).items() if k in keys and isinstance(v, str) and len(v) <= KEPT_VALUE_MAX}


def controller_ref(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The controller's ownerReference only (ownership.conflict reads nothing else)."""
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    return [] if ref is None else [{k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}]


def pod_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": kept(meta.get("labels"), KEPT_LABELS),
            "annotations": kept(meta.get("annotations"), KEPT_ANNOTATIONS),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        # init container names: an init container without a status yet still counts; what the containers
        # run: a pod of a hand-edited template is not of the current spec (status.is_current)
        "spec": {
            "nodeName": spec.get("nodeName"),  # a node fault speaks for the pods on it (nodes.py)
            "initContainers": [{"name": c.get("name")} for c in spec.get("initContainers") or []],
            "containers": [
                {k: c[k] for k in ("name", "image", "command", "args", "env", "resources") if k in c}
                for c in spec.get("containers") or []
            ],
        },
        "status": dict(body.get("status") or {}),
    }


CHILD_LABELS = {render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_OWNER: PRESENT}


def child_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """What drift is judged on: the live spec and labels (and the Deployment's conditions)."""
    meta = body.get("metadata") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": kept(meta.get("labels"), KEPT_LABELS),
            "annotations": kept(meta.get("annotations"), KEPT_ANNOTATIONS),
            "ownerReferences": controller_ref(meta),
        },
        "spec": dict(body.get("spec") or {}),
        "status": {"conditions": list((body.get("status") or {}).get("conditions") or [])},
    }


def budget_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """A PodDisruptionBudget as drift reads it: without its status, which the disruption controller rewrites at
    every pod readiness change (nothing the operator reads)."""
    snap = child_snapshot(body)
    snap.pop("status")
    return snap


def llmserving_snapshot(body: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {  # no copy needed: the cache keeps it pickled (cache.pack)
        "apiVersion": body.get("apiVersion", api.API_VERSION),
        "kind": body.get("kind", api.KIND),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ServingChange:
    """What one listed object or watch event of an LLMServing does to its cache."""

    uid: str
    key: Key
    deleted: bool = False
    packed: bytes = b""  # the snapshot, `cache.pack`ed in the reflector's thread (as a child's)
    digests: tuple[bytes, bytes] = (b"", b"")  # echo.digests of the event: is it the echo of our own patch?


def serving_change(event_type: str | None, body: Mapping[str, Any]) -> ServingChange:
    """Pure, in any thread (the reflector's): a listed LLMServing (`event_type` None) or a watch event."""
    meta = body.get("metadata") or {}
    uid, key = meta.get("uid") or "", (meta.get("namespace") or "", meta.get("name") or "")
    if event_type == "DELETED":
        return ServingChange(uid, key, deleted=True)
    return ServingChange(uid, key, False, cache.pack(llmserving_snapshot(body, *key)), echo.digests(body))


# (kind, selector, what is kept of one object): the children kinds a status is computed from
CHILD_KINDS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "Pod": ("v1", RUNTIME_POD_LABELS, pod_snapshot),
    "Deployment": ("apps/v1", CHILD_LABELS, child_snapshot),
    "Service": ("v1", CHILD_LABELS, child_snapshot),
    "PodDisruptionBudget": ("policy/v1", CHILD_LABELS, budget_snapshot),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ChildChange:
    """What one listed object or watch event of a pod, Deployment, Service or PodDisruptionBudget does to its
    cache."""

    kind: str
    uid: str
    key: Key | None  # its owner; None: it leaves the cache
    # the snapshot, already `cache.pack`ed in the reflector's thread: a burst of events waits in the loop's
    # queue as one bytes object each, not as dicts and strings, and the loop does not pickle
    packed: bytes = b""


def child_change(kind: str, event_type: str | None, body: Mapping[str, Any]) -> ChildChange:
    """Pure, in any thread (the reflector's, so that only the slim snapshot reaches the loop): a listed object
    (`event_type` None) or a watch event. The labels are checked here too: one that stops matching the
    selector leaves the cache, as a deleted one does."""
    _, selector, snapshot = CHILD_KINDS[kind]
    meta = body.get("metadata") or {}
    uid = meta.get("uid") or ""
    labels = meta.get("labels") or {}
    if event_type == "DELETED" or not cache.labels_match(labels, selector, PRESENT):
        return ChildChange(kind, uid, None)
    key = (meta.get("namespace") or "", labels[render.LABEL_OWNER])
    return ChildChange(kind, uid, key, cache.pack(snapshot(body)))


NODE = "Node"


@dataclasses.dataclass(frozen=True, slots=True)
class NodeChange:
    """What one listed Node or watch event does to the node cache: its view, or None when it is gone."""

    uid: str
    name: str
    view: nodes.NodeView | None


def node_change(event_type: str | None, body: Mapping[str, Any]) -> NodeChange:
    snap = nodes.snapshot(body)
    return NodeChange(snap["uid"], snap["name"], None if event_type == "DELETED" else nodes.view(snap))


Change = ChildChange | ServingChange | NodeChange


def to_change(kind: str, event_type: str | None, body: Mapping[str, Any]) -> Change:
    """In the reflector's thread: one listed object or watch event of `kind`, reduced to its change."""
    if kind == api.KIND:
        return serving_change(event_type, body)
    if kind == NODE:
        return node_change(event_type, body)
    return child_change(kind, event_type, body)
