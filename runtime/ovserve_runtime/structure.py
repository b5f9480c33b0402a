"""Structural pre-load check of the language-model IR (openvino, no openvino-genai pipeline).

Runs openvino's own `paged_attention_transformation` (the SDPAToPagedAttention pass that continuous
batching applies) on a clone of the model: it raises the very texts a CB construction would, in
milliseconds, so the reason is known before loading. The op scan and state facts come along.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .resolve import Structure

log = logging.getLogger("ovserve.structure")


def check(xml: str | Path, core=None) -> Structure:
    import openvino as ov

    core = core or ov.Core()
    model = core.read_model(str(xml))
    has_sdpa = any(op.get_type_name() == "ScaledDotProductAttention" for op in model.get_ops())
    stateful = len(model.get_sinks()) > 0
    has_beam_idx = any("beam_idx" in port.get_names() for port in model.inputs)
    pa_error: str | None = None
    try:
        from openvino._offline_transformations import paged_attention_transformation
    except ImportError:  # pragma: no cover - every supported openvino has it
        paged_attention_transformation = None
    if paged_attention_transformation is not None:
        try:
            paged_attention_transformation(model.clone())
        except Exception as exc:
            pa_error = str(exc).strip()
    elif not has_sdpa:
        pa_error = "No ScaledDotProductAttention operation observed in the graph (op scan)"
    return Structure(has_sdpa=has_sdpa, stateful=stateful, has_beam_idx=has_beam_idx, pa_error=pa_error)
