"""A request's generation parameters: the openvino-genai GenerationConfig fields it sets, as plain values.

Pure: `generation_fields(body, max_tokens)` is table-tested; the transport copies the fields onto the
engine's GenerationConfig (and across the engine-core pipe, engine/wire.CONFIG_FIELDS).
"""

from __future__ import annotations

from typing import Any

from .request import ChatRequest, CompletionRequest


def generation_fields(body: ChatRequest | CompletionRequest, max_tokens: int) -> dict[str, Any]:
    """GenerationConfig field -> value. Greedy unless a temperature samples; a seed without sampling changes
    nothing (greedy decoding is deterministic)."""
    f: dict[str, Any] = {"max_new_tokens": max_tokens, "do_sample": body.sampling}
    if body.sampling:
        f["temperature"] = body.temperature
        if body.top_p is not None:
            f["top_p"] = body.top_p
        if body.top_k:
            f["top_k"] = body.top_k
        if body.min_p:
            f["min_p"] = body.min_p
        if body.seed is not None:
            f["rng_seed"] = body.seed
    if body.presence_penalty:
        f["presence_penalty"] = body.presence_penalty
    if body.frequency_penalty:
        f["frequency_penalty"] = body.frequency_penalty
    if body.repetition_penalty:
        f["repetition_penalty"] = body.repetition_penalty
    if body.stop:
        f["stop_strings"] = set(body.stop)
    if body.ignore_eos:
        f["ignore_eos"] = True
    if getattr(body, "logprobs", None) is True:
        f["logprobs"] = 1  # the sampled token's log-probability (openvino-genai gives no alternatives)
    if body.min_tokens:
        f["min_new_tokens"] = min(body.min_tokens, max_tokens)
    return f
