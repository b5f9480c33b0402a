"""Which Responses API field each pipeline honours, accepts without effect, or refuses: the registry of the docs
table (docs/runtime.md, "Responses API": `python -m ovserve_runtime.openai.responses_support --write
docs/runtime.md`) and of the table test that every field of the request model (responses_request.py) is in it.

A Responses request runs as the chat request it amounts to, so the pipeline columns follow chat's (support.py):
structured output and forced calls need constrained decoding (no VLM), images need a VLM pipeline.
"""

from __future__ import annotations

from .. import docblock
from .responses_request import ResponsesRequest
from .support import A, Field, H, R, _same, schema_fields

FIELDS: tuple[Field, ...] = (
    _same("model", "responses", H, "must be the served name (404 otherwise); may be omitted"),
    _same(
        "input",
        "responses",
        H,
        "a string, or items: message (input_text, output_text), function_call, function_call_output, reasoning "
        "(its text to the chat template); item_reference and other item types, input_file and input_audio: refused",
    ),
    Field("input[].content[] input_image", "responses", R, R, H, "VLM only; image_url as a data: URL"),
    _same("instructions", "responses", H, "the system turn, first; not carried over by previous_response_id"),
    _same(
        "tools",
        "responses",
        H,
        "function tools (strict: a forced call always fits); built-in tools (web_search, file_search, "
        "code_interpreter, computer_use, mcp, image_generation, ...): refused naming tools",
    ),
    Field(
        "tool_choice",
        "responses",
        H,
        H,
        "none, auto",
        "required / {type: function, name}: constrained decoding (VLM: refused)",
    ),
    _same("parallel_tool_calls", "responses", H, "false: at most one call"),
    Field(
        "text",
        "responses",
        H,
        H,
        R,
        "format text, json_object, json_schema (the grammar of chat's response_format); verbosity: medium only",
    ),
    _same("max_output_tokens", "responses", H, "a cut answer is status incomplete, reason max_output_tokens"),
    _same("temperature, top_p", "responses", H),
    _same("ignore_eos", "responses", H, "vendor field (vLLM's name), as chat's: generate to max_output_tokens"),
    _same(
        "reasoning",
        "responses",
        H,
        "effort: as chat's reasoning_effort (the chat template's thinking switch; refused without one); summary: "
        "accepted, no summary is generated (the reasoning itself is the reasoning item)",
    ),
    _same("store", "responses", H, "default true: kept in this pod's bounded store (--responses-store-*)"),
    _same(
        "previous_response_id",
        "responses",
        H,
        "this pod's store: an unknown, unstored or evicted id is 404 naming it, never a fresh start",
    ),
    _same(
        "include",
        "responses",
        H,
        "reasoning.encrypted_content: the reasoning text in base64 (not encrypted); the built-in tools' values: "
        "accepted; others refused",
    ),
    _same("stream", "responses", H, "typed events with sequence_number; no [DONE]"),
    _same("stream_options", "responses", A, "include_obfuscation: no obfuscation padding is added"),
    _same("truncation", "responses", R, "disabled only: a prompt over the context is refused"),
    _same(
        "metadata, service_tier, user, safety_identifier, prompt_cache_key, client_metadata",
        "responses",
        A,
        "metadata is echoed in the response",
    ),
    _same("conversation, background, prompt, max_tool_calls, top_logprobs", "responses", R),
    _same("any other field", "responses", R, "400 unknown_parameter, as OpenAI answers"),
)


def covered() -> set[str]:
    return set().union(*(schema_fields(f) for f in FIELDS))


def request_fields() -> set[str]:
    return set(ResponsesRequest.model_fields)


def _rows():
    for f in FIELDS:
        yield (f"`{f.name}`", f.cb, f.legacy, f.vlm, f.note)


DOCS = docblock.Block(
    "responses-fields",
    "ovserve_runtime.openai.responses_support",
    "docs/runtime.md",
    ("field", "CB", "legacy", "VLM", "note"),
    _rows,
)

if __name__ == "__main__":
    raise SystemExit(DOCS.main())
