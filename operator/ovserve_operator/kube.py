"""The Kubernetes API calls the operator makes (the reflectors' LISTs and watches use its dynamic client too).

Plain dicts in and out, through kubernetes' DynamicClient: server-side apply of children, merge
patches of the status subresource, Lease get/create/replace.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from . import drift
from . import spec as api
from .settings import FIELD_MANAGER

log = logging.getLogger(__name__)

_TIMEOUT = 10


def load_config(pool_size: int | None = None) -> Any:
    """ApiClient from the in-cluster service account, else KUBECONFIG / ~/.kube/config. `pool_size`: the
    connections kept open (at least the threads that call at once, or each call past it opens a new one)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # KUBECONFIG read now: the client's own default is read once, when `kubernetes` is first imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    configuration = client.Configuration.get_default_copy()
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


class Kube:
    def __init__(self, api_client: Any = None, pool_size: int | None = None) -> None:
        from kubernetes import dynamic
        from kubernetes.dynamic import exceptions

        self.api_client = api_client or load_config(pool_size)
        self.dyn = dynamic.DynamicClient(self.api_client)
        self.errors = exceptions
        self._resources: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._lock:
            if key not in self._resources:
                self._resources[key] = self.dyn.resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def warm_up(self) -> None:
        for av, kind in (
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
            ("coordination.k8s.io/v1", "Lease"),
            (api.API_VERSION, api.KIND),
        ):
            self.resource(av, kind)

    # -------------------------------------------------------------------------------- children
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with our field manager (force: the operator owns these fields)."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        out = self.dyn.server_side_apply(
            res,
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            _request_timeout=_TIMEOUT,
        )
        return out.to_dict()

    def apply_exact(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Server-side apply, then write the spec back where the live object still differs from `obj`
        (what another field manager added). Returns the live object and the paths that were reverted."""
        live = self.apply(obj)
        reverted: list[str] = []
        for _ in range(3):  # the write is guarded by the resourceVersion read: a controller may write meanwhile
            paths = [p for p in drift.differences(obj, live) if p.startswith("spec")]
            if not paths:
                break
            reverted = paths
            try:
                live = self.replace_spec(live, drift.healed(obj, live))
            except (self.errors.UnprocessibleEntityError, self.errors.ConflictError):  # the version test failed
                meta = obj["metadata"]
                found = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
                if found is None:
                    break
                live = found
        return live, reverted

    def replace_spec(self, live: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """Write `spec` over a live child's spec (a JSON patch with our field manager), only if the object is
        still the version read (resourceVersion tested): reverts what server-side apply cannot, e.g. a list
        item another field manager added."""
        meta = live["metadata"]
        out = self.dyn.patch(
            self.resource(live["apiVersion"], live["kind"]),
            body=[
                {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                {"op": "replace", "path": "/spec", "value": spec},
            ],
            name=meta["name"],
            namespace=meta.get("namespace"),
            content_type="application/json-patch+json",
            field_manager=FIELD_MANAGER,
            _request_timeout=_TIMEOUT,
        )
        return out.to_dict()

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.dyn.get(
                self.resource(api_version, kind), name=name, namespace=namespace, _request_timeout=_TIMEOUT
            ).to_dict()
        except self.errors.NotFoundError:
            return None

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete; with `uid`, only that very object (a precondition: never a namesake made meanwhile)."""
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.dyn.delete(
                self.resource(api_version, kind), name=name, namespace=namespace, body=body, _request_timeout=_TIMEOUT
            )
        except self.errors.NotFoundError:
            pass

    def served(self, group_version: str, plural: str) -> bool:
        """Whether the apiserver serves `plural` in `group_version` now (an uncached discovery call)."""
        try:
            doc = self.dyn.request("GET", f"/apis/{group_version}", _request_timeout=5).to_dict()
        except (self.errors.NotFoundError, self.errors.ServiceUnavailableError):
            return False  # the group is not installed, or its API server is down
        return any(r.get("name") == plural for r in (doc or {}).get("resources") or [])

    # -------------------------------------------------------------------------------- status
    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any]) -> None:
        res = self.resource(api.API_VERSION, api.KIND).subresources["status"]
        self.dyn.patch(
            res,
            body={"status": status_patch},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
            field_manager=FIELD_MANAGER,
            _request_timeout=_TIMEOUT,
        )

    def list_pod_events(self, namespace: str, pod_name: str) -> list[dict[str, Any]]:
        """core/v1 Events about one pod (the kubelet's FailedMount lives only there). Needs `list` on
        events in the namespace, nothing more."""
        out = self.dyn.get(
            self.resource("v1", "Event"),
            namespace=namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod_name}",
            _request_timeout=_TIMEOUT,
        )
        return list(out.to_dict().get("items") or [])

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.dyn.create(self.resource("v1", "Event"), body=body, namespace=namespace, _request_timeout=_TIMEOUT)

    # -------------------------------------------------------------------------------- lease
    def get_lease(self, namespace: str, name: str) -> dict | None:
        try:
            return self.dyn.get(
                self.resource("coordination.k8s.io/v1", "Lease"),
                name=name,
                namespace=namespace,
                _request_timeout=5,
            ).to_dict()
        except self.errors.NotFoundError:
            return None

    def create_lease(self, namespace: str, body: dict) -> None:
        self.dyn.create(
            self.resource("coordination.k8s.io/v1", "Lease"),
            body=body,
            namespace=namespace,
            _request_timeout=5,
        )

    def replace_lease(self, namespace: str, name: str, body: dict) -> None:
        self.dyn.replace(
            self.resource("coordination.k8s.io/v1", "Lease"),
            body=body,
            name=name,
            namespace=namespace,
            _request_timeout=5,
        )


class LeaseAdapter:
    """`LeaderElector`'s client interface over Kube."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def get(self, namespace: str, name: str) -> dict | None:
        return self.kube.get_lease(namespace, name)

    def create(self, namespace: str, body: dict) -> None:
        self.kube.create_lease(namespace, body)

    def replace(self, namespace: str, name: str, body: dict) -> None:
        self.kube.replace_lease(namespace, name, body)

    def is_conflict(self, exc: BaseException) -> bool:
        return isinstance(exc, (self.kube.errors.ConflictError, self.kube.errors.UnprocessibleEntityError))


def error_status(exc: BaseException) -> int | None:
    """The HTTP status of an API error (kubernetes' ApiException / DynamicApiError), else None."""
    code = getattr(exc, "status", None)
    return code if isinstance(code, int) else None


def is_refusal(exc: BaseException) -> bool:
    """The apiserver refused the request itself (invalid, forbidden by a webhook or quota): retrying the
    same body cannot help. 409 (conflict) and 429 (throttled) are transient."""
    code = error_status(exc)
    return code is not None and 400 <= code < 500 and code not in (409, 429)


def error_text(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message", str(exc))
        except (ValueError, AttributeError):
            pass
    return str(exc)


SERVED_TTL_S = 15.0  # an optional API (KEDA's, GIE's) installed later is noticed within this


class ServedCache:
    """Whether one optional API (a CRD another project installs) is served, asked at most every SERVED_TTL_S
    (thread-safe: read from the io pool). One per API per controller."""

    def __init__(self, group_version: str, plural: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.group_version, self.plural, self.clock = group_version, plural, clock
        self._lock = threading.Lock()
        self._served: tuple[float, bool] | None = None

    def served(self, kube: Kube) -> bool:
        with self._lock:
            if self._served is not None and self.clock() - self._served[0] < SERVED_TTL_S:
                return self._served[1]
        served = kube.served(self.group_version, self.plural)
        with self._lock:
            self._served = (self.clock(), served)
        return served
