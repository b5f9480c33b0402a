"""Which request field each pipeline honours, accepts without effect, or refuses: one registry for the
pipeline checks (`check`), the docs table (docs/runtime.md, "OpenAI API": `python -m
ovserve_runtime.openai.support --write docs/runtime.md`) and the table test that every schema field is in it.

Pipelines: CB (LM_CB, VLM_CB: continuous batching), legacy (LM: the stateful LLMPipeline), VLM (VLM and
VLM_CB: image input). Statuses:
  honoured  the answer follows it
  accepted  it cannot change the answer (metadata, user, ...): accepted, no effect
  refused   400 naming it (`error.param`) when set to anything but its neutral value (given in the note)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import docblock
from .errors import ApiError
from .request import ChatRequest, CompletionRequest

H, A, R = "honoured", "accepted", "refused"


@dataclass(frozen=True)
class Field:
    name: str
    endpoints: str  # "chat", "completions" or "both"
    cb: str
    legacy: str
    vlm: str
    note: str = ""


def _same(name: str, endpoints: str, status: str, note: str = "") -> Field:
    return Field(name, endpoints, status, status, status, note)


FIELDS: tuple[Field, ...] = (
    _same("model", "both", H, "must be the served name (404 otherwise); may be omitted"),
    _same("messages", "chat", H, "roles system, developer, user, assistant; text and image_url parts"),
    _same("messages[].role: tool", "chat", H, "a tool result (tool_call_id required), to the chat template"),
    _same(
        "messages[].tool_calls, tool_call_id, reasoning_content",
        "chat",
        H,
        "to the chat template (tool-call arguments as an object); 400 tools when it renders no tools",
    ),
    _same("messages[].role: function, function_call", "chat", R, "the deprecated functions API"),
    _same("messages[].name", "chat", A, "the chat template input has role and content only"),
    _same("messages[].refusal, audio", "chat", R, "null only"),
    Field("messages[].content[].image_url", "chat", R, R, H, "VLM only; data: URLs; --max-images and size bounds"),
    _same("messages[].content[] input_audio, file", "chat", R),
    _same("prompt", "completions", H, "a string or a list of one string"),
    _same("stream", "both", H),
    _same("stream_options.include_usage", "both", H),
    _same("stream_options.include_obfuscation", "both", R, "false only"),
    _same("max_tokens, max_completion_tokens", "both", H, "default --default-max-tokens, capped by the context"),
    _same("temperature, top_p, seed", "both", H, "temperature 0 or unset: greedy (seed has no effect then)"),
    _same("presence_penalty, frequency_penalty", "both", H),
    _same("stop", "both", H, "up to 16 strings; the text ends before the first one (also inside a token)"),
    _same(
        "n",
        "both",
        "honoured (not streamed)",
        "1..16; n > 1 with stream: 400; with a seed s, choice i samples with s + i",
    ),
    _same("logit_bias", "both", R, "{} only"),
    Field("logprobs", "chat", H, R, "VLM_CB only", "the sampled tokens' log-probabilities; bytes; top_logprobs []"),
    _same("top_logprobs", "chat", R, "0 only: openvino-genai gives the sampled token's log-probability only"),
    _same("logprobs (completions)", "completions", R, "0 only"),
    Field("response_format: json_object, json_schema", "chat", H, H, R, "constrained decoding (compact JSON)"),
    _same("response_format: text", "chat", H),
    _same(
        "tools",
        "chat",
        H,
        "rendered by the chat template, calls parsed by --tool-parser (400 when the template renders no tools); "
        "function.strict: forced calls always fit the schema, auto calls are checked as JSON objects only",
    ),
    Field(
        "tool_choice",
        "chat",
        H,
        H,
        "none, auto",
        "required / a named function: constrained decoding, finish_reason tool_calls (VLM: refused)",
    ),
    _same(
        "parallel_tool_calls",
        "chat",
        H,
        "false: at most one call (a further call the model writes stays text); forced calls: 1 to 8",
    ),
    _same("functions, function_call", "chat", R, "the deprecated functions API: use tools"),
    _same("modalities", "chat", R, '["text"] only'),
    _same("audio, prediction, verbosity, web_search_options", "chat", R),
    _same(
        "reasoning_effort",
        "chat",
        H,
        "where the chat template has a thinking switch (enable_thinking, thinking): none and minimal turn it off, "
        "the others on (no thinking-token budget in openvino-genai 2026.4); refused by name where it has none",
    ),
    Field(
        "chat_template_kwargs",
        "both",
        H,
        H,
        H,
        "vendor: variables for the chat template (at most 16, 4 KiB of JSON), over the serving's "
        "--chat-template-kwargs; completions: refused (no template is applied)",
    ),
    _same(
        "user, metadata, store, service_tier, prompt_cache_key, safety_identifier",
        "both",
        A,
        "metadata and the rest: chat only",
    ),
    _same("echo, best_of, suffix", "completions", R, "false / 1 / empty only"),
    _same("top_k, min_p, repetition_penalty, min_tokens, ignore_eos", "both", H, "vendor fields (vLLM's names)"),
    Field(
        "num_assistant_tokens",
        "both",
        H,
        R,
        R,
        "vendor: tokens proposed per step while speculative decoding runs (a draft with a fixed count or prompt "
        "lookup); refused where it does not run (docs: Speculative decoding)",
    ),
    _same("any other field", "both", R, "400 unknown_parameter, as OpenAI answers"),
)


def schema_fields(field: Field) -> set[str]:
    """The top-level request fields a row covers (nested rows cover their parent's)."""
    head = field.name.split(" (")[0].split(":")[0].split(".")[0].split("[")[0]
    return {x.strip() for x in head.split(",")} if not field.name.startswith("any other") else set()


def covered() -> set[str]:
    return set().union(*(schema_fields(f) for f in FIELDS))


def request_fields() -> set[str]:
    return set(ChatRequest.model_fields) | set(CompletionRequest.model_fields)


@dataclass(frozen=True)
class PipelineSupport:
    """What the serving pipeline can do beyond plain text generation (the runtime report's capabilities)."""

    structured_output: bool
    images: bool
    logprobs: bool = False  # continuous batching: GenerationOutput.generated_log_probs


def check(body: ChatRequest | CompletionRequest, support: PipelineSupport) -> None:
    """The refusals that depend on the pipeline (ApiError 400 naming the field)."""
    if getattr(body, "logprobs", None) is True and not support.logprobs:
        raise ApiError(
            400,
            "logprobs are not supported by this model's pipeline (continuous batching pipelines only)",
            param="logprobs",
            code="unsupported_value",
        )
    if body.n is not None and body.n > 1 and body.stream:
        raise ApiError(400, "n > 1 is not supported with stream", param="n", code="unsupported_value")
    fmt = getattr(body, "response_format", None)
    if fmt is not None and fmt.type != "text" and not support.structured_output:
        raise ApiError(
            400,
            f"response_format '{fmt.type}' is not supported by this model's pipeline",
            param="response_format.type",
            code="unsupported_value",
        )
    choice = getattr(body, "tool_choice", None)
    forced = choice == "required" or (choice is not None and not isinstance(choice, str))
    if forced and getattr(body, "tools", None) and not support.structured_output:
        raise ApiError(
            400,
            "a forced tool call (tool_choice required or a named function) needs constrained decoding, "
            "which this model's pipeline does not have",
            param="tool_choice",
            code="unsupported_value",
        )
    if forced and fmt is not None and fmt.type != "text":
        raise ApiError(
            400,
            "response_format and a forced tool call both constrain the output: ask for one of them",
            param="response_format",
            code="unsupported_value",
        )


def _rows():
    for f in FIELDS:
        yield (f"`{f.name}`", f.endpoints, f.cb, f.legacy, f.vlm, f.note)


DOCS = docblock.Block(
    "openai-fields",
    "ovserve_runtime.openai.support",
    "docs/runtime.md",
    ("field", "endpoints", "CB", "legacy", "VLM", "note"),
    _rows,
)

if __name__ == "__main__":
    raise SystemExit(DOCS.main())
