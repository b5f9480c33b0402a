"""Constrained output: a request's `response_format` as a compact regex or EBNF grammar.

openvino-genai's StructuredOutputConfig (XGrammar) takes a JSON schema itself, but compiles it with free
whitespace: measured on the random-weight tiny model, the output is `{` and whitespace until max_tokens
(docs/benchmarks.md). Without free whitespace even random weights give valid JSON. So:

- json_schema: outlines-core's `build_regex_from_schema(schema, whitespace_pattern="")` (Rust, no dependencies),
  with integer bounds (`minimum`/`maximum`, exclusive too) turned into a digit-range regex, which outlines-core
  leaves out (an unbounded integer lets a weak model emit digits until max_tokens, and the value would not
  fit the schema);
- json_object: a compact EBNF grammar of one JSON object.

Pure: `constraint(fmt)` returns the StructuredOutputConfig keyword arguments, or raises GrammarError
(a 400 naming `response_format`).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from .request import ResponseFormat

# one JSON object, no whitespace between tokens (XGrammar EBNF)
JSON_OBJECT_EBNF = r"""root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"
array ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+-]? [0-9]+ )?
"""

_PLACEHOLDER = "ovserveint{}x"  # a const string outlines-core copies into its regex verbatim


class GrammarError(ValueError):
    """The schema cannot be compiled (invalid, or a feature outlines-core does not support)."""


def constraint(fmt: ResponseFormat | None) -> dict[str, str] | None:
    """StructuredOutputConfig keyword arguments for `fmt` (`{"regex": ...}` or `{"grammar": ...}`); None for text."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"grammar": JSON_OBJECT_EBNF}
    schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
    return {"regex": schema_regex(schema if schema is not None else {"type": "object"})}


def schema_regex(schema: dict[str, Any]) -> str:
    """The compact regex of a JSON schema (GrammarError when outlines-core refuses it)."""
    from outlines_core.json_schema import build_regex_from_schema

    ranges: list[str] = []
    schema = _bound_integers(copy.deepcopy(schema), ranges)
    try:
        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern="")
    except Exception as exc:  # outlines-core raises ValueError or its own errors; all are the schema's fault
        raise GrammarError(f"the JSON schema is not supported: {exc}") from None
    # outlines-core keeps U+007F-U+009F out of strings (JSON allows them); XGrammar's byte-level classes clamp
    # that range with a warning on stderr per request: exclude only U+007F
    regex = regex.replace(r"\x7F-\x9F", r"\x7F")
    for i, rx in enumerate(ranges):
        regex = regex.replace(f'"{_PLACEHOLDER.format(i)}"', f"({rx})")
    try:
        re.compile(regex)
    except re.error as exc:
        raise GrammarError(f"the JSON schema is not supported: {exc}") from None
    return regex


def _bound_integers(node: Any, ranges: list[str]) -> Any:
    """Replace every bounded integer subschema by a placeholder const (its range regex kept in `ranges`)."""
    if isinstance(node, list):
        return [_bound_integers(x, ranges) for x in node]
    if not isinstance(node, dict):
        return node
    bounds = _int_bounds(node)
    if bounds is not None:
        ranges.append(int_range_regex(*bounds))
        return {"const": _PLACEHOLDER.format(len(ranges) - 1)}
    # properties' and $defs' keys are names, not keywords: recurse into their values only
    return {k: _bound_integers(v, ranges) for k, v in node.items()}


def _int_bounds(node: dict) -> tuple[int, int] | None:
    if node.get("type") != "integer" or set(node) - {
        "type",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "description",
        "title",
        "default",
    }:
        return None
    lo, hi = node.get("minimum"), node.get("maximum")
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(node["exclusiveMinimum"], bool):
        lo = int(node["exclusiveMinimum"]) + 1 if lo is None else max(lo, int(node["exclusiveMinimum"]) + 1)
    if isinstance(node.get("exclusiveMaximum"), int | float) and not isinstance(node["exclusiveMaximum"], bool):
        hi = _ceil(node["exclusiveMaximum"]) - 1 if hi is None else min(hi, _ceil(node["exclusiveMaximum"]) - 1)
    if lo is None or hi is None:
        return None
    lo, hi = _ceil(lo), int(hi // 1)
    if lo > hi:
        raise GrammarError(f"an integer's minimum {lo} is above its maximum {hi}")
    return lo, hi


def _ceil(x: float) -> int:
    return -int(-x // 1)


def int_range_regex(lo: int, hi: int) -> str:
    """A regex matching exactly the decimal integers lo..hi (JSON form: no leading zeros, no '+', '-0' never)."""
    parts: list[str] = []
    if lo < 0:
        neg_hi = -min(hi, -1)  # the negatives' magnitudes: neg_hi..-lo
        parts += ["-" + p for p in _nonneg(neg_hi, -lo)]
    if hi >= 0:
        parts += _nonneg(max(lo, 0), hi)
    return "|".join(parts)


def _nonneg(lo: int, hi: int) -> list[str]:
    """Patterns of lo..hi (0 <= lo <= hi), each over numbers of one length."""
    out = []
    start = lo
    for stop in _split(lo, hi):
        out.append(_pattern(start, stop))
        start = stop + 1
    return out


def _split(lo: int, hi: int) -> list[int]:
    """The ends of the sub-ranges of lo..hi that one pattern (prefix, one digit class, then \\d runs) covers."""
    stops = {hi}
    nines = 1
    stop = _fill_nines(lo, nines)
    while lo <= stop < hi:
        stops.add(stop)
        nines += 1
        stop = _fill_nines(lo, nines)
    zeros = 1
    stop = (hi + 1) - (hi + 1) % 10**zeros - 1
    while lo < stop <= hi:
        stops.add(stop)
        zeros += 1
        stop = (hi + 1) - (hi + 1) % 10**zeros - 1
    return sorted(stops)


def _fill_nines(n: int, count: int) -> int:
    s = str(n)
    return int(s[:-count] + "9" * count) if count < len(s) else int("9" * max(count, len(s)))


def _pattern(start: int, stop: int) -> str:
    a, b = str(start), str(stop)
    if len(a) != len(b):  # only 0..9-style splits reach here with equal lengths; keep it safe
        raise AssertionError((start, stop))
    out = ""
    run = 0
    for x, y in zip(a, b, strict=True):
        if x == y:
            out += x
        elif x == "0" and y == "9":
            run += 1
        else:
            out += f"[{x}-{y}]"
    return out + ("[0-9]" if run == 1 else f"[0-9]{{{run}}}" if run else "")
