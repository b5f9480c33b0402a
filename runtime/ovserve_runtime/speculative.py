"""Speculative decoding: what was asked, whether it can run, and the report when it cannot (pure).

Resolved like the pipeline: a draft model that cannot serve (missing, another tokenizer, an architecture the
continuous-batching pipeline cannot page, a load error) falls back to serving without speculation, visibly
(report.SpeculativeReport, reason and message), unless `required`, which refuses instead. Prompt lookup needs no
second model and fails only with the pipeline. Both need the continuous-batching text pipeline (LM_CB).

openvino-genai 2026.4 itself accepts a draft whose tokenizer differs from the main model's and generates
garbage-free-looking but wrong-vocabulary proposals (measured with tiny-llm-draft-othertok), so the tokenizers
are compared here, before construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report import SpeculativeMode, SpeculativeReason, SpeculativeReport
from .resolve import LM_XML

DEFAULT_NUM_ASSISTANT_TOKENS = 5  # openvino-genai's default for a draft model
DEFAULT_MAX_NGRAM_SIZE = 3


@dataclass(frozen=True)
class SpeculativeConfig:
    """What the flags ask for (plain values: it crosses to the engine-core process)."""

    mode: SpeculativeMode = SpeculativeMode.NONE
    draft_path: str | None = None
    draft_device: str | None = None  # None: the main model's device
    num_assistant_tokens: int | None = None
    assistant_confidence_threshold: float | None = None
    max_ngram_size: int | None = None
    required: bool = False
    draft_properties: tuple[tuple[str, Any], ...] = ()  # e.g. INFERENCE_NUM_THREADS, as for the main model

    @property
    def on(self) -> bool:
        return self.mode != SpeculativeMode.NONE

    @property
    def counted(self) -> bool:
        """A draft proposing a fixed number per step: the proposed tokens are known (engine counts)."""
        return self.mode == SpeculativeMode.DRAFT and self.assistant_confidence_threshold is None

    def generation_fields(self) -> dict[str, Any]:
        """GenerationConfig fields every request carries while this mode runs (openvino-genai requires them per
        request for prompt lookup)."""
        if self.mode == SpeculativeMode.PROMPT_LOOKUP:
            return {
                "num_assistant_tokens": self.num_assistant_tokens or DEFAULT_NUM_ASSISTANT_TOKENS,
                "max_ngram_size": self.max_ngram_size or DEFAULT_MAX_NGRAM_SIZE,
            }
        if self.mode == SpeculativeMode.DRAFT:
            if self.assistant_confidence_threshold is not None:
                return {"assistant_confidence_threshold": self.assistant_confidence_threshold}
            return {"num_assistant_tokens": self.num_assistant_tokens or DEFAULT_NUM_ASSISTANT_TOKENS}
        return {}


def report(cfg: SpeculativeConfig, reason: SpeculativeReason | None = None, message: str = "") -> SpeculativeReport:
    """The report: running as asked when `reason` is None, else not running for `reason`."""
    if not cfg.on:
        return SpeculativeReport()
    if reason is None:
        return SpeculativeReport(
            requested=cfg.mode, resolved=cfg.mode, required=cfg.required, reason=SpeculativeReason.SPECULATING
        )
    return SpeculativeReport(
        requested=cfg.mode,
        resolved=SpeculativeMode.NONE,
        fallback=True,
        required=cfg.required,
        reason=reason,
        message=message.strip()[:2000],
    )


def draft_problem(cfg: SpeculativeConfig) -> tuple[SpeculativeReason, str] | None:
    """What is wrong with the draft directory itself, before anything is loaded."""
    if cfg.mode != SpeculativeMode.DRAFT:
        return None
    p = Path(cfg.draft_path or "")
    if not cfg.draft_path or not p.is_dir():
        return SpeculativeReason.DRAFT_MODEL_NOT_FOUND, f"draft model directory {cfg.draft_path} does not exist"
    if not (p / LM_XML).is_file():
        return (
            SpeculativeReason.DRAFT_MODEL_NOT_FOUND
            if not any(p.glob("*.xml"))
            else SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE,
            f"no {LM_XML} in the draft directory {cfg.draft_path}: a draft is a text model exported with "
            "--task text-generation-with-past",
        )
    return None


def tokenizer_difference(main: dict[str, int], draft: dict[str, int], main_special: tuple, draft_special: tuple) -> str:
    """'' when the two vocabularies (token -> id) and special ids (bos, eos, pad) are the same, else what differs."""
    if main_special != draft_special:
        return f"special token ids differ (bos, eos, pad): main {main_special}, draft {draft_special}"
    if len(main) != len(draft):
        return f"vocabularies differ: main {len(main)} tokens, draft {len(draft)}"
    diff = [t for t, i in main.items() if draft.get(t) != i]
    if diff:
        return f"vocabularies differ in {len(diff)} tokens (e.g. {diff[0]!r})"
    return ""
