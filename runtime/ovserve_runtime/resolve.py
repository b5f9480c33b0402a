"""Pipeline resolution: the single source of truth for which pipeline runs (DESIGN.md).

Everything here is pure (no openvino import): the directory layout, the structural facts about the IR
and the errors raised by openvino-genai come in as plain values, decisions and reports come out, so the
whole rule set is unit-tested table-driven. `engine` carries the decisions out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .report import CB_PIPELINES, PipelineReport, PipelineType, Reason

LM_XML = "openvino_model.xml"
VLM_LANGUAGE_XML = "openvino_language_model.xml"
VLM_TEXT_EMBEDDINGS_XML = "openvino_text_embeddings_model.xml"
VLM_VISION_EMBEDDINGS_BIN = "openvino_vision_embeddings_model.bin"

# The texts openvino raises (SDPAToPagedAttention pass) and the legacy stateful pipeline's first generate.
NO_SDPA_TEXT = "No ScaledDotProductAttention operation observed in the graph"
STATELESS_TEXTS = ("Model is supposed to be stateful", "Port for tensor name beam_idx was not found")
REEXPORT_HINT = (
    "The model is a stateless export (no KV-cache state, no beam_idx input), which openvino-genai cannot "
    "serve. Re-export it with the KV cache: optimum-cli export openvino --model <model> "
    "--task text-generation-with-past <output_dir> (image-text-to-text for a VLM), "
    "not --task text-generation."
)


@dataclass(frozen=True)
class Layout:
    """What the model directory holds (file names only; no IR parsing)."""

    exists: bool
    has_lm: bool = False  # openvino_model.xml
    has_vlm: bool = False  # text embeddings xml + vision embeddings bin (DESIGN.md's VLM rule)
    has_language_model: bool = False  # openvino_language_model.xml
    max_position: int | None = None  # config.json max_position_embeddings (text_config for a VLM)

    @property
    def kind(self) -> PipelineType | None:
        """LM or VLM by directory content; None when the directory holds neither."""
        if self.has_vlm:
            return PipelineType.VLM
        if self.has_lm:
            return PipelineType.LM
        return None

    @property
    def language_xml(self) -> str:
        """The IR that carries the attention layers (the one PagedAttention is applied to)."""
        return VLM_LANGUAGE_XML if self.has_vlm else LM_XML


def inspect_dir(path: str | Path) -> Layout:
    p = Path(path)
    if not p.is_dir():
        return Layout(exists=False)
    return Layout(
        exists=True,
        has_lm=(p / LM_XML).is_file(),
        has_vlm=(p / VLM_TEXT_EMBEDDINGS_XML).is_file() and (p / VLM_VISION_EMBEDDINGS_BIN).is_file(),
        has_language_model=(p / VLM_LANGUAGE_XML).is_file(),
        max_position=_max_position(p / "config.json"),
    )


def _max_position(config: Path) -> int | None:
    try:
        cfg = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    for c in (cfg, cfg.get("text_config") or {}, cfg.get("llm_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            v = c.get(key) if isinstance(c, dict) else None
            if isinstance(v, int) and v > 0:
                return v
    return None


@dataclass(frozen=True)
class Structure:
    """Structural facts about the language-model IR, found before any pipeline is constructed."""

    has_sdpa: bool
    stateful: bool
    has_beam_idx: bool
    pa_error: str | None = None  # what openvino's paged_attention_transformation raised on a clone; None = ok

    @property
    def pa_supported(self) -> bool:
        return self.pa_error is None and self.has_sdpa and self.stateful

    @property
    def stateless(self) -> bool:
        return not self.stateful or not self.has_beam_idx


def classify_error(text: str) -> Reason:
    """Reason for an error raised by openvino / openvino-genai while constructing or first generating."""
    if NO_SDPA_TEXT in text:
        return Reason.PAGED_ATTENTION_NOT_SUPPORTED
    return Reason.MODEL_LOAD_FAILED


def is_stateless_error(text: str) -> bool:
    return any(t in text for t in STATELESS_TEXTS)


def load_failed_message(text: str) -> str:
    """The message for ModelLoadFailed: the original error, plus how to re-export a stateless model."""
    text = text.strip()
    if is_stateless_error(text):
        return f"{REEXPORT_HINT}\nOriginal error: {text}"
    return text


def structural_reason(s: Structure) -> Reason | None:
    """What the structural check predicts the CB attempt will fail with (None: CB should work)."""
    if s.pa_error is not None:
        return classify_error(s.pa_error)
    if not s.stateful:
        return Reason.MODEL_LOAD_FAILED
    if not s.has_sdpa:
        return Reason.PAGED_ATTENTION_NOT_SUPPORTED
    return None


def device_available(device: str, available: list[str] | tuple[str, ...]) -> bool:
    """`GPU` is available when openvino lists GPU or GPU.N; a full name must match exactly."""
    d = device.upper()
    return any(a.upper() == d or a.upper().startswith(d + ".") for a in available)


@dataclass(frozen=True)
class Failure:
    reason: Reason
    message: str


@dataclass(frozen=True)
class Plan:
    """What to construct: the model kind, whether to try CB first, and what to do if CB is impossible."""

    requested: PipelineType
    kind: PipelineType  # LM or VLM
    try_cb: bool
    allow_fallback: bool  # AUTO only
    notes: list[str] = field(default_factory=list)

    @property
    def cb_type(self) -> PipelineType:
        return PipelineType.VLM_CB if self.kind == PipelineType.VLM else PipelineType.LM_CB


def plan(requested: PipelineType, layout: Layout, device: str, available_devices: list[str]) -> Plan | Failure:
    """Everything decidable before openvino touches the model: directory, type match, device."""
    if not layout.exists:
        return Failure(Reason.MODEL_NOT_FOUND, "model directory does not exist")
    kind = layout.kind
    if kind is None:
        return Failure(
            Reason.MODEL_NOT_FOUND,
            f"no OpenVINO model in the directory: expected {LM_XML} (LM) or {VLM_TEXT_EMBEDDINGS_XML} and "
            f"{VLM_VISION_EMBEDDINGS_BIN} (VLM)",
        )
    if kind == PipelineType.VLM and not layout.has_language_model:
        return Failure(Reason.MODEL_NOT_FOUND, f"VLM directory lacks {VLM_LANGUAGE_XML}")
    wants_vlm = requested in (PipelineType.VLM, PipelineType.VLM_CB)
    wants_lm = requested in (PipelineType.LM, PipelineType.LM_CB)
    if wants_vlm and kind != PipelineType.VLM:
        return Failure(
            Reason.PIPELINE_TYPE_MISMATCH,
            f"pipeline type {requested} requested, but the directory holds a text-only model "
            f"(no {VLM_TEXT_EMBEDDINGS_XML} / {VLM_VISION_EMBEDDINGS_BIN}); use LM, LM_CB or AUTO",
        )
    if wants_lm and kind != PipelineType.LM:
        return Failure(
            Reason.PIPELINE_TYPE_MISMATCH,
            f"pipeline type {requested} requested, but the directory holds a vision-language model; "
            "use VLM, VLM_CB or AUTO",
        )
    if not device_available(device, available_devices):
        return Failure(
            Reason.DEVICE_UNAVAILABLE,
            f"device {device} is not available on this machine (openvino sees: "
            f"{', '.join(available_devices) or 'none'})",
        )
    return Plan(
        requested=requested,
        kind=kind,
        try_cb=requested not in (PipelineType.LM, PipelineType.VLM),
        allow_fallback=requested == PipelineType.AUTO,
    )


@dataclass(frozen=True)
class Legacy:
    """Load the legacy pipeline (SDPA forced) and report it like this."""

    report: PipelineReport


@dataclass(frozen=True)
class Refuse:
    report: PipelineReport


def after_cb_failure(p: Plan, error: str) -> Legacy | Refuse:
    """CB could not be constructed (or the structural check predicted so, with the same text)."""
    reason = classify_error(error)
    if reason == Reason.PAGED_ATTENTION_NOT_SUPPORTED:
        if p.allow_fallback:
            return Legacy(
                PipelineReport(
                    requested=p.requested,
                    resolved=p.kind,
                    continuousBatching=False,
                    fallback=True,
                    reason=reason,
                    message=error.strip(),
                )
            )
        return Refuse(failed_report(p.requested, reason, error.strip()))
    return Refuse(failed_report(p.requested, Reason.MODEL_LOAD_FAILED, load_failed_message(error)))


def cb_report(p: Plan) -> PipelineReport:
    return PipelineReport(
        requested=p.requested,
        resolved=p.cb_type,
        continuousBatching=True,
        fallback=False,
        reason=Reason.CONTINUOUS_BATCHING,
        message="",
    )


def legacy_report(p: Plan) -> PipelineReport:
    """LM / VLM pinned: legacy directly."""
    return PipelineReport(
        requested=p.requested,
        resolved=p.kind,
        continuousBatching=False,
        fallback=False,
        reason=Reason.LEGACY_REQUESTED,
        message="",
    )


def failed_report(requested: PipelineType, reason: Reason, message: str) -> PipelineReport:
    return PipelineReport(
        requested=requested,
        resolved=None,
        continuousBatching=False,
        fallback=False,
        reason=reason,
        message=message,
    )


def is_cb(t: PipelineType | None) -> bool:
    return t in CB_PIPELINES
