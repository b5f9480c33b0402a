"""The Responses API's request (`POST /v1/responses`): its typed body, and the chat request it runs as.

`parse_responses(raw)` validates the body as `request.parse` does chat (strict types, the first error a
RequestError naming the field, an unknown field `unknown_parameter`). Every field of OpenAI's schema is
declared: honoured, accepted without effect (documented in docs/runtime.md), or refused by name. Built-in tools
(`web_search`, `file_search`, `code_interpreter`, `computer_use_preview`, `mcp`, `image_generation`, ...) are
refused naming `tools`; `conversation`, `background`, `prompt` and `truncation: "auto"` too.

`to_chat(req, history)` turns the input items (after the stored `history` of `previous_response_id`) into the
chat body the generation path serves: messages (instructions first as the system turn; a `function_call` run
becomes one assistant turn with tool_calls, with the text and reasoning before it; a `function_call_output` a
tool turn), tools (flat Responses functions -> chat's nested ones), tool_choice, text.format ->
response_format, max_output_tokens -> max_completion_tokens, the vendor field ignore_eos as is. The chat
request is then validated by the chat model, so every bound and refusal of chat holds here too.

Pure (pydantic only).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .request import (
    FUNCTION_NAME,
    MAX_TOKENS,
    MIN_POSITIVE,
    ChatRequest,
    Float,
    RequestError,
    Schema,
    error_of,
    refuse,
    refuse_unless,
)

BUILT_IN_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer_use",
    "mcp",
    "image_generation",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
)
# include values that only concern built-in tools this server refuses anyway: accepted without effect
INCLUDE_NO_EFFECT = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "message.input_image.image_url",
)
INCLUDE_HONOURED = ("reasoning.encrypted_content",)
MAX_METADATA_KEYS = 16


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class InputText(_Strict):
    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: list[Any] | None = None  # output_text echoed back: accepted
    logprobs: list[Any] | None = None


class InputImage(_Strict):
    type: Literal["input_image"]
    image_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    file_id: Annotated[str | None, refuse("file_id images are not supported: send image_url as a data URL")] = None

    @model_validator(mode="after")
    def _url(self) -> InputImage:
        if self.image_url is None:
            raise PydanticCustomError("missing", "an input_image part needs 'image_url'")
        return self


_PART_REFUSED = {
    "input_file": "input_file parts are not supported by this server",
    "input_audio": "audio input is not supported by this server",
    "refusal": "an assistant refusal cannot be given to the chat template",
}


def _part_kind(v: Any) -> str | None:
    kind = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return "image" if kind == "input_image" else "text"


Part = Annotated[Annotated[InputText, Tag("text")] | Annotated[InputImage, Tag("image")], Discriminator(_part_kind)]


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: list[Part]
    id: str | None = None  # an output message echoed back
    status: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [{"type": "input_text", "text": v}]
        for i, p in enumerate(v if isinstance(v, list) else ()):
            if isinstance(p, dict) and p.get("type") in _PART_REFUSED:
                raise PydanticCustomError("unsupported_value", f"content[{i}]: {_PART_REFUSED[p['type']]}")
        return v


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(pattern=FUNCTION_NAME)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[InputText]
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class SummaryText(_Strict):
    type: Literal["summary_text", "reasoning_text"]
    text: str


class ReasoningItem(_Strict):
    """An earlier turn's reasoning, sent back: its text is given to the chat template with that turn (a
    template that drops earlier reasoning, as Qwen3's does, drops it)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = []
    content: list[SummaryText] | None = None
    encrypted_content: str | None = None  # this server's own: the reasoning text, base64 (not encrypted)
    status: str | None = None

    @property
    def text(self) -> str:
        import base64

        if self.content:
            return "".join(p.text for p in self.content)
        if self.encrypted_content:
            try:
                return base64.b64decode(self.encrypted_content, validate=True).decode()
            except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8: another server's, opaque here
                return ""
        return "".join(p.text for p in self.summary)


_ITEMS = ("message", "function_call", "function_call_output", "reasoning")


def _item_kind(v: Any) -> str | None:
    if isinstance(v, dict):
        return v.get("type", "message" if "role" in v else None)
    return getattr(v, "type", None)


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind),
]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: Schema | None = None
    strict: bool | None = None  # the arguments of a forced call always fit (constrained decoding), strict or not


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: Schema | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _shape(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise PydanticCustomError("missing", "a json_schema format needs 'name' and 'schema'")
        if self.type != "json_schema" and (self.schema_ is not None or self.name is not None):
            raise PydanticCustomError("invalid_value", "'name' and 'schema' are only allowed with type json_schema")
        return self


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Annotated[str | None, refuse_unless("verbosity is not supported by this server", "medium")] = None


class Reasoning(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # accepted without effect: no summary is generated, the reasoning itself is returned as a reasoning item
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Annotated[str | None, refuse("reasoning summaries are not generated by this server")] = None


class StreamOptions(_Strict):
    include_obfuscation: bool | None = None  # accepted: no obfuscation padding is added


class ResponsesRequest(_Strict):
    model: str | None = None
    input: list[Item] = Field(min_length=1)
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    tool_choice: Any = None  # "none", "auto", "required" or {"type": "function", "name"}
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: Float | None = Field(None, ge=0, le=2)
    top_p: Float | None = Field(None, ge=MIN_POSITIVE, le=1)
    ignore_eos: bool | None = None  # vendor (vLLM's name), passed to the chat request
    reasoning: Reasoning | None = None
    metadata: dict[str, str] | None = Field(None, max_length=MAX_METADATA_KEYS)
    store: bool | None = None  # default true: kept in this pod's bounded store
    previous_response_id: str | None = None
    truncation: Annotated[
        str | None,
        refuse_unless("truncation 'auto' is not supported: a prompt over the context is refused", "disabled"),
    ] = None
    include: list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # accepted: no effect on the answer
    service_tier: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    client_metadata: dict[str, Any] | None = None  # the Codex CLI's session and turn ids
    # refused by name
    conversation: Annotated[Any, refuse("conversations are not supported: use previous_response_id")] = None
    background: Annotated[bool | None, refuse_unless("background responses are not supported", False)] = None
    prompt: Annotated[Any, refuse("stored prompt templates are not supported")] = None
    max_tool_calls: Annotated[Any, refuse("max_tool_calls is not supported by this server")] = None
    top_logprobs: Annotated[int | None, refuse_unless("top_logprobs is not supported by this server", 0)] = None

    @field_validator("input", mode="before")
    @classmethod
    def _items(cls, v: Any) -> Any:  # a string is one user message
        if isinstance(v, str):
            return [{"type": "message", "role": "user", "content": v}]
        for i, x in enumerate(v if isinstance(v, list) else ()):
            kind = _item_kind(x)
            if kind == "item_reference":
                raise PydanticCustomError(
                    "unsupported_value", f"input[{i}]: item_reference is not supported: send the item itself"
                )
            if kind not in _ITEMS:
                raise PydanticCustomError(
                    "unsupported_value",
                    f"input[{i}]: items of type {kind!r} are not supported (message, function_call, "
                    "function_call_output and reasoning are)",
                )
        return v

    @field_validator("tools", mode="before")
    @classmethod
    def _no_built_ins(cls, v: Any) -> Any:
        for i, t in enumerate(v if isinstance(v, list) else ()):
            if isinstance(t, dict) and t.get("type") != "function":
                raise PydanticCustomError(
                    "unsupported_value",
                    f"tools[{i}]: built-in tools ({t.get('type')!r}) are not supported by this server: "
                    "give function tools",
                )
        return v

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice(cls, v: Any) -> Any:
        if v is None or v in ("none", "auto", "required"):
            return v
        if isinstance(v, dict) and v.get("type") == "function" and isinstance(v.get("name"), str) and len(v) == 2:
            return v
        if isinstance(v, dict) and v.get("type") in (*BUILT_IN_TOOLS, "allowed_tools"):
            raise PydanticCustomError("unsupported_value", f"tool_choice {v.get('type')!r} is not supported")
        raise PydanticCustomError(
            "invalid_value", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\"}"
        )

    @field_validator("include")
    @classmethod
    def _include(cls, v: list[str] | None) -> list[str] | None:
        for x in v or ():
            if x not in INCLUDE_HONOURED + INCLUDE_NO_EFFECT:
                raise PydanticCustomError("unsupported_value", f"include {x!r} is not supported by this server")
        return v

    @model_validator(mode="after")
    def _shape(self) -> ResponsesRequest:
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError("stream_options", "'stream_options' is only allowed when 'stream' is true")
        names = [t.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise PydanticCustomError("tools", "two tools have the same name")
        return self

    @property
    def stores(self) -> bool:
        return self.store is not False

    @property
    def encrypted_reasoning(self) -> bool:
        return "reasoning.encrypted_content" in (self.include or ())


# the union tags pydantic puts in an error's location after an item's or a part's index: not field names
_TAGS = re.compile(r"\[(\d+)\]\.(?:message|function_call_output|function_call|reasoning|text|image)\b")


def parse_responses(raw: bytes) -> ResponsesRequest:
    """The validated body of a Responses request; RequestError naming the field otherwise."""
    try:
        return ResponsesRequest.model_validate_json(raw or b"null")
    except ValidationError as exc:
        err = error_of(exc)
        raise RequestError(
            _TAGS.sub(r"[\1]", err.message), _TAGS.sub(r"[\1]", err.param or "") or None, err.code
        ) from None


def to_chat_messages(items: list[Item], instructions: str | None) -> list[dict[str, Any]]:
    """Chat messages of input items: consecutive assistant text, reasoning and function calls are one turn."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    turn: dict[str, Any] | None = None  # the assistant turn being gathered

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": None}
            out.append(turn)
        return turn

    for item in items:
        if isinstance(item, ReasoningItem):
            if item.text:
                t = assistant()
                t["reasoning_content"] = (t.get("reasoning_content") or "") + item.text
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            assistant().setdefault("tool_calls", []).append(call)
        elif isinstance(item, MessageItem) and item.role == "assistant":
            t = assistant()
            if t.get("tool_calls"):  # text after calls is a new turn
                turn = None
                t = assistant()
            t["content"] = (t["content"] or "") + "".join(p.text for p in item.content if isinstance(p, InputText))
        elif isinstance(item, FunctionCallOutputItem):
            turn = None
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
        else:
            turn = None
            parts: list[dict[str, Any]] = []
            for p in item.content:
                if isinstance(p, InputImage):
                    parts.append({"type": "image_url", "image_url": {"url": p.image_url}})
                else:
                    parts.append({"type": "text", "text": p.text})
            # `developer` is OpenAI's name for the system role (Codex sends its instructions so): chat templates know
            # `system`, and Qwen's drop a role they do not know without a word
            out.append({"role": "system" if item.role == "developer" else item.role, "content": parts})
    return out


def to_chat(req: ResponsesRequest, history: list[Item] = ()) -> ChatRequest:
    """The chat request this Responses request runs as (RequestError naming the Responses field)."""
    body: dict[str, Any] = {"messages": to_chat_messages([*history, *req.input], req.instructions)}
    if req.model is not None:
        body["model"] = req.model
    if req.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    k: v
                    for k, v in (
                        ("name", t.name),
                        ("description", t.description),
                        ("parameters", t.parameters),
                        ("strict", t.strict),
                    )
                    if v is not None
                },
            }
            for t in req.tools
        ]
    if isinstance(req.tool_choice, dict):
        body["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice["name"]}}
    elif req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice
    for src, dst in (
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("max_output_tokens", "max_completion_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("ignore_eos", "ignore_eos"),
        ("stream", "stream"),
    ):
        if getattr(req, src) is not None:
            body[dst] = getattr(req, src)
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and fmt.type != "text":
        rf: dict[str, Any] = {"type": fmt.type}
        if fmt.type == "json_schema":
            rf["json_schema"] = {"name": fmt.name, "schema": fmt.schema_}
            if fmt.strict is not None:
                rf["json_schema"]["strict"] = fmt.strict
        body["response_format"] = rf
    try:  # as JSON: the chat request's strict JSON-mode validation, exactly as a chat body gets it
        return ChatRequest.model_validate_json(json.dumps(body))
    except ValidationError as exc:
        err = error_of(exc)
        raise RequestError(err.message, responses_param(err.param), err.code) from None


# a chat field's name -> the Responses request's name for it (errors raised by the chat path name these)
RESPONSES_NAMES = (
    ("messages", "input"),
    ("response_format", "text.format"),
    ("max_completion_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
)


def responses_param(param: str | None) -> str | None:
    """A chat field's name as the Responses request calls it."""
    if param is None:
        return None
    for chat, resp in RESPONSES_NAMES:
        if param == chat or param.startswith(chat + ".") or param.startswith(chat + "["):
            return resp + param[len(chat) :] if chat != "messages" else "input"
    return param
