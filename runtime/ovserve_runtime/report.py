"""The runtime report: the one typed contract between the runtime and the operator.

Served at GET /v1/status and, on failure, written as the last stderr line and to the container's
termination-message file. Imports only pydantic so that the operator can use it without openvino.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PipelineType(StrEnum):
    """What a user may request (same meaning as OpenVINO Model Server's pipeline_type)."""

    AUTO = "AUTO"
    LM = "LM"
    LM_CB = "LM_CB"
    VLM = "VLM"
    VLM_CB = "VLM_CB"


CB_PIPELINES = frozenset({PipelineType.LM_CB, PipelineType.VLM_CB})


class Reason(StrEnum):
    """Why the pipeline is what it is. Values are valid metav1.Condition reasons."""

    CONTINUOUS_BATCHING = "ContinuousBatching"  # a *_CB pipeline runs, as requested or by AUTO
    LEGACY_REQUESTED = "LegacyPipelineRequested"  # LM / VLM pinned: the legacy pipeline, no CB tried
    LOADING = "Loading"
    PAGED_ATTENTION_NOT_SUPPORTED = "PagedAttentionNotSupported"
    PIPELINE_TYPE_MISMATCH = "PipelineTypeMismatch"
    MODEL_NOT_FOUND = "ModelNotFound"
    MODEL_LOAD_FAILED = "ModelLoadFailed"
    DEVICE_UNAVAILABLE = "DeviceUnavailable"


class State(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class PipelineReport(BaseModel):
    model_config = ConfigDict(extra="ignore")

    requested: PipelineType = PipelineType.AUTO
    resolved: PipelineType | None = Field(None, description="LM, LM_CB, VLM or VLM_CB; null until resolved")
    continuousBatching: bool = False
    fallback: bool = False
    reason: Reason = Reason.LOADING
    message: str = ""


class Versions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    openvino: str = ""
    openvinoGenai: str = ""


class RuntimeReport(BaseModel):
    """GET /v1/status. `model` is the served model name, `device` the OpenVINO device (CPU, GPU)."""

    model_config = ConfigDict(extra="ignore")

    state: State = State.LOADING
    model: str = ""
    device: str = "CPU"
    pipeline: PipelineReport = Field(default_factory=PipelineReport)
    versions: Versions = Field(default_factory=Versions)

    def to_line(self) -> str:
        """One JSON line, as written to stderr and the termination-message file."""
        return self.model_dump_json()

    @classmethod
    def from_text(cls, text: str) -> RuntimeReport | None:
        """The report in a termination message or log tail: its last line that parses, else None."""
        for line in reversed((text or "").strip().splitlines()):
            line = line.strip()
            if line.startswith("{") and '"pipeline"' in line:
                try:
                    return cls.model_validate_json(line)
                except ValueError:
                    continue
        return None


__all__ = [
    "CB_PIPELINES",
    "PipelineReport",
    "PipelineType",
    "Reason",
    "RuntimeReport",
    "State",
    "Versions",
]
