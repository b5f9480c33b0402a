"""Tool calls in model output: a parser per model family, streamed and not; the family from a chat template;
the grammar that forces a call.

Pure: no openvino, no I/O (outlines-core, imported when a grammar is built, is pure too). The families:

- `hermes` (Hermes, Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, any number,
  with content around them.
- `llama3_json` (Llama 3.1/3.2/3.3): the output is `{"name": ..., "parameters": {...}}` (optionally after
  `<|python_tag|>`), several separated by `;`. An output that does not open with a call is content.
- `llama3_pythonic` (Llama 3.2 pythonic, Llama 4): the output is a Python list of calls with literal
  keyword arguments, `[get_weather(city="Paris"), ...]` (optionally in `<|python_start|>...<|python_end|>`).

A call is valid when its name is one of the request's functions and its arguments are a JSON object; the
OpenAI `arguments` string is that object re-serialized, so it is always valid JSON. Text that looks like a
call but is not a valid one stays in `content`, as the model wrote it: nothing is lost, nothing invented.

Streaming (`ToolCallStream`): content deltas go out as they come (text that may still become a call marker
waits); a call goes out as ONE `tool_calls` delta (id, name and the complete arguments) once it is complete
and valid. Arguments are never streamed piecewise, so what a client concatenates is always valid JSON, even
when the output is cut at max_tokens mid-call (OpenVINO Model Server #3838). Streaming the pieces of one
output in any split gives exactly what `parse` gives for the whole.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .textstream import TrimmedText, hold_back

PARSERS = ("hermes", "llama3_json", "llama3_pythonic")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names


class FunctionCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str  # a JSON object, serialized


class ToolCall(BaseModel):
    """An OpenAI `tool_calls` item."""

    model_config = ConfigDict(frozen=True)

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Parsed(BaseModel):
    """An output split into content (None when there is none beside the calls) and tool calls."""

    model_config = ConfigDict(frozen=True)

    content: str | None
    tool_calls: list[ToolCall]


class Delta(BaseModel):
    """One streamed piece: content text, or one complete tool call at its position `index`."""

    model_config = ConfigDict(frozen=True)

    content: str | None = None
    index: int | None = None
    tool_call: ToolCall | None = None

    def openai(self) -> dict[str, Any]:
        """The chat-completion chunk's `delta` for it."""
        if self.tool_call is None:
            return {"content": self.content}
        return {"tool_calls": [{"index": self.index, **self.tool_call.model_dump()}]}


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


# ------------------------------------------------------------------------------------------ detection


def detect(chat_template: str | None) -> str | None:
    """The parser a chat template's tool format calls for, or None (no tools, or a format we do not parse).
    Looks for what each family's template tells the model to write."""
    if not chat_template or not re.search(r"\btools\b", chat_template):
        return None
    if "<tool_call>" in chat_template:
        return "hermes"
    if re.search(r"\[func_name1\(|python list of (the )?(function )?calls", chat_template):
        return "llama3_pythonic"
    if "<|python_tag|>" in chat_template or re.search(r"\"parameters\": dictionary of argument", chat_template):
        return "llama3_json"
    return None


def renders_tools(chat_template: str | None) -> bool:
    """Whether a chat template reads the `tools` it is given at all (else a request with tools gets 400)."""
    return bool(chat_template) and re.search(r"\btools\b", chat_template or "") is not None


# ------------------------------------------------------------------------------------------ one call


def _call(name: Any, arguments: Any, tool_names: Collection[str] | None, new_id: Callable[[], str]) -> ToolCall | None:
    """A valid call from a parsed name and arguments, or None."""
    if not isinstance(name, str) or not name or (tool_names is not None and name not in tool_names):
        return None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    text = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=new_id(), function=FunctionCall(name=name, arguments=text))


def _json_call(body: str, keys: tuple[str, ...], tool_names, new_id) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or set(obj) - {"name", *keys}:
        return None
    arguments = next((obj[k] for k in keys if k in obj), None)
    return _call(obj.get("name"), arguments, tool_names, new_id)


# ------------------------------------------------------------------------------------------ streams


class ToolCallStream:
    """Fed the output's text deltas (`feed`), then `finish` once; each returns the Deltas ready to send."""

    def __init__(
        self,
        tool_names: Collection[str] | None = None,
        *,
        new_id: Callable[[], str] = new_call_id,
        max_calls: int | None = None,
    ) -> None:
        self._names = frozenset(tool_names) if tool_names is not None else None
        self._new_id = new_id
        self._max = max_calls  # parallel_tool_calls false: 1; calls beyond it stay text
        self._buf = ""
        self._text = TrimmedText()
        self._calls = 0
        self._out: list[Delta] = []

    # the parsers below call these
    def _content(self, text: str) -> None:
        if text := self._text.add(text):
            self._out.append(Delta(content=text))

    def _full(self) -> bool:
        return self._max is not None and self._calls >= self._max

    def _emit(self, call: ToolCall) -> None:
        self._text.cut()
        self._out.append(Delta(index=self._calls, tool_call=call))
        self._calls += 1

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        # adjacent content pieces of one feed go out as one delta
        merged: list[Delta] = []
        for d in out:
            if merged and d.tool_call is None and merged[-1].tool_call is None:
                merged[-1] = Delta(content=(merged[-1].content or "") + (d.content or ""))
            else:
                merged.append(d)
        return merged

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        self._step(final=False)
        return self._take()

    def finish(self) -> list[Delta]:
        self._step(final=True)
        if self._buf:
            self._content(self._buf)
            self._buf = ""
        if tail := self._text.finish():
            self._out.append(Delta(content=tail))
        return self._take()

    def _step(self, final: bool) -> None:
        raise NotImplementedError


class HermesStream(ToolCallStream):
    """`<tool_call>{json}</tool_call>` anywhere in the output; a last call may lack its closing tag."""

    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inside = False

    def _step(self, final: bool) -> None:
        while self._buf:
            if not self._inside:
                start = self._buf.find(self.OPEN)
                if start < 0:
                    keep = 0 if final else hold_back(self._buf, self.OPEN)
                    self._content(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return
                self._content(self._buf[:start])
                self._buf = self._buf[start:]
                self._inside = True
            end = self._buf.find(self.CLOSE)
            if end < 0 and not final:
                return
            body = self._buf[len(self.OPEN) : end] if end >= 0 else self._buf[len(self.OPEN) :]
            call = _json_call(body.strip(), ("arguments", "parameters"), self._names, self._new_id)
            whole = self._buf[: end + len(self.CLOSE)] if end >= 0 else self._buf
            self._buf = self._buf[len(whole) :]
            self._inside = False
            if call is None or self._full():
                self._content(whole)  # not a valid call (or one too many): it stays text, as written
            else:
                self._emit(call)


class Llama3JsonStream(ToolCallStream):
    """Calls as JSON objects from the start of the output, separated by `;`; the first text that is not a
    call ends them and is content from there on."""

    TAG = "<|python_tag|>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start -> calls -> content
        self._decoder = json.JSONDecoder()

    def _step(self, final: bool) -> None:
        while self._buf:
            if self._mode == "content":
                self._content(self._buf)
                self._buf = ""
                return
            if self._mode == "start":
                head = self._buf.lstrip()
                if head.startswith(self.TAG):
                    self._buf, self._mode = head[len(self.TAG) :], "calls"
                elif head.startswith("{"):
                    self._buf, self._mode = head, "calls"
                elif (not head or self.TAG.startswith(head)) and not final:
                    return
                else:
                    self._mode = "content"
                continue
            # calls: skip separators; a complete object that is a valid call goes out
            rest = self._buf.lstrip().lstrip(";").lstrip()
            if not rest:
                self._buf = rest
                return
            if not rest.startswith("{"):
                self._buf, self._mode = rest, "content"
                continue
            try:
                obj, end = self._decoder.raw_decode(rest)
            except ValueError:
                self._buf = rest
                if final:
                    self._mode = "content"
                    continue
                return  # incomplete (or broken: it becomes content at the end)
            call = None
            if isinstance(obj, dict):
                call = _json_call(rest[:end], ("parameters", "arguments"), self._names, self._new_id)
            if call is None or self._full():
                self._buf, self._mode = rest, "content"
                continue
            self._emit(call)
            self._buf = rest[end:]


class Llama3PythonicStream(ToolCallStream):
    """A Python list of calls that is the whole output; parsed once the output ends."""

    START, END = "<|python_start|>", "<|python_end|>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start -> list (held to the end) | content

    def _step(self, final: bool) -> None:
        if self._mode == "content":
            self._content(self._buf)
            self._buf = ""
            return
        head = self._buf.lstrip()
        if self._mode == "start" and not final:
            if head.startswith(("[", self.START)):
                self._mode = "list"
            elif not head or self.START.startswith(head):
                return
            else:
                self._mode = "content"
                self._step(final)
                return
        if not final:
            return
        calls = self._parse(head)
        if calls is None:
            self._mode = "content"
            self._step(final)
            return
        keep = calls if self._max is None else calls[: self._max]
        for call, _ in keep:
            self._emit(call)
        if rest := ", ".join(source for _, source in calls[len(keep) :]):
            self._content(rest)  # calls beyond parallel_tool_calls false: text, as written
        self._buf = ""

    def _parse(self, text: str) -> list[tuple[ToolCall, str]] | None:
        """The calls of a pythonic list, each with its source text; None when it is not one."""
        text = text.strip()
        if text.startswith(self.START):
            text = text[len(self.START) :].removesuffix(self.END).strip()
        if not text.startswith("["):
            return None
        try:
            tree = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError):
            return None
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            try:
                kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            if None in kwargs:  # **spread
                return None
            try:
                call = _call(node.func.id, _jsonable(kwargs), self._names, self._new_id)
            except ValueError:
                return None
            if call is None:
                return None
            calls.append((call, ast.get_source_segment(text, node) or ""))
        return calls


def _jsonable(value: Any) -> Any:
    """Python literals as JSON values (tuples and sets as arrays); raises ValueError for what JSON lacks."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("non-string key")
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return value
    raise ValueError(f"not a JSON value: {type(value).__name__}")


STREAMS: dict[str, type[ToolCallStream]] = {
    "hermes": HermesStream,
    "llama3_json": Llama3JsonStream,
    "llama3_pythonic": Llama3PythonicStream,
}


def stream(
    parser: str,
    tool_names: Collection[str] | None = None,
    *,
    new_id: Callable[[], str] = new_call_id,
    max_calls: int | None = None,
) -> ToolCallStream:
    """A streamed parser of this family for one output (`max_calls`: calls beyond it stay text)."""
    return STREAMS[parser](tool_names, new_id=new_id, max_calls=max_calls)


def parse(
    parser: str,
    text: str,
    tool_names: Collection[str] | None = None,
    *,
    new_id: Callable[[], str] = new_call_id,
    max_calls: int | None = None,
) -> Parsed:
    """Content and tool calls of a whole output (the same as streaming it in any pieces)."""
    s = stream(parser, tool_names, new_id=new_id, max_calls=max_calls)
    deltas = s.feed(text) + s.finish()
    content = "".join(d.content or "" for d in deltas if d.tool_call is None)
    calls = [d.tool_call for d in deltas if d.tool_call is not None]
    return Parsed(content=content or (None if calls else ""), tool_calls=calls)


# ------------------------------------------------------------------------------------------ forced calls


class Function(BaseModel):
    """A function the request offers: its name and the JSON schema of its parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    parameters: dict[str, Any] | None = None


class ForcedCalls(BaseModel):
    """The regex that constrains the output to calls (StructuredOutputConfig(regex=...)), and the parser
    that reads that output back."""

    model_config = ConfigDict(frozen=True)

    regex: str
    parser: str


MAX_PARALLEL_CALLS = 8
_EMPTY_OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}
_REGEX_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")


def regex_literal(text: str) -> str:
    """`text` as a regex that matches it literally (newlines as \\n)."""
    return _REGEX_SPECIAL.sub(r"\\\1", text).replace("\n", r"\n")


def arguments_regex(parameters: dict[str, Any] | None) -> str:
    """The compact regex (no free whitespace, integer bounds kept: grammar.schema_regex) of the JSON objects a
    parameters schema allows; free whitespace lets a small or random-weight model write spaces until
    max_tokens. A function without parameters takes `{}`."""
    from .grammar import schema_regex

    return schema_regex(parameters if parameters else _EMPTY_OBJECT)


def forced_calls(
    parser: str, functions: Sequence[Function], *, parallel: bool, max_calls: int = MAX_PARALLEL_CALLS
) -> ForcedCalls:
    """The grammar of a forced call (tool_choice "required": one of `functions`; a named function: pass that
    one alone), in the family's own output format; with `parallel`, 1 to `max_calls` calls. Pythonic models
    are forced to Llama 3's JSON format (a Python-literal grammar from a JSON schema does not exist); the
    output is then read with that parser. Raises ValueError for a name a regex cannot carry, and what
    outlines-core raises for a schema it cannot compile."""
    if not functions:
        raise ValueError("no function to call")
    for f in functions:
        if not NAME_PATTERN.match(f.name):
            raise ValueError(f"function name {f.name!r} does not match {NAME_PATTERN.pattern}")
    if parser == "hermes":
        one = "|".join(
            regex_literal('<tool_call>\n{"name": "' + f.name + '", "arguments": ')
            + "("
            + arguments_regex(f.parameters)
            + ")"
            + regex_literal("}\n</tool_call>")
            for f in functions
        )
        sep = regex_literal("\n")
    elif parser in ("llama3_json", "llama3_pythonic"):
        parser = "llama3_json"
        one = "|".join(
            regex_literal('{"name": "' + f.name + '", "parameters": ')
            + "("
            + arguments_regex(f.parameters)
            + ")"
            + regex_literal("}")
            for f in functions
        )
        sep = regex_literal("; ")
    else:
        raise ValueError(f"unknown tool parser {parser!r}")
    call = f"({one})"
    regex = f"{call}({sep}{call}){{0,{max_calls - 1}}}" if parallel and max_calls > 1 else call
    return ForcedCalls(regex=regex, parser=parser)
