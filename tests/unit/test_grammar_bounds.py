"""Grammar work a client controls is bounded (issue 38): schema limits, string patterns rewritten over the JSON
encoding in XGrammar's dialect, and the grammar worker (a real child process) with its deadline, memory limit
and cache."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from ovserve_runtime.grammars import GrammarService, build_job
from ovserve_runtime.openai import grammar
from ovserve_runtime.openai.grammar import GrammarError, GrammarJob, Limits
from ovserve_runtime.openai.jsonpattern import PatternError, rewrite


def optional_tree(levels: int, width: int) -> dict:
    """Objects of `width` optional properties, each a $ref to the level below: the regex grows ~80x a level
    (3 levels of 12: a 1.3 KB schema, 25 MB of regex)."""
    defs: dict = {"L0": {"type": "string"}}
    for i in range(1, levels + 1):
        defs[f"L{i}"] = {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/L{i - 1}"} for j in range(width)}}
    return {"$defs": defs, "$ref": f"#/$defs/L{levels}"}


def deep(levels: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}, "required": ["a"]}
    return node


def int_prop(**bounds) -> dict:
    return {"type": "object", "properties": {"n": {"type": "integer", **bounds}}, "required": ["n"]}


def test_expanded_bytes_writes_counted_repetitions_out():
    for regex, size in [
        ("abc", 3),
        ("(abc){3}", 15),  # the group with its parentheses, three times
        ("((a){10}){10}", 320),  # nested counts multiply
        ("[a-z]{5}", 20),  # a class weighs 4 whatever its text
        ('[^"\\\\x00-\\x1F]{2}', 8),
        ("\\d{3}", 3),
        ("a{2,}", 3),  # n + 1 copies
        ("(a|b){2,4}", 20),
        ("a*b+c?", 6),
    ]:
        assert grammar.expanded_bytes(regex) == size, regex


def test_a_small_regex_of_small_counts_that_expands_large_is_refused():
    """Fuzz finding (issue 38): a 1.1 KB forced-call schema (an array of 287 to 1,873 items, each an enum of
    long literals) passed every bound, and XGrammar's compile of its 1 MB expansion stalled the engine ~10 s."""
    values = [f"value-{i}-" + "x" * 20 for i in range(40)]
    schema = {"type": "array", "items": {"enum": values}, "minItems": 287, "maxItems": 1873}
    with pytest.raises(GrammarError, match="once its counts"):
        build_job(GrammarJob(kind="schema", param="response_format", schema_=schema), Limits())
    forced = GrammarJob(kind="forced", param="tools", parser="hermes", functions=(("f", schema),))
    with pytest.raises(GrammarError, match="once its counts"):
        build_job(forced, Limits())
    # what clients send stays in: a long string, a list of a few dozen small objects
    ok = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 3000},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                "maxItems": 32,
            },
        },
        "required": ["text", "items"],
    }
    build_job(GrammarJob(kind="schema", param="response_format", schema_=ok), Limits())


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (optional_tree(3, 12), "bytes, more than the limit"),  # the issue's 1.3 KB schema: 25 MB of regex
        (int_prop(minimum=0, maximum=10**4000), "digits"),  # 4,000-digit bound: int_range_regex never runs
        (int_prop(minimum=0, maximum=1e400), "not finite"),  # JSON 1e400 parses to inf
        (int_prop(minimum=float("nan"), maximum=3), "not finite"),
        (int_prop(maximum=float("-inf")), "not finite"),
        ({"type": "string", "maxLength": 10**9}, "maxLength"),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 100_000}, "maxItems"),
        (deep(100), "nests deeper"),
        ({"type": "string", "pattern": "(?=a)a"}, "lookahead"),
        ({"type": "string", "pattern": "(a)\\1"}, "backreference"),
        ({"type": "string", "pattern": "\\bword"}, "word boundary"),
        ({"type": "string", "pattern": "a{1,99999}"}, "repetition count"),
        ({"type": "string", "pattern": "[a-z]+", "minLength": 3}, "combined"),
        # each count in bounds, together 8,000 repetitions for XGrammar to expand
        (
            {
                "type": "object",
                "properties": {f"f{i}": {"type": "string", "maxLength": 200} for i in range(40)},
                "required": [f"f{i}" for i in range(40)],
            },
            "add up",
        ),
    ],
)
def test_hostile_schemas_are_refused_by_name(schema, says):
    with pytest.raises(GrammarError, match=re.escape(says)):
        build_job(GrammarJob(kind="schema", param="response_format", schema_=schema), Limits())


def test_a_wide_ref_tree_is_refused_by_its_expansion_before_outlines_runs():
    # 6 levels of 12: 12^6 nodes once expanded; outlines-core would need gigabytes for it
    with pytest.raises(GrammarError, match="expands"):
        grammar.check_schema(optional_tree(6, 12), Limits())


def test_what_stays_in_bounds_still_builds():
    assert grammar.schema_regex(optional_tree(1, 12))  # 4 KB of regex
    rx = grammar.schema_regex(int_prop(minimum=-(10**20), maximum=10**20))
    assert re.fullmatch(rx, '{"n":-100000000000000000000}') and not re.fullmatch(rx, '{"n":100000000000000000001}')


@pytest.mark.parametrize(
    ("pattern", "value", "fits"),
    [
        ("x|y", "x", True),  # a top-level alternation stays inside the quotes
        ("x|y", "y", True),
        ("x|y", "x|y", False),
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "ABC", False),
        ('^a"b$', 'a"b', True),  # a quote in the pattern is written escaped
        ("[^a]", '"', True),  # a negated class admits the quote as \"
        ("[^a]", "\\", True),
        ("[^a]", "\n", True),
        ("[^a]", "a", False),
        (".*", "free text", True),
        (".*", 'say "hi"', False),  # '.' never ends the string
        ("\\d{3}-\\d{4}", "555-1234", True),
        ("\\d{3}-\\d{4}", "5551234", False),
        ("(?:ab)+c?", "ababc", True),
        ("(?<year>\\d{4})", "2026", True),
        ("a+?b", "aab", True),  # lazy: the same language
        ("[\\s]", "\t", True),
        ("[-a]", "-", True),
        ("x{", "x{", True),  # a brace that is no quantifier is a literal
        ("\\u00e9+", "éé", True),
    ],
)
def test_patterns_match_the_json_encoding_of_what_they_match(pattern, value, fits):
    rx = rewrite(pattern, 4096)
    assert bool(re.fullmatch(rx, json.dumps(value, ensure_ascii=False)[1:-1])) == fits, rx


def test_a_pattern_alternation_cannot_make_invalid_json():
    rx = grammar.schema_regex(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "x|y"}}, "required": ["a"]}
    )
    assert re.fullmatch(rx, '{"a":"x"}') and re.fullmatch(rx, '{"a":"y"}')
    assert not re.fullmatch(rx, '{"a":"x}') and not re.fullmatch(rx, '{"a":y"}')  # outlines-core alone admits both


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("(?=a)", "lookahead"),
        ("(?<!a)b", "lookbehind"),
        ("(a)\\1", "backreference"),
        ("\\k<x>", "backreference"),
        ("\\bx", "word boundary"),
        ("\\p{L}", "Unicode property"),
        ("a*+", "possessive"),
        ("(?i)a", "inline flags"),
        ("a^b", "only supported at the start or end"),
        ("[a", "unclosed '['"),
        ("(a", "unclosed '('"),
        ("a)", "unmatched ')'"),
        ("*a", "follows nothing"),
        ("a{5,2}", "below its minimum"),
    ],
)
def test_patterns_outside_the_dialect_are_refused_by_name(pattern, says):
    with pytest.raises(PatternError, match=re.escape(says)):
        rewrite(pattern, 4096)


def test_a_forced_call_job_builds_the_family_format():
    job = GrammarJob(kind="forced", param="tools", parser="hermes", functions=(("now", None),), prefix="</think>\n\n")
    rx = build_job(job, Limits())["regex"]
    assert re.fullmatch(rx, '</think>\n\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    hostile = job.model_copy(update={"functions": (("now", optional_tree(3, 12)),)})
    with pytest.raises(GrammarError, match="bytes, more than the limit"):
        build_job(hostile, Limits())


def test_the_job_key_is_the_content():
    a = GrammarJob(kind="schema", param="response_format", schema_={"type": "integer"})
    assert a.key() == GrammarJob(kind="schema", param="response_format", schema_={"type": "integer"}).key()
    assert a.key() != GrammarJob(kind="schema", param="response_format", schema_={"type": "string"}).key()


# --- the worker process ------------------------------------------------------------------------------------


def service(**kw) -> tuple[GrammarService, list[str]]:
    outcomes: list[str] = []
    args = {
        "limits": Limits(),
        "timeout_s": 30.0,
        "memory_bytes": 1 << 30,
        "cache_entries": 8,
        "cache_bytes": 1 << 20,
        **kw,
    }
    return GrammarService(on_outcome=lambda o, _s: outcomes.append(o), **args), outcomes


def job(schema: dict) -> GrammarJob:
    return GrammarJob(kind="schema", param="response_format", schema_=schema)


def test_builds_are_cached_refusals_too_and_shared_in_flight():
    svc, outcomes = service()

    async def go():
        a, b = await asyncio.gather(
            svc.build(job(int_prop(minimum=1, maximum=9))), svc.build(job(int_prop(minimum=1, maximum=9)))
        )
        assert a == b and re.fullmatch(a["regex"], '{"n":5}')
        await svc.build(job(int_prop(minimum=1, maximum=9)))
        for _ in range(2):
            with pytest.raises(GrammarError, match="digits"):
                await svc.build(job(int_prop(maximum=10**50)))

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert outcomes == ["built", "hit", "refused", "hit"]


def test_a_build_over_the_deadline_is_refused_and_the_worker_replaced():
    svc, outcomes = service(timeout_s=0.001)  # a spawn alone takes longer

    async def go():
        with pytest.raises(GrammarError, match="took longer than"):
            await svc.build(job({"type": "integer"}))
        svc.timeout_s = 30.0
        assert (await svc.build(job({"type": "integer"})))["regex"]  # not cached as refused: built again

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert outcomes == ["timeout", "built"]


def test_a_build_over_the_memory_limit_is_refused_and_the_next_one_works():
    # permissive size limits: only the worker's address space stops outlines-core (3 levels of 24: gigabytes)
    svc, outcomes = service(
        limits=Limits(max_regex_bytes=1 << 40, max_expanded_nodes=10**9), memory_bytes=512 << 20, timeout_s=60.0
    )

    async def go():
        with pytest.raises(GrammarError, match=r"memory|crashed"):
            await svc.build(job(optional_tree(3, 24)))
        assert (await svc.build(job({"type": "boolean"})))["regex"]

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert outcomes == ["refused", "built"]


def test_the_cache_is_bounded_in_entries_and_bytes():
    svc, outcomes = service(cache_entries=2)

    async def go():
        for n in (1, 2, 3, 1):
            await svc.build(job(int_prop(minimum=0, maximum=n)))

    try:
        asyncio.run(go())
    finally:
        svc.close()
    assert outcomes == ["built"] * 4  # 1 was dropped when 3 came
    tiny, outcomes = service(cache_bytes=10)
    try:
        asyncio.run(tiny.build(job({"type": "integer"})))
        asyncio.run(tiny.build(job({"type": "integer"})))
    finally:
        tiny.close()
    assert outcomes == ["built", "built"]  # larger than the cache: never kept


# --- what the fuzzer found (docs/benchmarks.md, "The API under a fuzzer") ----------------------------------


@pytest.mark.parametrize(
    ("schema", "fits", "unfit"),
    [
        # outlines-core wrote these brackets and keys unescaped: XGrammar refused the regex inside the engine step
        ({"enum": [{"{J": None}]}, ['{"{J":null}'], ['{"{J":1}']),
        ({"enum": [[{}, {}, None, False]]}, ["[{},{},null,false]"], ["[{},{}]"]),
        ({"anyOf": [{"const": [0.0]}]}, ["[0.0]"], ["[0]"]),
        ({"enum": ["a.b", 1, None, 'q"r']}, ['"a.b"', "1", "null", '"q\\"r"'], ['"aXb"', "2"]),
        ({"type": "integer", "enum": [1, "one", 2]}, ["1", "2"], ['"one"']),  # values of another type drop out
    ],
)
def test_enums_and_consts_of_any_value_are_exact_and_parse_in_xgrammars_dialect(schema, fits, unfit):
    rx = grammar.schema_regex(schema)
    grammar.check_dialect(rx)
    for text in fits:
        assert re.fullmatch(rx, text), (rx, text)
    for text in unfit:
        assert not re.fullmatch(rx, text), (rx, text)


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "array", "items": {"enum": []}}, "empty enum"),  # gave `[,]`
        ({"anyOf": [{"enum": []}, {"enum": []}]}, "empty enum"),
        ({"type": "object", "properties": {'a"b': {"type": "boolean"}}}, "needs escaping"),  # gave {"a"b":true}
        ({"type": "object", "properties": {"a\nb": {"type": "boolean"}}}, "needs escaping"),
    ],
)
def test_schemas_that_would_give_invalid_json_are_refused(schema, says):
    with pytest.raises(GrammarError, match=says):
        grammar.schema_regex(schema)


@pytest.mark.parametrize(
    ("regex", "ok"),
    [
        ('\\{"a":(true|false)\\}', True),
        ("a{2,3}[{}]\\{", True),
        ('\\{"{J":null\\}', False),  # a bare brace: XGrammar's "Invalid repetition count"
        ("([a)", False),
        ("(a))", False),
        ("(?=a)", False),
        ("(?:a)", True),
        ("a{7,2}", False),  # the 10,000-request run: "Lower bound is larger than upper bound" failed the engine
    ],
)
def test_the_dialect_gate(regex, ok):
    if ok:
        grammar.check_dialect(regex)
    else:
        with pytest.raises(GrammarError, match="not supported"):
            grammar.check_dialect(regex)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}, "minItems": 544, "maxItems": 286},
        {"type": "string", "minLength": 7, "maxLength": 2},
    ],
)
def test_a_minimum_count_above_the_maximum_is_refused_before_the_engine(schema):
    with pytest.raises(GrammarError):
        grammar.schema_regex(schema)
