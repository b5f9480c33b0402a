"""Typed request bodies of /v3 (and /v1) chat/completions and completions, and their 400 errors.

`parse(raw, chat)` validates the raw body bytes (JSON parsing included) against strict pydantic models and
turns the FIRST validation error into a `RequestError` naming the field (`param`, a dotted path such as
`messages[0].content` or `temperature`) with an OpenAI-style `code`. Strict means what OpenAI clients send:
`"stream": "false"` is not a boolean, `true` is not a number, `1.0` is not an integer, NaN/Infinity are not
numbers. Every bound keeps a value inside what the openvino-genai GenerationConfig field types hold (size_t),
so a valid body never makes the server fail later.

Nothing is ignored (docs/runtime.md, "OpenAI API"): every field of OpenAI's schema is declared here, and is
either honoured, or accepted because it cannot change the answer (`user`, `metadata`, `store`, ...), or
refused with 400 naming it when set to a value this server cannot honour (`unsupported_value`). A field
outside OpenAI's schema and the vendor fields below is refused (`unknown_parameter`), as OpenAI does: a
misspelt `max_token` must not pass silently. Vendor sampling fields honoured: `top_k`, `min_p`,
`repetition_penalty`, `min_tokens`, `ignore_eos`. Refusals that depend on the pipeline serving the model
(structured output on a VLM, ...) are `support.check`'s.

Pure (pydantic only): the server calls `parse` off the event loop.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

# Bounds. size_t fields (max_new_tokens, top_k, rng_seed) hold 64 bits; max_tokens and top_k stay far
# below so that arithmetic on them (prompt + max_tokens, vocabulary clamps) cannot wrap.
MAX_TOKENS = 2**31 - 1
MAX_TOP_K = 2**31 - 1
MAX_SEED = 2**64 - 1
MAX_STOP = 16
MAX_N = 16  # choices per request (n): each is a generation of its own
MAX_STOP_CHARS = 1024
MAX_SCHEMA_BYTES = 64 * 1024  # a json_schema this large is refused before it is compiled
# GenerationConfig floats are float32: a positive double below this rounds to 0 there and fails its
# "strictly positive" checks at generation time. Temperatures below it mean greedy (vLLM does the same).
MIN_POSITIVE = 1e-6

# Why a field is refused (the 400's message; the docs table says the same)
LEGACY_FUNCTIONS = "the deprecated functions API is not supported: use tools and tool_choice"
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class RequestError(Exception):
    """One invalid request field: becomes a 400 `{"error": {message, type, param, code}}`."""

    def __init__(self, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def refuse_unless(why: str, *allowed: Any):
    """A validator that refuses every value but `allowed` (None always passes: the field is unset)."""

    def check(v: Any) -> Any:
        if v is not None and v not in allowed:
            raise PydanticCustomError("unsupported_value", why)
        return v

    return AfterValidator(check)


def refuse(why: str):
    return refuse_unless(why)


Float = Annotated[float, Field(allow_inf_nan=False)]
Penalty = Annotated[float, Field(allow_inf_nan=False, ge=-2, le=2)]


def _schema_size(v: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(v)) > MAX_SCHEMA_BYTES:
        raise PydanticCustomError("invalid_value", f"the schema is larger than {MAX_SCHEMA_BYTES} bytes")
    return v


Schema = Annotated[dict[str, Any], AfterValidator(_schema_size)]  # a JSON schema, refused beyond MAX_SCHEMA_BYTES


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: Annotated[bool | None, refuse_unless("stream obfuscation is not supported", False)] = None


class ImageURL(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(_Strict):
    """A chat content part: `{"type": "text", "text"}` or `{"type": "image_url", "image_url": {"url"}}`.
    Audio and file parts are refused (`type`)."""

    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _known(cls, v: Any) -> Any:
        if v in ("input_audio", "file", "refusal"):
            raise PydanticCustomError("unsupported_value", f"'{v}' content parts are not supported by this server")
        return v

    @field_validator("image_url", mode="before")
    @classmethod
    def _url_string(cls, v: Any) -> Any:
        return {"url": v} if isinstance(v, str) else v  # some clients send the URL itself

    @model_validator(mode="after")
    def _shape(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise PydanticCustomError("missing", "a text part needs 'text'")
        if self.type == "image_url" and self.image_url is None:
            raise PydanticCustomError("missing", "an image_url part needs 'image_url'")
        return self


class CalledFunction(_Strict):
    name: str = Field(pattern=FUNCTION_NAME)
    arguments: str  # a JSON object, serialized (as OpenAI returns it)


class AssistantToolCall(_Strict):
    """A tool call of an earlier assistant turn."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: CalledFunction


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    # None (an assistant turn with tool calls), a string, or a list of parts; a string becomes one part
    content: list[ContentPart] | None = None
    name: str | None = None  # accepted: the chat template input has role and content only
    refusal: Annotated[str | None, refuse("an assistant refusal cannot be given to the chat template")] = None
    audio: Annotated[Any, refuse("audio is not supported by this server")] = None
    tool_calls: list[AssistantToolCall] | None = None  # assistant turns: to the chat template
    tool_call_id: str | None = None  # tool turns: to the chat template
    reasoning_content: str | None = None  # assistant turns (vendor, as vLLM): to the chat template
    function_call: Annotated[Any, refuse(LEGACY_FUNCTIONS)] = None

    @field_validator("role")
    @classmethod
    def _no_function_role(cls, v: str) -> str:
        if v == "function":
            raise PydanticCustomError("unsupported_value", f"'function' messages: {LEGACY_FUNCTIONS}")
        return v

    @model_validator(mode="after")
    def _tool_fields(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise PydanticCustomError("tool_calls", "'tool_calls' belong to assistant messages")
        if self.role == "tool" and not self.tool_call_id:
            raise PydanticCustomError("tool_call_id", "a tool message needs the 'tool_call_id' it answers")
        if self.tool_call_id is not None and self.role != "tool":
            raise PydanticCustomError("tool_call_id", "'tool_call_id' belongs to tool messages")
        if self.reasoning_content is not None and self.role != "assistant":
            raise PydanticCustomError("reasoning_content", "'reasoning_content' belongs to assistant messages")
        return self

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return [{"type": "text", "text": v}] if isinstance(v, str) else v


class JSONSchemaFormat(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    # strict: the output always matches the schema here (constrained decoding), strict or not
    schema_: Schema | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _shape(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError("missing", "'json_schema' is required when 'type' is 'json_schema'")
        if self.type != "json_schema" and self.json_schema is not None:
            raise PydanticCustomError("invalid_value", "'json_schema' is only allowed when 'type' is 'json_schema'")
        return self


class FunctionDef(_Strict):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: Schema | None = None  # a JSON schema of the arguments object
    # strict: a forced call's arguments always fit the schema here (constrained decoding), strict or not;
    # an "auto" call is the model's own and is checked for valid JSON only
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str = Field(pattern=FUNCTION_NAME)


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


def _template_kwargs(v: dict[str, Any]) -> dict[str, Any]:
    from .thinking import KWARG_NAME, MAX_KWARGS, MAX_KWARGS_BYTES

    if len(v) > MAX_KWARGS:
        raise PydanticCustomError("invalid_value", f"at most {MAX_KWARGS} chat_template_kwargs")
    for k in v:
        if not KWARG_NAME.match(k):
            raise PydanticCustomError("invalid_value", f"{k[:70]!r} is not a template variable name")
    if len(json.dumps(v)) > MAX_KWARGS_BYTES:
        raise PydanticCustomError("invalid_value", f"chat_template_kwargs are larger than {MAX_KWARGS_BYTES} bytes")
    return v


TemplateKwargs = Annotated[dict[str, Any], AfterValidator(_template_kwargs)]


class _Common(_Strict):
    model: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: Float | None = Field(None, ge=0, le=2)
    top_p: Float | None = Field(None, ge=MIN_POSITIVE, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)  # vendor; 0 = off
    min_p: Float | None = Field(None, ge=0, le=1)  # vendor; 0 = off
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Float | None = Field(None, ge=MIN_POSITIVE, le=100)  # vendor
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(None, max_length=MAX_STOP)
    n: int | None = Field(None, ge=1, le=MAX_N)  # > 1: not with stream
    ignore_eos: bool | None = None  # vendor
    min_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)  # vendor: no EOS before this many tokens
    # vendor: tokens proposed per step while speculative decoding runs; refused by name where it does not
    num_assistant_tokens: int | None = Field(None, ge=1, le=64)
    user: str | None = None  # accepted: no effect on the answer
    logit_bias: Annotated[dict[str, Any] | None, refuse_unless("logit_bias is not supported by this server", {})] = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _stream_options(self) -> _Common:
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError("stream_options", "'stream_options' is only allowed when 'stream' is true")
        return self

    @property
    def sampling(self) -> bool:
        """False: greedy (no temperature, 0, or one too small to be a float32 temperature)."""
        return self.temperature is not None and self.temperature >= MIN_POSITIVE

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def new_tokens(self) -> int | None:
        return self.max_tokens


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: bool | None = None  # the sampled tokens' log-probabilities (continuous batching pipelines)
    top_logprobs: Annotated[
        int | None, refuse_unless("openvino-genai returns the sampled token's log-probability only", 0)
    ] = None
    response_format: ResponseFormat | None = None
    # accepted: no effect on the answer
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # tools: rendered by the chat template, calls parsed by the model family's parser (openai/assistant.py)
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: str | NamedToolChoice | None = None  # "none", "auto", "required" or a named function
    parallel_tool_calls: bool | None = None
    functions: Annotated[list[Any] | None, refuse_unless(LEGACY_FUNCTIONS, [])] = None
    function_call: Annotated[Any, refuse_unless(LEGACY_FUNCTIONS, "none")] = None
    # refused: this server generates text only, without those features
    modalities: Annotated[list[str] | None, refuse_unless("only the 'text' modality is supported", ["text"])] = None
    audio: Annotated[Any, refuse("audio output is not supported by this server")] = None
    prediction: Annotated[Any, refuse("predicted outputs are not supported by this server")] = None
    # honoured where the chat template has a thinking switch (openai/thinking.py), refused by name elsewhere
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    chat_template_kwargs: TemplateKwargs | None = None  # vendor (vLLM, SGLang, OVMS): to the chat template
    verbosity: Annotated[Any, refuse("verbosity is not supported by this server")] = None
    web_search_options: Annotated[Any, refuse("web search is not supported by this server")] = None

    def new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, v: Any) -> Any:
        if v is None or v in ("none", "auto", "required"):
            return v
        if isinstance(v, dict):
            try:
                return NamedToolChoice.model_validate(v)
            except ValidationError:
                pass
        raise PydanticCustomError(
            "invalid_value",
            "'tool_choice' must be 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": ...}}',
        )

    @model_validator(mode="after")
    def _unique_tools(self) -> ChatRequest:
        names = [t.function.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise PydanticCustomError("tools", "two tools have the same function name")
        return self


class CompletionRequest(_Common):
    prompt: list[str] = Field(min_length=1, max_length=1)  # a string, or a list of one string
    echo: Annotated[bool | None, refuse_unless("echo is not supported by this server", False)] = None
    best_of: Annotated[int | None, refuse_unless("best_of is not supported by this server", 1)] = None
    logprobs: Annotated[
        int | None, refuse_unless("completions logprobs are not supported by this server (chat logprobs are)", 0)
    ] = None
    suffix: Annotated[str | None, refuse_unless("suffix is not supported by this server", "")] = None
    chat_template_kwargs: Annotated[
        Any, refuse("completions apply no chat template: send chat_template_kwargs to chat/completions")
    ] = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @property
    def text(self) -> str:
        return self.prompt[0]


# pydantic error types -> OpenAI-style codes; anything not listed is a value out of its domain
_TYPE_ERRORS = {
    "bool_type",
    "int_type",
    "float_type",
    "string_type",
    "list_type",
    "model_type",
    "dict_type",
    "model_attributes_type",
    "none_required",
    "int_from_float",
    "bool_parsing",
    "int_parsing",
    "float_parsing",
}
_CODES = {"missing": "missing_required_parameter", "unsupported_value": "unsupported_value"}
# fields that accept a string or a list: pydantic only sees the list after the before-validator
_HINTS = {
    "content": "must be a string, null or a list of content parts",
    "stop": f"must be a string or a list of up to {MAX_STOP} strings",
    "prompt": "must be a string or a list of one string (one prompt per request)",
}
# model validators raise these: the field they name is added to the location
_MODEL_ERRORS = {"stream_options": "stream_options", "tools": "tools"}
# message-level model validators: the field is added to the message's location
_MESSAGE_ERRORS = {"tool_calls", "tool_call_id", "reasoning_content"}


def param_path(loc: tuple) -> str | None:
    """('messages', 0, 'content') -> 'messages[0].content'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


def error_of(exc: ValidationError) -> RequestError:
    err = exc.errors(include_url=False, include_input=False)[0]
    kind, param = err["type"], param_path(tuple(err["loc"]))
    if kind == "json_invalid":
        return RequestError(f"invalid JSON body: {err['ctx']['error']}", None, "invalid_json")
    if param is None and kind in ("model_type", "dict_type"):
        return RequestError("the request body must be a JSON object", None, "invalid_json")
    if kind == "missing" and err["msg"] == "Field required":
        return RequestError(f"Missing required parameter: '{param}'", param, _CODES[kind])
    if kind == "extra_forbidden":
        return RequestError(f"Unrecognized request argument supplied: '{param}'", param, "unknown_parameter")
    if kind in _MODEL_ERRORS:  # raised by a model validator: no field location of its own
        param = _MODEL_ERRORS[kind]
    elif kind in _MESSAGE_ERRORS:
        param = f"{param}.{kind}"
    code = "invalid_type" if kind in _TYPE_ERRORS else _CODES.get(kind, "invalid_value")
    msg = err["msg"]
    last = err["loc"][-1] if err["loc"] else None
    if last in _HINTS and kind in ("list_type", "too_long"):
        msg = f"'{last}' {_HINTS[last]}"
    return RequestError(f"Invalid '{param}': {msg}", param, code)


def parse(raw: bytes, chat: bool) -> ChatRequest | CompletionRequest:
    """The validated body of a chat (chat=True) or completions request; RequestError otherwise."""
    model = ChatRequest if chat else CompletionRequest
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise error_of(exc) from None
