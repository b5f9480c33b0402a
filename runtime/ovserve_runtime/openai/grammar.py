"""Constrained output: a request's `response_format` or forced tool call as a compact regex or EBNF grammar.

openvino-genai's StructuredOutputConfig (XGrammar) takes a JSON schema itself, but compiles it with free
whitespace: measured on the random-weight tiny model, the output is `{` and whitespace until max_tokens
(docs/benchmarks.md). Without free whitespace even random weights give valid JSON. So:

- json_schema: outlines-core's `build_regex_from_schema(schema, whitespace_pattern="")` (Rust, no dependencies),
  with integer bounds (`minimum`/`maximum`, exclusive too) turned into a digit-range regex, which outlines-core
  leaves out (an unbounded integer lets a weak model emit digits until max_tokens, and the value would not
  fit the schema), and string `pattern`s rewritten over the JSON encoding in the grammar engine's dialect
  (jsonpattern.py);
- json_object: a compact EBNF grammar of one JSON object.

What a client controls is bounded before it costs anything (`Limits`): the schema's nesting, its size once
every `$ref` is expanded, numbers (finite, bounds of at most MAX_BOUND_DIGITS digits), repetition counts, and
the size of the regex produced (a 1.3 KB schema of optional properties `$ref`ing each other expands to 25 MB of
regex: refused by size, never compiled). The work runs in a worker process with a deadline (grammars.py):
`GrammarJob` is what crosses to it (grammars.build_job runs it there; forced calls: forced.py).

Pure: `schema_regex` returns the regex, or raises GrammarError (a 400 naming the job's `param`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .jsonpattern import PatternError, rewrite
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
_PATTERN_PLACEHOLDER = "ovservepat{}x"
MAX_BOUND_DIGITS = 30  # a number bound beyond 10^30 is refused (a digit-range regex grows with its digits)
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_PATTERN_SIBLINGS = {"type", "pattern", "description", "title", "default", "examples"}
_CLASS_BYTES = 4  # what a character class weighs in expanded_bytes
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_REGEX_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")
_LITERAL_PLACEHOLDER = "ovservelit{}x"
_VALUE_SIBLINGS = {"type", "enum", "const", "description", "title", "default", "examples"}
_JSON_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class GrammarError(ValueError):
    """The schema cannot be built (invalid, over a limit, or a feature outlines-core or XGrammar lacks)."""


class Limits(BaseModel):
    """The bounds of one grammar build (--max-grammar-bytes sets the first; the rest are fixed)."""

    model_config = ConfigDict(frozen=True)

    max_regex_bytes: int = 32 * 1024
    max_depth: int = 32  # nesting of the schema's objects and arrays
    max_expanded_nodes: int = 20_000  # schema nodes once every $ref is expanded (a recursive one once per path)
    max_repeat: int = 4096  # repetition counts ({n,m}, maxLength, maxItems): each, and all of them added up
    # the regex with its counted repetitions written out (expanded_bytes): what XGrammar compiles. Measured in
    # openvino-genai 2026.4.1 on one core: a JSON string of maxLength 4096 expands to 48 KiB, 0.07 s; an
    # alternation of 40 literals repeated 200 times to 79 KiB, 0.27 s; the fuzz finding's 0.9 MiB, 3 s (10 s in
    # a runtime under load)
    max_expanded_bytes: int = 64 * 1024


class GrammarJob(BaseModel):
    """What one request asks to be built: a response_format schema or a forced tool call. `key` hashes its
    content: the cache key (agents send the same schema on every call)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    kind: Literal["schema", "forced"]
    param: str  # the request field a refusal names: response_format or tools
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    parser: str | None = None  # forced: the tool-call family
    functions: tuple[tuple[str, dict[str, Any] | None], ...] = ()  # forced: (name, parameters)
    parallel: bool = False
    prefix: str = ""  # forced: a literal the output starts with (closing a reasoning block the prompt opened)

    def key(self) -> str:
        return hashlib.sha256(self.model_dump_json(by_alias=True).encode()).hexdigest()


def constraint(fmt: ResponseFormat | None) -> dict[str, str] | GrammarJob | None:
    """None for text; json_object's StructuredOutputConfig keyword arguments at once; for json_schema the job to
    build (the caller runs it in the grammar worker: grammars.py)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"grammar": JSON_OBJECT_EBNF}
    schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
    return GrammarJob(kind="schema", param="response_format", schema_=schema or {"type": "object"})


def regex_literal(text: str) -> str:
    """`text` as a regex that matches it literally (newlines as \\n), in a form XGrammar reads too."""
    return _REGEX_SPECIAL.sub(r"\\\1", text).replace("\n", r"\n")


def values_regex(values: list[Any]) -> str:
    """The regex of exactly these JSON values, each in its compact form (an enum or a const). outlines-core writes
    an object's or array's brackets and keys unescaped (`{"enum": [{"{J": null}]}` became a regex XGrammar
    refuses inside the engine's step, which failed every request in flight): built here instead."""
    if not values:
        raise GrammarError("an empty enum allows no value")
    return "(" + "|".join(regex_literal(json.dumps(v, separators=(",", ":"), ensure_ascii=False)) for v in values) + ")"


def check_dialect(regex: str) -> None:
    """The last gate before the engine: the regex parses in XGrammar's dialect (groups balanced, no `(?` but
    `(?:`, classes closed, a `{` only as a repetition count). XGrammar compiles inside the engine's step, where a
    parse error fails every request in flight: whatever slipped through the builders is a 400 here."""
    depth, i, n = 0, 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            j = i + 1
            while j < n and regex[j] != "]":
                j += 2 if regex[j] == "\\" else 1
            if j >= n:
                raise GrammarError("the grammar built from the schema is malformed (an unclosed '['): not supported")
            i = j + 1
            continue
        if c == "(":
            if regex.startswith("(?", i) and not regex.startswith("(?:", i):
                raise GrammarError("the grammar built from the schema uses '(?': not supported")
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise GrammarError("the grammar built from the schema is malformed (an unmatched ')'): not supported")
        elif c == "{":
            m = _REPEAT.match(regex, i)
            if not m:
                raise GrammarError("the grammar built from the schema is malformed (a bare '{'): not supported")
            if m.group(2) and int(m.group(1)) > int(m.group(2)):  # XGrammar: "Lower bound is larger than upper"
                raise GrammarError(
                    f"a count range {{{m.group(1)},{m.group(2)}}} whose minimum is above its maximum "
                    "(minItems above maxItems, minLength above maxLength): not supported"
                )
        i += 1
    if depth:
        raise GrammarError("the grammar built from the schema is malformed (an unclosed '('): not supported")


def schema_regex(schema: dict[str, Any], limits: Limits | None = None) -> str:
    """The compact regex of a JSON schema (GrammarError when it is over a limit or outlines-core refuses it)."""
    from outlines_core.json_schema import build_regex_from_schema

    limits = limits or Limits()
    check_schema(schema, limits)
    ranges: list[str] = []
    patterns: list[str] = []
    literals: list[str] = []
    schema = _placeholders(copy.deepcopy(schema), ranges, patterns, literals, limits)
    try:
        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern="")
    except Exception as exc:  # outlines-core raises ValueError or its own errors; all are the schema's fault
        raise GrammarError(f"the JSON schema is not supported: {exc}") from None
    check_regex(regex, limits)  # before the replacements copy it
    # outlines-core keeps U+007F-U+009F out of strings (JSON allows them); XGrammar's byte-level classes clamp
    # that range with a warning on stderr per request: exclude only U+007F
    regex = regex.replace(r"\x7F-\x9F", r"\x7F")
    for i, rx in enumerate(ranges):
        regex = regex.replace(f'"{_PLACEHOLDER.format(i)}"', f"({rx})")
    for i, rx in enumerate(patterns):
        regex = regex.replace(f'"{_PATTERN_PLACEHOLDER.format(i)}"', f'"{rx}"')
    for i, rx in enumerate(literals):
        regex = regex.replace(f'"{_LITERAL_PLACEHOLDER.format(i)}"', rx)
    check_regex(regex, limits)
    check_dialect(regex)
    return regex


def check_regex(regex: str, limits: Limits) -> None:
    """The produced regex within the limits: its size, its repetition counts added up, and its size with the counts
    written out (expanded_bytes). All three drive the time
    XGrammar takes to compile it, inside openvino-genai on the engine's thread (docs/runtime.md: measured)."""
    size = len(regex.encode())
    if size > limits.max_regex_bytes:
        raise GrammarError(
            f"the schema expands to a grammar of {size} bytes, more than the limit of {limits.max_regex_bytes} "
            "(optional properties and $ref multiply it: make properties required, or flatten the schema)"
        )
    # XGrammar expands counted repetitions: their sum drives its compile time too (small items, many counts)
    total = 0
    for m in _REPEAT.finditer(regex):
        total += int(m.group(2) or m.group(1))
        if total > limits.max_repeat:
            raise GrammarError(
                f"the schema's repetition counts (maxLength, maxItems, {{n,m}} in patterns) add up to more than "
                f"{limits.max_repeat}"
            )
    expanded = expanded_bytes(regex)
    if expanded > limits.max_expanded_bytes:
        raise GrammarError(
            f"the schema expands to a grammar of {expanded} bytes once its counts (maxItems, maxLength, {{n,m}}) "
            f"are written out, more than the limit of {limits.max_expanded_bytes} (lower maxItems or maxLength, "
            "or repeat a smaller item)"
        )


def expanded_bytes(regex: str) -> int:
    """The size of `regex` with every counted repetition written out: `(abc){3}` counts as `(abc)(abc)(abc)`,
    nested counts multiply. XGrammar expands counted repetitions into copies of what they repeat, so this, not
    the regex's length nor the counts alone, is what its compile time follows: a 1 KB alternation repeated
    {286,1872} is a small regex with small counts that stalled the engine for 10 s (fuzz finding, issue 38).
    A character class weighs _CLASS_BYTES whatever its text, an escape one; `{n,}` counts n + 1 copies; `*`,
    `+` and `?` add none."""
    stack: list[list[int]] = [[]]  # per open group: the sizes of its elements so far
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":  # an escaped character is one
            stack[-1].append(1)
            i += 2
            continue
        if c == "[":  # a class is one node of the automaton however long its text (a few edges)
            j = i + 1
            while j < n and regex[j] != "]":
                j += 2 if regex[j] == "\\" else 1
            stack[-1].append(_CLASS_BYTES)
            i = j + 1
            continue
        if c == "(":
            stack.append([])
        elif c == ")" and len(stack) > 1:
            inner = stack.pop()
            stack[-1].append(sum(inner) + 2)
        elif c == "{" and (m := _REPEAT.match(regex, i)):
            lo, hi = int(m.group(1)), m.group(2)
            copies = int(hi) if hi else lo + 1 if hi is not None else lo
            if stack[-1]:
                stack[-1][-1] *= max(copies, 1)
            i = m.end()
            continue
        else:
            stack[-1].append(1)
        i += 1
    return sum(sum(frame) for frame in stack)


def check_schema(schema: Any, limits: Limits) -> None:
    """Refuse, before any copy or compile, what no later bound makes cheap: deep nesting, a $ref expansion beyond
    `max_expanded_nodes`, a non-finite number, a number bound of more than MAX_BOUND_DIGITS digits, a count over
    `max_repeat`."""
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.max_depth:
            raise GrammarError(f"the schema nests deeper than {limits.max_depth} levels")
        if isinstance(node, float) and not math.isfinite(node):
            raise GrammarError(f"the schema holds a number that is not finite ({node}): JSON has no NaN or Infinity")
        if isinstance(node, list):
            stack.extend((x, depth + 1) for x in node)
        elif isinstance(node, dict):
            names = node.get("properties")
            for name in names if isinstance(names, dict) else ():
                if json.dumps(name, ensure_ascii=False)[1:-1] != name:
                    # outlines-core writes property names raw: {"a"b":true} would be the output
                    raise GrammarError(f"the property name {name[:40]!r} needs escaping in JSON: not supported")
            for k in _NUMBER_KEYWORDS:
                v = node.get(k)
                if isinstance(v, float) and not math.isfinite(v):
                    raise GrammarError(f"{k} is not finite ({v}): JSON has no NaN or Infinity")
                if _is_number(v) and _too_long(v):
                    raise GrammarError(f"{k} {_short(v)} has more than {MAX_BOUND_DIGITS} digits")
            for k in _COUNT_KEYWORDS:
                v = node.get(k)
                if _is_number(v) and not (isinstance(v, float) and math.isnan(v)) and v > limits.max_repeat:
                    raise GrammarError(f"{k} {_short(v)} is over the limit of {limits.max_repeat}")
            stack.extend((v, depth + 1) for v in node.values())
    _check_expansion(schema, limits.max_expanded_nodes)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _too_long(v: int | float) -> bool:
    return abs(v) >= (10.0**MAX_BOUND_DIGITS if isinstance(v, float) else 10**MAX_BOUND_DIGITS)


def _short(v: int | float) -> str:
    """A number for a message: a huge integer by its digit count (its text would be the size of the body)."""
    if isinstance(v, int) and abs(v) >= 10**40:
        return f"(an integer of {len(str(abs(v)))} digits)"
    return str(v)


def _check_expansion(schema: Any, limit: int) -> None:
    """The schema's node count with every local $ref expanded: memoized per target; a $ref to a target already
    being expanded on the path counts once (outlines-core bounds recursion itself)."""
    if not isinstance(schema, dict):
        return
    sizes: dict[str, int] = {}

    def target(ref: str) -> Any:
        node: Any = schema
        for part in (p for p in ref[1:].split("/") if p):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def size(node: Any, path: frozenset[str]) -> int:
        total = 0
        todo = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, list):
                todo.extend(n)
                continue
            if not isinstance(n, dict):
                continue
            total += 1
            ref = n.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and ref not in path:
                if ref not in sizes:
                    sizes[ref] = size(target(ref), path | {ref}) if len(path) < limit else 1
                total += sizes[ref]
            todo.extend(v for k, v in n.items() if k not in ("$defs", "definitions"))
            if total > limit:
                raise GrammarError(f"the schema expands ($ref included) to more than {limit} nodes: flatten it")
        return total

    size(schema, frozenset())


def _placeholders(node: Any, ranges: list[str], patterns: list[str], literals: list[str], limits: Limits) -> Any:
    """Replace every bounded integer subschema, every string `pattern` and every enum or const by a placeholder
    const: the integer's range regex kept in `ranges`, the pattern rewritten over the JSON encoding in `patterns`,
    the values' regex in `literals`."""
    if isinstance(node, list):
        return [_placeholders(x, ranges, patterns, literals, limits) for x in node]
    if not isinstance(node, dict):
        return node
    if ("enum" in node or "const" in node) and not set(node) - _VALUE_SIBLINGS:
        values = node["enum"] if "enum" in node else [node["const"]]
        if not isinstance(values, list):
            raise GrammarError("enum must be a list of values")
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if isinstance(kinds, list):
            values = [v for v in values if any(_JSON_TYPES.get(k, lambda _v: False)(v) for k in kinds)]
        literals.append(values_regex(values))
        return {"const": _LITERAL_PLACEHOLDER.format(len(literals) - 1)}
    bounds = _int_bounds(node)
    if bounds is not None:
        ranges.append(int_range_regex(*bounds))
        return {"const": _PLACEHOLDER.format(len(ranges) - 1)}
    pattern = node.get("pattern")
    if isinstance(pattern, str) and node.get("type", "string") == "string":
        if set(node) - _PATTERN_SIBLINGS:
            raise GrammarError(
                f"the pattern {pattern[:80]!r} is combined with other string keywords "
                f"({', '.join(sorted(set(node) - _PATTERN_SIBLINGS))}): write them into the pattern"
            )
        try:
            patterns.append(rewrite(pattern, limits.max_repeat))
        except PatternError as exc:
            raise GrammarError(f"the pattern {pattern[:80]!r} is not supported: {exc}") from None
        return {"const": _PATTERN_PLACEHOLDER.format(len(patterns) - 1)}
    # properties' and $defs' keys are names, not keywords: recurse into their values only
    return {k: _placeholders(v, ranges, patterns, literals, limits) for k, v in node.items()}


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
