"""Tenant policy: which parts of an LLMServing spec the operator's settings allow (pure).

Anyone who may create an LLMServing gets pods created by the operator's ServiceAccount, so the operator,
not the tenant, decides whether a spec may mount a host directory, pick its own runtime image or pass
nodeSelector, tolerations and affinity through to the scheduler. A denied spec is never rendered with the field
silently dropped: the operator reports reason PolicyDenied with the messages below, which name the
setting (and the chart value) that would allow it.
"""

from __future__ import annotations

from . import spec as api
from .settings import Settings


def _at_boundary(image: str, prefix: str) -> bool:
    """Whether `image` continues `prefix` at a path, tag or digest boundary. A ':' followed by a path is a
    registry port, not a tag: `registry.example` must not allow `registry.example:5000/anything`."""
    if prefix.endswith(("/", "@")):
        return True
    rest = image[len(prefix) :]
    if rest[0] in "/@":
        return True
    if rest[0] == ":" or prefix.endswith(":"):
        return "/" not in rest  # a tag (and maybe a digest) ends the reference; a port is followed by a path
    return False


def image_allowed(image: str, allowed: tuple[str, ...]) -> bool:
    """`allowed` holds image references or prefixes ending at a path, tag or digest boundary:
    `registry.example/ovserve` allows `registry.example/ovserve:1.2` and `.../ovserve@sha256:...`, never
    `registry.example/ovserve-evil`; a host is a host with its port (`registry.example:5000/` is another
    registry than `registry.example/`); `*` allows any image."""
    for a in allowed:
        if a == "*" or image == a:
            return True
        if a and image.startswith(a) and _at_boundary(image, a):
            return True
    return False


def violations(spec: api.LLMServingSpec, settings: Settings) -> list[str]:
    """What the spec asks for that the policy settings deny; empty = allowed."""
    out: list[str] = []
    if spec.model.hostPath is not None and not settings.allow_host_path:
        out.append(
            "spec.model.hostPath is denied: mounting host directories is off "
            "(operator setting OVSERVE_ALLOW_HOSTPATH, chart value policy.allowHostPath)"
        )
    draft = spec.speculative.draftModel if spec.speculative is not None else None
    if draft is not None and draft.hostPath is not None and not settings.allow_host_path:
        out.append(
            "spec.speculative.draftModel.hostPath is denied: mounting host directories is off "
            "(operator setting OVSERVE_ALLOW_HOSTPATH, chart value policy.allowHostPath)"
        )
    if spec.cache is not None and spec.cache.mode == api.CompileCacheMode.NODE and not settings.allow_host_path:
        out.append(
            "spec.cache.mode node is denied: it mounts a host directory and mounting host directories is off "
            "(operator setting OVSERVE_ALLOW_HOSTPATH, chart value policy.allowHostPath)"
        )
    if spec.image and spec.image != settings.runtime_image and not image_allowed(spec.image, settings.allowed_images):
        allowed = ", ".join(settings.allowed_images) or "none"
        out.append(
            f"spec.image {spec.image} is denied: allowed runtime image overrides: {allowed} "
            "(operator setting OVSERVE_ALLOWED_IMAGES, chart value policy.allowedImages)"
        )
    if spec.networkPolicy is not None and spec.networkPolicy.enabled and not settings.network_policies:
        out.append(
            "spec.networkPolicy is denied: the operator does not manage NetworkPolicies "
            "(operator setting OVSERVE_NETWORK_POLICIES, chart value networkPolicy.enabled)"
        )
    if spec.routing is not None and spec.routing.enabled and not settings.routing:
        out.append(
            "spec.routing is denied: the operator does not manage InferencePools "
            "(operator setting OVSERVE_ROUTING, chart value routing.enabled)"
        )
    picker = spec.routing.picker if spec.routing is not None and spec.routing.enabled else None
    if picker is not None and picker.enabled:
        if not settings.routing_picker:
            out.append(
                "spec.routing.picker is denied: the operator does not run endpoint pickers "
                "(operator setting OVSERVE_ROUTING_PICKER, chart value routing.picker)"
            )
        image = picker.image
        if image and image != settings.picker_image and not image_allowed(image, settings.allowed_images):
            allowed = ", ".join(settings.allowed_images) or "none"
            out.append(
                f"spec.routing.picker.image {image} is denied: allowed image overrides: {allowed} "
                "(operator setting OVSERVE_ALLOWED_IMAGES, chart value policy.allowedImages)"
            )
    if not settings.allow_scheduling_passthrough:
        fields = [
            name
            for name in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints")
            if getattr(spec, name)
        ]
        if fields:
            out.append(
                f"spec.{' and spec.'.join(fields)} denied: scheduling pass-through is off "
                "(operator setting OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH, chart value policy.allowSchedulingPassThrough)"
            )
    return out
