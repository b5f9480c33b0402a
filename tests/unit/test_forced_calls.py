"""The grammar of a forced tool call (ovserve_runtime.openai.forced.forced_calls): what it admits is a call in
the family's format with compact arguments fitting the parameters schema, and reads back as that call."""

from __future__ import annotations

import json
import re

import pytest
from ovserve_runtime.openai import forced, tools
from ovserve_runtime.openai.tools import Function

pytest.importorskip("outlines_core")

WEATHER = Function(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit"],
    },
)
NOW = Function(name="now")  # no parameters: {}
FUNCS = [WEATHER, NOW]


def hermes(name, args):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def llama(name, args):
    return f'{{"name": "{name}", "parameters": {args}}}'


OK_ARGS = [
    ("get_weather", '{"city":"Paris","unit":"c"}'),
    ("get_weather", '{"city":"","unit":"f","days":7}'),
    ("now", "{}"),
]
BAD_ARGS = [
    ("get_weather", '{"city": "Paris", "unit": "c"}'),  # free whitespace
    ("get_weather", '{"city":"Paris"}'),  # a required property missing
    ("get_weather", '{"city":"Amsterdam!","unit":"c"}'),  # maxLength
    ("get_weather", '{"city":"Paris","unit":"k"}'),  # not in the enum
    ("get_weather", '{"city":"Paris","unit":"c","days":8}'),  # above the maximum
    ("get_weather", '{"city":"Paris","unit":"c"'),  # cut
    ("now", '{"x":1}'),
    ("delete_all", "{}"),  # not offered
]


@pytest.mark.parametrize(("parser", "fmt", "sep"), [("hermes", hermes, "\n"), ("llama3_json", llama, "; ")])
def test_the_grammar_admits_exactly_valid_calls(parser, fmt, sep):
    one = forced.forced_calls(parser, FUNCS, parallel=False)
    many = forced.forced_calls(parser, FUNCS, parallel=True, max_calls=3)
    assert one.parser == many.parser == parser
    for name, args in OK_ARGS:
        text = fmt(name, args)
        assert re.fullmatch(one.regex, text), text
        parsed = tools.parse(one.parser, text, {f.name for f in FUNCS})
        assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls] == [
            (name, json.loads(args))
        ]
    for name, args in BAD_ARGS:
        assert not re.fullmatch(one.regex, fmt(name, args)), (name, args)
    both = sep.join(fmt(n, a) for n, a in OK_ARGS[:2])
    assert not re.fullmatch(one.regex, both)  # parallel_tool_calls false: one call
    assert re.fullmatch(many.regex, both)
    assert re.fullmatch(many.regex, sep.join(fmt(n, a) for n, a in OK_ARGS))
    assert not re.fullmatch(many.regex, sep.join(fmt(n, a) for n, a in OK_ARGS * 2))  # at most max_calls
    parsed = tools.parse(many.parser, both, {f.name for f in FUNCS})
    assert [c.function.name for c in parsed.tool_calls] == ["get_weather", "get_weather"]
    assert parsed.content is None


def test_a_named_function_admits_only_that_one():
    named = forced.forced_calls("hermes", [NOW], parallel=False)
    assert re.fullmatch(named.regex, hermes("now", "{}"))
    assert not re.fullmatch(named.regex, hermes("get_weather", '{"city":"Paris","unit":"c"}'))


def test_pythonic_models_are_forced_to_the_json_format():
    calls = forced.forced_calls("llama3_pythonic", [NOW], parallel=False)
    assert calls.parser == "llama3_json" and re.fullmatch(calls.regex, llama("now", "{}"))


@pytest.mark.parametrize(
    ("functions", "message"),
    [([], "no function"), ([Function(name="a b")], "does not match"), ([Function(name='x"|.*')], "does not match")],
)
def test_refused_functions(functions, message):
    with pytest.raises(ValueError, match=message):
        forced.forced_calls("hermes", functions, parallel=False)


def test_unknown_parser_is_refused():
    with pytest.raises(ValueError, match="unknown tool parser"):
        forced.forced_calls("mistral", [NOW], parallel=False)


def test_integer_bounds_reach_the_grammar():
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "b": {"type": "array", "items": {"type": "integer", "minimum": -2, "maximum": 2}},
        },
        "required": ["a", "b"],
    }
    regex = re.compile(forced.arguments_regex(schema))
    assert regex.fullmatch('{"a":9,"b":[-2,0,2]}')
    assert not regex.fullmatch('{"a":10,"b":[]}') and not regex.fullmatch('{"a":0,"b":[]}')
    assert not regex.fullmatch('{"a":5,"b":[3]}')
    with pytest.raises(ValueError):
        forced.arguments_regex({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 2}}})


def test_no_string_class_reaches_past_ascii_delete():
    """XGrammar warns on every request for a negative class reaching U+009F (outlines-core's default)."""
    regex = forced.arguments_regex({"type": "object", "properties": {"s": {"type": "string"}}})
    assert "\\x9F" not in regex and re.fullmatch(regex, '{"s":"Zürich 東京"}')
