"""Tool calls in model output: a parser per model family, streamed and not; the family from a chat template.
(The grammar that forces a call is forced.py's.)

Pure: no openvino, no I/O. The families:

- `hermes` (Hermes, Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, any number,
  with content around them.
- `llama3_json` (Llama 3.1/3.2/3.3): the output is `{"name": ..., "parameters": {...}}` (optionally after
  `<|python_tag|>`), several separated by `;`. An output that does not open with a call is content.
- `llama3_pythonic` (Llama 3.2 pythonic, Llama 4): the output is a Python list of calls with literal
  keyword arguments, `[get_weather(city="Paris"), ...]` (optionally in `<|python_start|>...<|python_end|>`).

A call is valid when its name is one of the request's functions and its arguments are a JSON object; the
OpenAI `arguments` string is that object re-serialized, so it is always valid JSON. Text that looks like a
call but is not a valid one stays in `content`, as the model wrote it: nothing is lost, nothing invented.
Any output is read without an exception: a call nested deeper than MAX_DEPTH is content (checked before any
recursive decoder runs), and Python's parser failing on a pythonic list (RecursionError, MemoryError) is too.

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
from collections.abc import Callable, Collection
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

# The deepest nesting a call's JSON (or a pythonic call's literal) may have; deeper is not a call but content.
# Decoders recurse per level: a bound far under the interpreter's recursion limit keeps them safe on any stack.
MAX_DEPTH = 64
_IN_STRING = re.compile(r'["\\]')
_OUT_OF_STRING = re.compile(r'[{}\[\]"]')
_NEWLINE = re.compile(rb"\r\n|\r|\n")  # Python's line ends: ast offsets are UTF-8 bytes within a line


class JsonSpan:
    """Where a JSON object ends, found as its text arrives in pieces: each character is looked at once
    (linear in the object's length however it is split), with the deepest nesting seen so far."""

    __slots__ = ("_escape", "_in_string", "deepest", "depth")

    def __init__(self) -> None:
        self.depth = self.deepest = 0
        self._in_string = self._escape = False

    def feed(self, text: str) -> int:
        """Scan the next piece; the index in it just past the object's closing brace, or -1 (not closed yet)."""
        i, n = 0, len(text)
        if self._escape and n:
            i, self._escape = 1, False
        while i < n:
            if self._in_string:
                m = _IN_STRING.search(text, i)
                if m is None:
                    return -1
                i = m.end()
                if m.group() == '"':
                    self._in_string = False
                elif i == n:  # a backslash ends the piece: the character it escapes starts the next
                    self._escape = True
                else:
                    i += 1
                continue
            m = _OUT_OF_STRING.search(text, i)
            if m is None:
                return -1
            i, c = m.end(), m.group()
            if c == '"':
                self._in_string = True
            elif c in "{[":
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return i
        return -1


def too_deep(text: str) -> bool:
    """Does this JSON text nest deeper than MAX_DEPTH (read without recursion)?"""
    span = JsonSpan()
    span.feed(text)
    return span.deepest > MAX_DEPTH


def _call(name: Any, arguments: Any, tool_names: Collection[str] | None, new_id: Callable[[], str]) -> ToolCall | None:
    """A valid call from a parsed name and arguments, or None."""
    if not isinstance(name, str) or not name or (tool_names is not None and name not in tool_names):
        return None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        if too_deep(arguments):
            return None
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError, MemoryError):
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    try:  # NaN and Infinity (json.loads reads them, and 1e999 as inf) are not JSON: not a call
        text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError, MemoryError):
        return None
    return ToolCall(id=new_id(), function=FunctionCall(name=name, arguments=text))


def _json_call(body: str, keys: tuple[str, ...], tool_names, new_id) -> ToolCall | None:
    """The call a JSON object's text is, or None; never raises (depth bounded before any decoding)."""
    if not body.startswith("{") or too_deep(body):
        return None
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(obj, dict) or set(obj) - {"name", *keys}:
        return None
    arguments = next((obj[k] for k in keys if k in obj), None)
    return _call(obj.get("name"), arguments, tool_names, new_id)


# ------------------------------------------------------------------------------------------ streams


class ToolCallStream:
    """Fed the output's text deltas (`feed`), then `finish` once; each returns the Deltas ready to send.

    Linear time in the output whatever its split: text a parser must hold (a call not yet complete, leading
    whitespace before the output's form is known) is kept as a list of pieces and joined once, and each
    piece is scanned once."""

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
        self._buf = ""  # text not yet looked at (or a short tail that may still become a marker)
        self._held: list[str] = []  # text looked at and held (a call's body so far, leading whitespace)
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

    def _unhold(self) -> str:
        """The held text, joined (once), and no longer held."""
        text, self._held = "".join(self._held), []
        return text

    def pending(self) -> str:
        """What the parser holds and has not sent (for a caller that falls back to plain content)."""
        return "".join(self._held) + self._buf

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
        if rest := self._unhold() + self._buf:
            self._content(rest)
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
        self._tail = ""  # the body's last characters: the closing tag may start in them

    def _step(self, final: bool) -> None:
        while self._buf or (final and self._inside):
            if not self._inside:
                start = self._buf.find(self.OPEN)
                if start < 0:
                    keep = 0 if final else hold_back(self._buf, self.OPEN)
                    self._content(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return
                self._content(self._buf[:start])
                self._buf = self._buf[start + len(self.OPEN) :]
                self._inside, self._tail = True, ""
            # inside: only the new text (and the tail before it) is searched for the closing tag
            probe = self._tail + self._buf
            end = probe.find(self.CLOSE)
            if end < 0 and not final:
                self._held.append(self._buf)
                self._tail, self._buf = probe[-(len(self.CLOSE) - 1) :], ""
                return
            text = self._unhold() + self._buf
            cut = len(text) - len(probe) + end if end >= 0 else len(text)
            body, closed = text[:cut], end >= 0
            self._buf = text[cut + len(self.CLOSE) :] if closed else ""
            self._inside, self._tail = False, ""
            call = _json_call(body.strip(), ("arguments", "parameters"), self._names, self._new_id)
            if call is None or self._full():
                # not a valid call (or one too many): it stays text, as written
                self._content(self.OPEN + body + (self.CLOSE if closed else ""))
            else:
                self._emit(call)


class Llama3JsonStream(ToolCallStream):
    """Calls as JSON objects from the start of the output, separated by `;`; the first text that is not a
    call ends them and is content from there on. A call is decoded once, when its closing brace arrives
    (JsonSpan finds it): never the pending text again on every delta."""

    TAG = "<|python_tag|>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start -> calls -> content
        self._span: JsonSpan | None = None  # the call being received

    def _step(self, final: bool) -> None:
        while self._buf or (final and self._held):
            if self._mode == "content":
                self._content(self._unhold() + self._buf)
                self._buf = ""
                return
            if self._mode == "start":
                head = self._buf.lstrip()
                if head.startswith(self.TAG):
                    self._buf, self._mode = head[len(self.TAG) :], "calls"
                    self._held = []
                elif head.startswith("{"):
                    self._buf, self._mode = head, "calls"
                    self._held = []
                elif not head and not final:  # whitespace so far: held as pieces, looked at once
                    self._held.append(self._buf)
                    self._buf = ""
                    return
                elif head and self.TAG.startswith(head) and not final:
                    return
                else:
                    self._buf, self._mode = self._unhold() + self._buf, "content"
                continue
            if self._span is None:  # calls: skip separators; what follows must open an object
                rest = self._buf.lstrip().lstrip(";").lstrip()
                if not rest:
                    self._buf = ""
                    return
                if not rest.startswith("{"):
                    self._buf, self._mode = rest, "content"
                    continue
                self._span, self._buf = JsonSpan(), rest
            end = self._span.feed(self._buf)
            if end < 0 and self._span.deepest <= MAX_DEPTH and not final:
                self._held.append(self._buf)  # incomplete: held, and scanned no more
                self._buf = ""
                return
            text = self._unhold() + self._buf
            deep, self._span = self._span.deepest > MAX_DEPTH, None
            if end < 0 or deep:  # cut mid-call, or deeper than any call: content from here on
                self._buf, self._mode = text, "content"
                continue
            cut = len(text) - len(self._buf) + end
            call = _json_call(text[:cut], ("parameters", "arguments"), self._names, self._new_id)
            if call is None or self._full():
                self._buf, self._mode = text, "content"
                continue
            self._emit(call)
            self._buf = text[cut:]


class Llama3PythonicStream(ToolCallStream):
    """A Python list of calls that is the whole output; parsed once the output ends."""

    START, END = "<|python_start|>", "<|python_end|>"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start -> list (held to the end) | content

    def _step(self, final: bool) -> None:
        if self._mode == "content":
            self._content(self._unhold() + self._buf)
            self._buf = ""
            return
        if not final:
            if self._mode == "list":  # held as pieces to the end: nothing to look at before
                self._held.append(self._buf)
                self._buf = ""
                return
            head = self._buf.lstrip()
            if head.startswith(("[", self.START)):
                self._mode = "list"
            elif not head:  # whitespace so far
                self._held.append(self._buf)
                self._buf = ""
            elif not self.START.startswith(head):
                self._mode = "content"
                self._step(final)
            return
        text = self._unhold() + self._buf
        self._buf = ""
        calls = self._parse(text)
        if calls is None:
            self._mode, self._buf = "content", text
            self._step(final)
            return
        keep = calls if self._max is None else calls[: self._max]
        for call, _ in keep:
            self._emit(call)
        if rest := ", ".join(source for _, source in calls[len(keep) :]):
            self._content(rest)  # calls beyond parallel_tool_calls false: text, as written

    def _parse(self, text: str) -> list[tuple[ToolCall, str]] | None:
        """The calls of a pythonic list, each with its source text; None when it is not one. Python's parser
        raises RecursionError or MemoryError on deep or long expressions (`1+1+...`, `---...1`): not a list of
        calls either."""
        text = text.strip()
        if text.startswith(self.START):
            text = text[len(self.START) :].removesuffix(self.END).strip()
        if not text.startswith("["):
            return None
        try:
            return self._call_list(text)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            return None

    def _call_list(self, text: str) -> list[tuple[ToolCall, str]] | None:
        tree = ast.parse(text, mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls: list[tuple[ToolCall, ast.Call]] = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
            if None in kwargs:  # **spread
                return None
            call = _call(node.func.id, _jsonable(kwargs), self._names, self._new_id)
            if call is None:
                return None
            calls.append((call, node))
        # the source of the calls kept as text (parallel_tool_calls false); ast.get_source_segment re-splits
        # the whole text for every call (2.6 s for one 400 KB output): the line offsets are found once here
        data = text.encode()
        starts = [0, *(m.end() for m in _NEWLINE.finditer(data))]
        return [
            (call, data[starts[n.lineno - 1] + n.col_offset : starts[n.end_lineno - 1] + n.end_col_offset].decode())
            for call, n in calls
        ]


def _jsonable(value: Any, depth: int = 1) -> Any:
    """Python literals as JSON values (tuples and sets as arrays); raises ValueError for what JSON lacks and
    for nesting deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("non-string key")
        return {k: _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
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


class Function(BaseModel):
    """A function the request offers: its name and the JSON schema of its parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    parameters: dict[str, Any] | None = None
