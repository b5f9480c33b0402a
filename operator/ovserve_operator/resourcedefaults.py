"""Default resource requests of a runtime container whose spec leaves them unset (pure).

A pod without requests runs BestEffort: the scheduler packs it anywhere and the kubelet evicts it first.
What the operator can know about the model is little: it cannot read a PVC's or a host directory's files,
and a Hub repository's size is only known to the download. So:

- cpu: the setting OVSERVE_DEFAULT_CPU_REQUEST (a scheduling floor; inference uses what the node has).
- memory: the setting OVSERVE_DEFAULT_MEMORY_REQUEST (the runtime plus the weights of a small int4 model),
  plus the KV cache when its size is known: `spec.scheduler.cacheSizeGB` > 0 on a CPU device, for a
  pipeline that may use continuous batching (on a GPU the cache lives in device memory; 0 or unset lets
  openvino-genai size it, unknown here).

Only requests are defaulted, never limits (a CPU limit throttles generation; a memory limit guessed from
these numbers would OOM-kill a bigger model). A resource the spec names in requests or limits is left to
the spec (Kubernetes takes the limit as the request). What was added is reported in status.resourceDefaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ovserve_runtime.report import PipelineType

from . import spec as api
from .settings import MEMORY_PATTERN, Settings

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_MEMORY = re.compile(MEMORY_PATTERN)
_MI = 2**20
_GI = 2**30
_LEGACY = (PipelineType.LM, PipelineType.VLM)


def memory_bytes(quantity: str) -> int:
    """Bytes of a memory quantity in the subset MEMORY_PATTERN accepts (e.g. 1Gi, 512Mi, 2G)."""
    m = _MEMORY.match(quantity)
    if m is None:
        raise ValueError(f"expected a memory quantity like 1Gi or 512Mi, got {quantity!r}")
    number = quantity[: len(quantity) - len(m.group(2) or "")]
    return int(float(number) * _SUFFIX[m.group(2) or ""])


def format_memory(n: int) -> str:
    """Whole Gi when it divides, else Mi rounded up (requests are floors: never round down)."""
    if n % _GI == 0:
        return f"{n // _GI}Gi"
    return f"{-(-n // _MI)}Mi"


@dataclass(frozen=True)
class ResourceDefaults:
    """The requests the operator adds (resource -> quantity) and why; empty when the spec sets them all."""

    requests: dict[str, str]
    message: str

    def status(self) -> dict[str, str | None] | None:
        """status.resourceDefaults: every field present (null when not defaulted), so that a merge patch
        removes one no longer defaulted; None when nothing is."""
        if not self.requests:
            return None
        return {"cpu": self.requests.get("cpu"), "memory": self.requests.get("memory"), "message": self.message}


def kv_cache_bytes(spec: api.LLMServingSpec) -> int:
    """Host memory the KV cache takes, when the spec says how much: a CPU device, a pipeline that may be
    continuous batching, scheduler.cacheSizeGB > 0 (counted as GiB: a floor must not come out short)."""
    size = (spec.scheduler.cacheSizeGB if spec.scheduler else None) or 0
    if spec.device != api.Device.CPU or spec.pipelineType in _LEGACY or size <= 0:
        return 0
    return int(size) * _GI


def defaults(spec: api.LLMServingSpec, settings: Settings) -> ResourceDefaults:
    res = spec.resources or api.ResourceRequirements()
    named = set(res.requests or {}) | set(res.limits or {})
    added: dict[str, str] = {}
    why: list[str] = []
    if "cpu" not in named and settings.default_cpu_request:
        added["cpu"] = settings.default_cpu_request
        why.append(f"cpu {settings.default_cpu_request} (OVSERVE_DEFAULT_CPU_REQUEST)")
    if "memory" not in named and settings.default_memory_request:
        floor = memory_bytes(settings.default_memory_request)
        kv = kv_cache_bytes(spec)
        added["memory"] = format_memory(floor + kv)
        detail = f"{settings.default_memory_request} for the runtime and the weights (OVSERVE_DEFAULT_MEMORY_REQUEST)"
        if kv:
            detail += f" + {format_memory(kv)} KV cache (scheduler.cacheSizeGB)"
        why.append(f"memory {added['memory']} = {detail}")
    message = ""
    if added:
        message = (
            "spec.resources leaves these requests unset; the operator requests "
            + "; ".join(why)
            + ". Set spec.resources.requests to size the pod for the model."
        )
    return ResourceDefaults(added, message)


__all__ = ["MEMORY_PATTERN", "ResourceDefaults", "defaults", "format_memory", "kv_cache_bytes", "memory_bytes"]
