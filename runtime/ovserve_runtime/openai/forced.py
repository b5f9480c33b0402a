"""The grammar that forces a tool call (tool_choice "required" or a named function), in the model family's own
output format, and the parser that reads it back.

Pure: no openvino, no I/O (outlines-core, through grammar.schema_regex, is pure too). What it builds is bounded
by grammar.Limits; it runs in the grammar worker (grammars.py), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from .grammar import Limits, regex_literal, schema_regex
from .tools import NAME_PATTERN, Function


class ForcedCalls(BaseModel):
    """The regex that constrains the output to calls (StructuredOutputConfig(regex=...)), and the parser
    that reads that output back."""

    model_config = ConfigDict(frozen=True)

    regex: str
    parser: str


MAX_PARALLEL_CALLS = 8
_EMPTY_OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}


def arguments_regex(parameters: dict[str, Any] | None, limits: Limits | None = None) -> str:
    """The compact regex (no free whitespace, integer bounds kept: grammar.schema_regex, within `limits`) of the
    JSON objects a parameters schema allows; free whitespace lets a small or random-weight model write spaces
    until max_tokens. A function without parameters takes `{}`."""
    return schema_regex(parameters if parameters else _EMPTY_OBJECT, limits)


# a family's call as the forced grammar writes it: (the call up to its arguments, what closes it, the separator of
# parallel calls); a name only ever matches NAME_PATTERN, so it needs no escaping in the format
_FORMATS = {
    "hermes": ('<tool_call>\n{{"name": "{name}", "arguments": ', "}\n</tool_call>", "\n"),
    "llama3_json": ('{{"name": "{name}", "parameters": ', "}", "; "),
}


def forced_parser(parser: str) -> str:
    """The parser that reads a forced call's output back: pythonic models are forced to Llama 3's JSON format."""
    if parser not in ("hermes", "llama3_json", "llama3_pythonic"):
        raise ValueError(f"unknown tool parser {parser!r}")
    return "llama3_json" if parser == "llama3_pythonic" else parser


def check_names(functions: Sequence[Function]) -> None:
    """ValueError for no function, or a name a regex cannot carry (cheap: checked before any grammar is built)."""
    if not functions:
        raise ValueError("no function to call")
    for f in functions:
        if not NAME_PATTERN.match(f.name):
            raise ValueError(f"function name {f.name!r} does not match {NAME_PATTERN.pattern}")


def forced_calls(
    parser: str,
    functions: Sequence[Function],
    *,
    parallel: bool,
    max_calls: int = MAX_PARALLEL_CALLS,
    limits: Limits | None = None,
) -> ForcedCalls:
    """The grammar of a forced call (tool_choice "required": one of `functions`; a named function: pass that
    one alone), in the family's own output format; with `parallel`, 1 to `max_calls` calls. Pythonic models
    are forced to Llama 3's JSON format (a Python-literal grammar from a JSON schema does not exist); the
    output is then read with that parser. Raises ValueError for a name a regex cannot carry, and what
    outlines-core raises for a schema it cannot compile (grammar.GrammarError beyond `limits`)."""
    check_names(functions)
    parser = forced_parser(parser)
    head, tail, sep = _FORMATS[parser]
    one = "|".join(
        f"{regex_literal(head.format(name=f.name))}({arguments_regex(f.parameters, limits)}){regex_literal(tail)}"
        for f in functions
    )
    sep = regex_literal(sep)
    call = f"({one})"
    regex = f"{call}({sep}{call}){{0,{max_calls - 1}}}" if parallel and max_calls > 1 else call
    return ForcedCalls(regex=regex, parser=parser)
