"""Typed request bodies of /v3 (and /v1) chat/completions and completions, and their 400 errors.

`parse(raw, chat)` validates the raw body bytes (JSON parsing included) against strict pydantic models and
turns the FIRST validation error into a `RequestError` naming the field (`param`, a dotted path such as
`messages[0].content` or `temperature`) with an OpenAI-style `code`. Strict means what OpenAI clients send:
`"stream": "false"` is not a boolean, `true` is not a number, `1.0` is not an integer, NaN/Infinity are not
numbers. Fields OpenAI clients send that the runtime does not use are ignored; values it cannot honour
(`n` > 1, `logprobs`, `echo`, ...) are refused. Every bound keeps a value inside what the openvino-genai
GenerationConfig field types hold (size_t), so a valid body never makes the server fail later.

Pure (pydantic only): the server calls `parse` off the event loop.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

# Bounds. size_t fields (max_new_tokens, top_k, rng_seed) hold 64 bits; max_tokens and top_k stay far
# below so that arithmetic on them (prompt + max_tokens, vocabulary clamps) cannot wrap.
MAX_TOKENS = 2**31 - 1
MAX_TOP_K = 2**31 - 1
MAX_SEED = 2**64 - 1
MAX_STOP = 16
MAX_STOP_CHARS = 1024
# GenerationConfig floats are float32: a positive double below this rounds to 0 there and fails its
# "strictly positive" checks at generation time. Temperatures below it mean greedy (vLLM does the same).
MIN_POSITIVE = 1e-6


class RequestError(Exception):
    """One invalid request field: becomes a 400 `{"error": {message, type, param, code}}`."""

    def __init__(self, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


Float = Annotated[float, Field(allow_inf_nan=False)]
Penalty = Annotated[float, Field(allow_inf_nan=False, ge=-2, le=2)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None


class ImageURL(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(_Strict):
    """A chat content part: `{"type": "text", "text"}` or `{"type": "image_url", "image_url": {"url"}}`."""

    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None

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


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    # None (an assistant turn with tool calls), a string, or a list of parts; a string becomes one part
    content: list[ContentPart] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return [{"type": "text", "text": v}] if isinstance(v, str) else v


class _Common(_Strict):
    model: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: Float | None = Field(None, ge=0, le=2)
    top_p: Float | None = Field(None, ge=MIN_POSITIVE, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)  # extension; 0 = off
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Float | None = Field(None, ge=MIN_POSITIVE, le=100)  # extension
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(None, max_length=MAX_STOP)
    n: int | None = Field(None, ge=1, le=1)
    ignore_eos: bool | None = None  # extension
    user: str | None = None

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


def _unsupported(v: Any, ok: tuple) -> Any:
    if v not in ok:
        raise PydanticCustomError("unsupported_value", "this value is not supported by this server")
    return v


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: bool | None) -> bool | None:
        return _unsupported(v, (None, False))

    @field_validator("top_logprobs")
    @classmethod
    def _no_top_logprobs(cls, v: int | None) -> int | None:
        return _unsupported(v, (None, 0))

    def new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Common):
    prompt: list[str] = Field(min_length=1, max_length=1)  # a string, or a list of one string
    echo: bool | None = None
    best_of: int | None = None
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v: bool | None) -> bool | None:
        return _unsupported(v, (None, False))

    @field_validator("best_of")
    @classmethod
    def _no_best_of(cls, v: int | None) -> int | None:
        return _unsupported(v, (None, 1))

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: int | None) -> int | None:
        return _unsupported(v, (None, 0))

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: str | None) -> str | None:
        return _unsupported(v, (None, ""))

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
    if kind == "stream_options":  # raised by the model validator: no field location of its own
        param = "stream_options"
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
