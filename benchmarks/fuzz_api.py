"""API fuzz benchmark: a hostile client against a real ovserve-runtime while ordinary streaming clients run.

Not a timed test: a bounded run (at most --requests fuzz requests and --duration seconds, loopback only) that
prints figures. What is sent:
  generated  bodies drawn by hypothesis (hypothesis-jsonschema) from the runtime's own OpenAPI document
             (GET /openapi.json): valid by the schema, mutated (a field given any JSON value, a required field
             dropped, an unknown field added), output schemas drawn by a schema strategy through
             response_format and forced tool calls, arbitrary JSON; a generator subprocess draws them
  corpus     adversarial bodies: deep $ref trees (response_format json_schema, tools parameters), integer
             bounds of thousands of digits, 1e400 / NaN / Infinity bounds, regex constructs, deep nesting,
             huge strings and counts, invalid UTF-8 and lone surrogates, compressed bombs, wrong
             content types, and for every field of the chat and completions bodies each wrong JSON type and
             each bound (at it and one past it, read from the OpenAPI document)
while --steady streaming chat clients (a subprocess of their own, so that the fuzzer's CPU is not theirs)
run as a pod's ordinary users would. Before the fuzz phase the same steady clients run alone for
--baseline seconds: their p99 latency without the fuzzer.

Printed: requests sent and their statuses, 5xx (goal 0), hangs (no answer within --request-timeout),
connection errors, 4xx that are not an OpenAI error JSON, runtime process restarts and engine-child changes
(0), liveness failures (GET /v2/health/live polled every second), the steady clients' requests, failures (0)
and p50/p99 latency with and without the fuzzer, the RSS of the HTTP process and of the engine child
sampled over the run with its least-squares slope, and the slowest fuzz requests. Every 5xx, hang and
connection error is written down (kind, path, status, the body's head and sha256, the answer's head) and,
with --findings DIR, its whole body is saved there to replay. Exit code 1 when a figure that must be 0 is not.

The runtime is started here on loopback on a tiny chat model (--model, a directory or a name under
$OVSERVE_MODELS; restarted if it dies, and counted), or reached at --url with --pid for RSS and restarts.
tests/runtime/test_fuzz.py runs a bounded subset (`fuzz()` with a few hundred requests).

usage: .venv/bin/python benchmarks/fuzz_api.py [--requests 10000] [--duration 1800] [--model tiny-qwen25]
         [--steady 4] [--baseline 30] [--concurrency 4] [--seed 0] [--findings DIR]
         [--url http://127.0.0.1:PORT --pid PID]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODELS = Path(os.environ.get("OVSERVE_MODELS") or "/var/cache/ovserve/models")
JSON_CT = {"Content-Type": "application/json"}
HERE = Path(__file__).resolve()
READ_LIMIT = 4 * 1024 * 1024  # bytes of one answer read before the fuzzer hangs up (a long stream is not a finding)


# --- what is sent -----------------------------------------------------------------------------------------


@dataclass
class Probe:
    kind: str  # generated/<mode> or corpus/<name>
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON_CT))


def big_int(digits: int, sign: str = "") -> str:
    return sign + "9" * digits  # as text: Python's int <-> str is bounded at 4,300 digits


def raw_json(template: dict, **raw: str) -> bytes:
    """JSON with tokens json.dumps cannot write (1e400, NaN, numbers of thousands of digits): each string
    value "@NAME@" in `template` becomes raw[NAME] verbatim."""
    text = json.dumps(template)
    for name, token in raw.items():
        text = text.replace(json.dumps(f"@{name}@"), token)
    return text.encode()


def deep_ref_tree(levels: int, width: int) -> dict:
    """The issue's schema: `levels` levels of objects with `width` optional properties, each a $ref to the
    level below (a grammar that inlines refs grows as width**levels)."""
    defs: dict[str, Any] = {f"L{levels}": {"type": "string"}}
    for lv in range(levels - 1, -1, -1):
        props = {f"p{i}": {"$ref": f"#/$defs/L{lv + 1}"} for i in range(width)}
        defs[f"L{lv}"] = {"type": "object", "properties": props}
    return {"$defs": defs, "$ref": "#/$defs/L0"}


def nested_text(depth: int, open_: str, close: str, leaf: str = "1") -> str:
    return open_ * depth + leaf + close * depth


class Bodies:
    """Body builders around one served model name."""

    def __init__(self, served: str) -> None:
        self.served = served

    def chat(self, **fields: Any) -> dict:
        return {"model": self.served, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields}

    def rf(self, schema: Any) -> dict:
        # max_tokens 32: room to finish a small object ("stop"), whose content must then parse as JSON
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return self.chat(response_format=fmt, max_tokens=32)

    def tool(self, schema: Any, choice: Any = "required") -> dict:
        return self.chat(
            tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], tool_choice=choice
        )


CHAT = "/v3/chat/completions"
COMPLETIONS = "/v3/completions"
NAMED = {"type": "function", "function": {"name": "f"}}

# schemas placed in response_format and in a forced tool call's parameters
HOSTILE_SCHEMAS: dict[str, Any] = {
    "ref_tree_3x12": deep_ref_tree(3, 12),
    "ref_tree_4x12": deep_ref_tree(4, 12),
    "ref_tree_6x8": deep_ref_tree(6, 8),
    "ref_self": {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    "ref_mutual": {
        "$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/b"}}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
        "$ref": "#/$defs/a",
    },
    "ref_missing": {"$ref": "#/$defs/nowhere"},
    "ref_remote": {"$ref": "http://127.0.0.1:9/schema.json"},  # loopback, closed: nothing may be fetched
    "pattern_alternation": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x|y"}}},
    "pattern_lookahead": {"type": "string", "pattern": "(?=a)a+"},
    "pattern_backreference": {"type": "string", "pattern": "(a)\\1"},
    "pattern_catastrophic": {"type": "string", "pattern": "(a*)*b"},
    "pattern_unbalanced": {"type": "string", "pattern": "(["},
    "pattern_huge_repeat": {"type": "string", "pattern": "a{1000000}"},
    "pattern_nested_repeat": {"type": "string", "pattern": "((a{1,100}){1,100}){1,100}"},
    "min_length_huge": {"type": "string", "minLength": 10**6},
    "max_length_huge": {"type": "string", "maxLength": 10**12},
    "min_items_huge": {"type": "array", "items": {"type": "integer"}, "minItems": 10**6},
    "max_items_huge": {"type": "array", "maxItems": 10**12},
    "properties_10000": {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(10000)}},
    "required_5000": {
        "type": "object",
        "properties": {f"k{i}": {"type": "boolean"} for i in range(5000)},
        "required": [f"k{i}" for i in range(5000)],
    },
    "enum_50000": {"enum": [f"value-{i}" for i in range(50000)]},
    "anyof_2000": {"anyOf": [{"type": "object", "properties": {f"v{i}": {"type": "integer"}}} for i in range(2000)]},
    "type_every": {"type": ["string", "null", "integer", "number", "boolean", "array", "object"]},
    "format_odd": {
        "type": "object",
        "properties": {"d": {"type": "string", "format": "date-time"}, "e": {"format": "x"}},
    },
    "multiple_of_tiny": {"type": "number", "multipleOf": 1e-300},
    "multiple_of_zero": {"type": "integer", "multipleOf": 0},
    "not_schema": {"not": {}},
    "if_then_else": {"if": {"type": "string"}, "then": {"minLength": 3}, "else": {"type": "integer"}},
    # found by this fuzzer: object keys inside an enum reached the regex unescaped ("{" is a repetition to
    # XGrammar, which then failed the whole engine step); property names with a quote or a newline
    "enum_object_brace": {"enum": [{"{J": None}]},
    "enum_object_quote": {"enum": [{'"': 1}, {"(+": 2}]},
    "property_quote": {"type": "object", "properties": {'a"b': {"type": "boolean"}}, "required": ['a"b']},
    "property_newline": {"type": "object", "properties": {"a\nb": {"type": "boolean"}}, "required": ["a\nb"]},
    "property_regex_chars": {"type": "object", "properties": {"{1,99999}": {"type": "integer"}, "(": {"const": "["}}},
    "bool_false": False,
    "not_an_object": [1, 2, 3],
    "type_unknown": {"type": "tuple"},
}
# number tokens placed as a bound (minimum / maximum / exclusive ones) of an integer and of a number
NUMBER_TOKENS = {
    "digits_4000": big_int(4000),
    "digits_neg_4000": big_int(4000, "-"),
    "digits_5000": big_int(5000),  # past CPython's int-from-text limit
    "digits_20000": big_int(20000),
    "e400": "1e400",
    "neg_e400": "-1e400",
    "e_neg400": "1e-400",
    "nan": "NaN",
    "infinity": "Infinity",
    "neg_infinity": "-Infinity",
    "float_max": "1.7976931348623157e308",
    "exp_huge": "1e99999999999",
    "decimal_long": "0." + "1" * 5000,
}


# the issue's reproductions: in every sample of the corpus
KEY_CASES = (
    "ref_tree_3x12",
    "_digits_4000",
    "_e400",
    "_nan",
    "_infinity",
    "pattern_alternation",
    "_100000",
    "enum_object",
    "property_",
    "gzip_garbage",
    "responses_reasoning_blob",
)


def adversarial(served: str) -> Iterator[Probe]:
    """The named hostile bodies, each sent once."""
    b = Bodies(served)
    for name, schema in HOSTILE_SCHEMAS.items():
        yield Probe(f"corpus/rf_{name}", "POST", CHAT, json.dumps(b.rf(schema)).encode())
        yield Probe(f"corpus/tool_required_{name}", "POST", CHAT, json.dumps(b.tool(schema)).encode())
        yield Probe(f"corpus/tool_named_{name}", "POST", CHAT, json.dumps(b.tool(schema, NAMED)).encode())
    for name, token in NUMBER_TOKENS.items():
        for kind in ("integer", "number"):
            for bound in ("minimum", "maximum", "exclusiveMaximum", "multipleOf"):
                inner = {"type": "object", "properties": {"n": {"type": kind, bound: "@N@"}}, "required": ["n"]}
                yield Probe(f"corpus/rf_{kind}_{bound}_{name}", "POST", CHAT, raw_json(b.rf(inner), N=token))
            inner = {"type": kind, "minimum": "@N@", "maximum": "@N@"}
            yield Probe(f"corpus/tool_{kind}_bounds_{name}", "POST", CHAT, raw_json(b.tool(inner), N=token))
        # the same tokens as plain request fields
        for fld in ("temperature", "max_tokens", "seed", "top_p", "top_k"):
            yield Probe(f"corpus/field_{fld}_{name}", "POST", CHAT, raw_json(b.chat(**{fld: "@N@"}), N=token))
    # deep nesting: the body itself, a free-form field, a schema, a tool call's arguments
    for depth in (1000, 100_000):
        yield Probe(f"corpus/nested_array_body_{depth}", "POST", CHAT, nested_text(depth, "[", "]").encode())
        yield Probe(f"corpus/nested_object_body_{depth}", "POST", CHAT, nested_text(depth, '{"a":', "}").encode())
        deep = nested_text(depth, '{"a":', "}")
        for fld in ("metadata", "logit_bias", "audio", "prediction"):
            body = raw_json(b.chat(**{fld: "@D@"}), D=deep)
            yield Probe(f"corpus/nested_{fld}_{depth}", "POST", CHAT, body)
        schema = nested_text(depth, '{"type":"object","properties":{"a":', "}}", '{"type":"integer"}')
        yield Probe(f"corpus/nested_rf_schema_{depth}", "POST", CHAT, raw_json(b.rf("@S@"), S=schema))
        yield Probe(f"corpus/nested_tool_schema_{depth}", "POST", CHAT, raw_json(b.tool("@S@"), S=schema))
        args = json.dumps(nested_text(depth, "[", "]"))
        turn = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "@A@"}}]}
        msgs = [{"role": "user", "content": "hi"}, turn, {"role": "tool", "tool_call_id": "c1", "content": "1"}]
        yield Probe(f"corpus/nested_tool_call_args_{depth}", "POST", CHAT, raw_json(b.chat(messages=msgs), A=args))
    # huge strings and counts
    for size in (1 << 20, 8 << 20, 33 << 20):  # the last one is over the default 32 MiB body limit
        text = "a" * size
        body = json.dumps(b.chat(messages=[{"role": "user", "content": text}])).encode()
        yield Probe(f"corpus/content_{size >> 20}MiB", "POST", CHAT, body)
    yield Probe("corpus/prompt_8MiB", "POST", COMPLETIONS, json.dumps({"prompt": "ab " * (3 << 20)}).encode())
    yield Probe("corpus/model_1MiB", "POST", CHAT, json.dumps(b.chat(model="m" * (1 << 20))).encode())
    yield Probe("corpus/user_4MiB", "POST", CHAT, json.dumps(b.chat(user="u" * (4 << 20))).encode())
    yield Probe(
        "corpus/messages_100000",
        "POST",
        CHAT,
        json.dumps(b.chat(messages=[{"role": "user", "content": "x"}] * 100_000)).encode(),
    )
    yield Probe("corpus/stop_16x1024", "POST", CHAT, json.dumps(b.chat(stop=["s" * 1024] * 16)).encode())
    yield Probe("corpus/stop_1000", "POST", CHAT, json.dumps(b.chat(stop=["s"] * 1000)).encode())
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}} for i in range(129)]
    yield Probe(
        "corpus/tools_128", "POST", CHAT, json.dumps(b.chat(tools=tools[:128], tool_choice="required")).encode()
    )
    yield Probe("corpus/tools_129", "POST", CHAT, json.dumps(b.chat(tools=tools)).encode())
    yield Probe(
        "corpus/tool_name_65",
        "POST",
        CHAT,
        json.dumps(b.chat(tools=[{"type": "function", "function": {"name": "n" * 65}}])).encode(),
    )
    yield Probe("corpus/tools_duplicate", "POST", CHAT, json.dumps(b.chat(tools=tools[:1] * 2)).encode())
    yield Probe(
        "corpus/schema_64KiB_plus",
        "POST",
        CHAT,
        json.dumps(b.rf({"type": "object", "description": "d" * (64 * 1024)})).encode(),
    )
    yield Probe(
        "corpus/n16_512_tokens", "POST", CHAT, json.dumps(b.chat(n=16, max_tokens=512, ignore_eos=True)).encode()
    )
    yield Probe(
        "corpus/max_tokens_max", "POST", CHAT, json.dumps(b.chat(max_tokens=2**31 - 1, ignore_eos=True)).encode()
    )
    yield Probe("corpus/min_tokens_max", "POST", CHAT, json.dumps(b.chat(min_tokens=2**31 - 1)).encode())
    yield Probe(
        "corpus/image_huge_dims",
        "POST",
        CHAT,
        json.dumps(
            b.chat(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
                        ],
                    }
                ]
            )
        ).encode(),
    )
    # invalid UTF-8, lone surrogates, NUL
    yield Probe("corpus/utf8_ff", "POST", CHAT, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}')
    yield Probe("corpus/utf8_truncated", "POST", CHAT, b'{"messages":[{"role":"user","content":"\xc3"}]}')
    yield Probe("corpus/utf8_overlong", "POST", CHAT, b'{"messages":[{"role":"user","content":"\xc0\xaf"}]}')
    yield Probe("corpus/utf8_in_key", "POST", CHAT, b'{"\xff":1,"messages":[{"role":"user","content":"x"}]}')
    yield Probe(
        "corpus/utf8_in_schema",
        "POST",
        CHAT,
        json.dumps(b.rf({"type": "string", "pattern": "@"})).encode().replace(b'"@"', b'"\xff\xfe"'),
    )
    for where in ("content", "model", "stop", "user"):
        template = (
            b.chat(messages=[{"role": "user", "content": "@S@"}]) if where == "content" else b.chat(**{where: "@S@"})
        )
        for i, esc in enumerate(("\\ud800", "\\udfff\\ud800", "\\u0000", "\\ud83d")):
            yield Probe(f"corpus/escape_{where}#{i}", "POST", CHAT, raw_json(template, S=f'"{esc}"'))
    surrogate_rf = raw_json(b.rf({"type": "object", "properties": {"@K@": {"type": "string"}}}))
    yield Probe("corpus/surrogate_property_name", "POST", CHAT, surrogate_rf.replace(b'"@K@"', b'"\\ud800"'))
    yield Probe(
        "corpus/surrogate_pattern", "POST", CHAT, raw_json(b.rf({"type": "string", "pattern": "@P@"}), P='"\\ud800+"')
    )
    yield Probe(
        "corpus/surrogate_tool_name",
        "POST",
        CHAT,
        raw_json(b.chat(tools=[{"type": "function", "function": {"name": "@N@"}}]), N='"\\ud800"'),
    )
    # not JSON objects, wrong content types, broken encodings, bombs
    for name, raw in {
        "empty": b"",
        "null": b"null",
        "array": b"[]",
        "string": b'"x"',
        "number": b"1e400",
        "nan": b"NaN",
        "truncated": b'{"messages":[{"role":"user","content":"x"',
        "trailing": b'{"messages":[{"role":"user","content":"x"}]} {}',
        "duplicate_keys": b'{"messages":[],"messages":[{"role":"user","content":"x"}]}',
        "bom": b'\xef\xbb\xbf{"messages":[{"role":"user","content":"x"}]}',
        "nul_bytes": b"\x00" * 1024,
        "whitespace_1MiB": b" " * (1 << 20) + b"{}",
    }.items():
        for path in (CHAT, COMPLETIONS, "/v3/embeddings", "/v3/rerank", "/v2/rerank"):
            yield Probe(f"corpus/raw_{name}", "POST", path, raw)
    ok = json.dumps(b.chat()).encode()
    yield Probe("corpus/ctype_text", "POST", CHAT, ok, {"Content-Type": "text/plain"})
    yield Probe("corpus/ctype_form", "POST", CHAT, b"a=1&b=2", {"Content-Type": "application/x-www-form-urlencoded"})
    yield Probe("corpus/ctype_multipart", "POST", CHAT, b"--x\r\n\r\n--x--", {"Content-Type": "multipart/form-data"})
    yield Probe("corpus/ctype_charset_latin1", "POST", CHAT, ok, {"Content-Type": "application/json; charset=latin-1"})
    yield Probe("corpus/gzip_garbage", "POST", CHAT, b"not gzip", {**JSON_CT, "Content-Encoding": "gzip"})
    blob = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "\u00ae@~"}  # was a 500
    body = {"model": served, "input": [blob, {"role": "user", "content": "x"}], "max_output_tokens": 4}
    yield Probe("corpus/responses_reasoning_blob", "POST", "/v3/responses", json.dumps(body).encode())
    yield Probe("corpus/gzip_ok", "POST", CHAT, gzip.compress(ok), {**JSON_CT, "Content-Encoding": "gzip"})
    bomb = gzip.compress(b"[" + b" " * (64 << 20) + b"]", compresslevel=9)  # 64 MiB inflated: over the limit
    yield Probe("corpus/gzip_bomb_64MiB", "POST", CHAT, bomb, {**JSON_CT, "Content-Encoding": "gzip"})
    yield Probe("corpus/encoding_unknown", "POST", CHAT, ok, {**JSON_CT, "Content-Encoding": "zstd-x"})
    # odd GETs
    for path in (
        "/v3/models/" + "a" * 8000,
        "/v3/models/%00",
        "/v3/models/%ff",
        "/v1/openapi.json?x=1",
        "/v3/models/..%2f..%2fetc%2fpasswd",
        "/v1/status?" + "x" * 4000,
    ):
        yield Probe("corpus/get_odd", "GET", path, None, {})
    # embeddings and rerank bodies at their bounds (a generation serving answers them 4xx by task)
    yield Probe("corpus/embeddings_2049", "POST", "/v3/embeddings", json.dumps({"input": ["x"] * 2049}).encode())
    yield Probe(
        "corpus/rerank_10000", "POST", "/v3/rerank", json.dumps({"query": "q", "documents": ["d"] * 10000}).encode()
    )


WRONG_VALUES: list[Any] = [
    None,
    True,
    False,
    -1,
    0,
    1,
    2**64,
    -(2**63) - 1,
    1.5,
    -1e308,
    5e-324,
    "",
    "x",
    [],
    [1],
    [None],
    {},
    {"a": 1},
]


def _branches(prop: dict) -> list[dict]:
    return [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]


def bound_values(prop: dict) -> Iterator[tuple[str, Any]]:
    """Each bound of one OpenAPI property (through its anyOf), at it and one past it."""
    for br in _branches(prop):
        t = br.get("type")
        if t in ("integer", "number"):
            step = 1 if t == "integer" else None
            for key, sign in (("minimum", -1), ("maximum", 1)):
                if key in br:
                    v = br[key]
                    past = v + sign * step if step else (v * 1.0000001 + sign * 1e-9 if v else sign * 1e-12)
                    yield f"{key}", v
                    yield f"past_{key}", past
        if t == "string":
            for key in ("minLength", "maxLength"):
                if key in br:
                    yield key, "s" * br[key]
                    yield f"past_{key}", "s" * max(0, br[key] + (1 if key == "maxLength" else -1))
        if t == "array":
            item = br.get("items", {})
            one: Any = "s" * item.get("minLength", 1) if item.get("type") == "string" else {}
            for key in ("minItems", "maxItems"):
                if key in br:
                    yield key, [one] * br[key]
                    yield f"past_{key}", [one] * max(0, br[key] + (1 if key == "maxItems" else -1))


def field_cases(doc: dict, served: str) -> Iterator[Probe]:
    """Every field of the chat and completions bodies: each wrong JSON type and each bound."""
    b = Bodies(served)
    bases = {
        ("ChatRequest", CHAT): b.chat(),
        ("CompletionRequest", COMPLETIONS): {"model": served, "prompt": "hi", "max_tokens": 8},
    }
    schemas = doc["components"]["schemas"]
    for (name, path), base in bases.items():
        for prop_name, prop in schemas[name]["properties"].items():
            for i, v in enumerate(WRONG_VALUES):
                yield Probe(
                    f"corpus/type_{name}.{prop_name}#{i}", "POST", path, json.dumps({**base, prop_name: v}).encode()
                )
            for label, v in bound_values(prop):
                yield Probe(
                    f"corpus/bound_{name}.{prop_name}.{label}",
                    "POST",
                    path,
                    json.dumps({**base, prop_name: v}).encode(),
                )
    # the message fields too, in the first message
    for prop_name in schemas["Message"]["properties"]:
        for i, v in enumerate(WRONG_VALUES):
            msg = {"role": "user", "content": "hi", prop_name: v}
            yield Probe(
                f"corpus/type_Message.{prop_name}#{i}", "POST", CHAT, json.dumps(b.chat(messages=[msg])).encode()
            )


# --- the generator subprocess: hypothesis over the OpenAPI document -------------------------------------


def self_contained(doc: dict, name: str, max_tokens: int) -> dict:
    """Component `name` as a JSON schema of its own ($refs into $defs); generation bounded to max_tokens."""
    defs = json.loads(json.dumps(doc["components"]["schemas"]).replace("#/components/schemas/", "#/$defs/"))
    for model in ("ChatRequest", "CompletionRequest"):
        for prop in ("max_tokens", "max_completion_tokens", "min_tokens"):
            for br in _branches(defs.get(model, {}).get("properties", {}).get(prop, {})):
                br["maximum"] = max_tokens  # a valid body generates; keep each one short
    return {**defs[name], "$defs": defs}


def generate(url: str, count: int, seed: int, max_tokens: int) -> None:
    """Print `count` generated probes as JSON lines (kind, method, path, body) on stdout."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from hypothesis_jsonschema import from_schema

    with urllib.request.urlopen(url + "/openapi.json", timeout=30) as r:
        doc = json.loads(r.read())
    with urllib.request.urlopen(url + "/v3/models", timeout=30) as r:
        served = json.loads(r.read())["data"][0]["id"]
    ops: list[tuple[str, str, Any]] = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method == "post":
                json_body = op["requestBody"]["content"].get("application/json")
                if json_body is None:  # multipart (the audio API): its hostile files are tests/runtime/test_audio.py's
                    continue
                name = json_body["schema"]["$ref"].rsplit("/", 1)[1]
                weight = 6 if path.endswith(("completions", "responses")) else 1  # generation carries the risk
                for _ in range(weight):
                    ops.append(("POST", path, from_schema(self_contained(doc, name, max_tokens))))
            elif method == "get":
                ops.append(("GET", path.replace("{model}", served), None))
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
        lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
        max_leaves=30,
    )
    bound = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.none())
    patterns = st.sampled_from(["x|y", "^a+$", "(ab)*", "[a-z]{2,5}", "\\d+", "(?:a|b)?c", ".*", "(a)\\1", "(?!a)"])
    leaf = st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])}),
        st.fixed_dictionaries({"type": st.just("integer")}, optional={"minimum": bound, "maximum": bound}),
        st.fixed_dictionaries({"type": st.just("number")}, optional={"exclusiveMinimum": bound, "maximum": bound}),
        st.fixed_dictionaries(
            {"type": st.just("string")},
            optional={
                "pattern": patterns,
                "minLength": st.integers(0, 10**7),
                "maxLength": st.integers(-1, 10**7),
                "format": st.sampled_from(["date", "email", "uri", "uuid", "nope"]),
            },
        ),
        st.fixed_dictionaries({"enum": st.lists(json_values, max_size=5)}),
        st.fixed_dictionaries({"const": json_values}),
    )
    schema_like = st.recursive(
        leaf,
        lambda kids: st.one_of(
            st.fixed_dictionaries(
                {"type": st.just("object"), "properties": st.dictionaries(st.text(max_size=8), kids, max_size=6)},
                optional={"required": st.lists(st.text(max_size=8), max_size=3), "additionalProperties": st.booleans()},
            ),
            st.fixed_dictionaries(
                {"type": st.just("array"), "items": kids},
                optional={"minItems": st.integers(0, 10**6), "maxItems": st.integers(-1, 10**6)},
            ),
            st.fixed_dictionaries({"anyOf": st.lists(kids, min_size=1, max_size=4)}),
            st.builds(
                lambda d, name: {"$defs": {name: d}, "$ref": f"#/$defs/{name}"},
                kids,
                st.sampled_from(["a", "b", "missing"]),
            ),
        ),
        max_leaves=25,
    )
    b = Bodies(served)

    def mutate(data: Any, body: Any) -> tuple[str, Any]:
        if not isinstance(body, dict) or not body:
            return "valid", body
        how = data.draw(st.sampled_from(["set", "drop", "extra"]))
        key = data.draw(st.sampled_from(sorted(body)))
        if how == "set":
            return "mutated", {**body, key: data.draw(json_values)}
        if how == "drop":
            return "mutated", {k: v for k, v in body.items() if k != key}
        return "mutated", {**body, data.draw(st.text(min_size=1, max_size=12)): data.draw(json_values)}

    out = sys.stdout

    @hseed(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data: Any) -> None:
        mode = data.draw(st.sampled_from(["valid"] * 4 + ["mutated"] * 3 + ["schema"] * 2 + ["json"]))
        if mode == "schema":
            schema = data.draw(schema_like)
            body: Any = data.draw(
                st.sampled_from([b.rf(schema), b.tool(schema), b.tool(schema, NAMED), b.tool(schema, "auto")])
            )
            method, path = "POST", CHAT
        else:
            method, path, strategy = data.draw(st.sampled_from(ops))
            if method == "GET":
                body, mode = None, "get"
            elif mode == "json":
                body = data.draw(json_values)
            else:
                body = data.draw(strategy)
                if mode == "mutated":
                    mode, body = mutate(data, body)
        text = None if body is None else json.dumps(body)
        out.write(json.dumps({"kind": f"generated/{mode}", "method": method, "path": path, "body": text}) + "\n")

    one()
    out.flush()


# --- the steady clients' subprocess -------------------------------------------------------------------------


async def steady_clients(url: str, served: str, clients: int, max_tokens: int, timeout: float) -> dict:
    """Streaming chat clients in a loop until stdin closes; their latencies and failures."""
    import aiohttp

    latencies: list[float] = []
    failures: list[str] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(sys.stdin.fileno(), 1024) else None)

    async def client(session: aiohttp.ClientSession, i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            body = {
                "model": served,
                "messages": [{"role": "user", "content": f"steady {i} {n}"}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
            t0 = time.monotonic()
            try:
                async with session.post(url + CHAT, json=body) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"status {resp.status}: {(await resp.read())[:200]!r}")
                    done = False
                    async for line in resp.content:
                        if line.startswith(b"data: [DONE]"):
                            done = True
                        elif line.startswith(b"data: ") and b'"error"' in line:
                            raise RuntimeError(f"error event {line[:200]!r}")
                    if not done:
                        raise RuntimeError("stream ended without [DONE]")
                latencies.append(time.monotonic() - t0)
            except (TimeoutError, aiohttp.ClientError, RuntimeError) as exc:
                failures.append(f"{time.monotonic() - t0:.1f}s {exc!r}"[:300])
                await asyncio.sleep(
                    0.5
                )  # a user retries after a while: a runtime that is down is not counted 1000s of times

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        await asyncio.gather(*(client(session, i) for i in range(clients)))
    return {"latencies": latencies, "failures": failures}


# --- the driver ---------------------------------------------------------------------------------------------


@dataclass
class Finding:
    kind: str
    method: str
    path: str
    status: int | str  # the HTTP status, "hang" or "connection"
    seconds: float
    body_len: int
    body_sha256: str
    body_head: str
    answer_head: str


@dataclass
class Steady:
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    p50: float = 0.0
    p99: float = 0.0

    @classmethod
    def of(cls, result: dict) -> Steady:
        lat = sorted(result["latencies"])
        pick = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: 0.0)
        return cls(len(lat) + len(result["failures"]), result["failures"], pick(0.5), pick(0.99))


@dataclass
class Figures:
    sent: int = 0
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    server_errors: int = 0  # 5xx
    hangs: int = 0
    connection_errors: int = 0
    not_json_4xx: int = 0
    invalid_structured: int = 0  # a response_format answer that finished ("stop") with content that is not JSON
    restarts: int = 0
    recycles: int = 0  # planned: the engine memory guard drained the runtime and it exited 0 (memguard.py)
    recycle_answers: int = 0  # 503 server_shutting_down, or no connection, while a recycle ran
    engine_changes: int = 0
    liveness_failures: int = 0
    baseline: Steady = field(default_factory=Steady)
    under_fuzz: Steady = field(default_factory=Steady)
    rss: list[tuple[int, float, int | None, int | None]] = field(default_factory=list)  # (sent, s, http, engine)
    slowest: list[tuple[float, str, str, int | str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.invalid_structured
            or self.server_errors
            or self.hangs
            or self.connection_errors
            or self.restarts
            or self.engine_changes
            or self.under_fuzz.failures
            or self.baseline.failures
        )


def structured_output_ok(body: bytes | None, answer: bytes) -> bool:
    """False when a json_object / json_schema request's answer finished ("stop") on content that is not JSON
    (the promise: the output is valid JSON whatever the model's weights; a cut at max_tokens is "length")."""
    if not body or b'"response_format"' not in body or len(body) > 1 << 20:
        return True
    try:
        fmt = json.loads(body).get("response_format") or {}
        if fmt.get("type") not in ("json_object", "json_schema"):
            return True
        choices = json.loads(answer)["choices"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return True  # a stream, or not a chat answer: nothing to check here
    for c in choices:
        if c.get("finish_reason") == "stop":
            try:
                json.loads(c["message"]["content"])
            except (ValueError, KeyError, TypeError):
                return False
    return True


def rss_kib(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def running(pid: int | None) -> bool:
    """The process exists and has not exited (an exited child stays a zombie until its parent reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def engine_child(pid: int | None) -> int | None:
    """The engine-core child (multiprocessing spawn_main) of the runtime process `pid`."""
    if pid is None:
        return None
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in (d / "cmdline").read_bytes():
                return int(d.name)
        except (OSError, IndexError, ValueError):
            continue
    return None


def slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


@dataclass
class Target:
    """The runtime under test: its URL, the PID of its HTTP process, and how to start it again (None: not
    ours to restart)."""

    url: str
    pid: int | None
    restart: Callable[[], int] | None = None
    recycled: Callable[[], bool] | None = None  # did the process that ended exit 0 after the memory guard?
    down: float | None = None  # when a recycle was seen, until the runtime is back (+ a grace)


@dataclass
class Config:
    requests: int = 10_000
    duration: float = 1800.0
    concurrency: int = 4
    steady: int = 4
    baseline: float = 30.0
    steady_max_tokens: int = 16
    max_tokens: int = 16  # generated valid bodies
    request_timeout: float = 30.0
    seed: int = 0
    corpus_fields: float = 1.0  # the share of the per-field corpus sent (the subset in tests sends less)
    corpus_max: int = 0  # 0: the whole corpus; else a seeded sample of this many (KEY_CASES always in)
    findings_dir: Path | None = None


def _sub(*args: str) -> list[str]:
    return [sys.executable, str(HERE), *args]


async def _run_steady(url: str, served: str, cfg: Config, until: asyncio.Event | float) -> dict:
    proc = await asyncio.create_subprocess_exec(
        *_sub("--steady-child", url, served, str(cfg.steady), str(cfg.steady_max_tokens), str(cfg.request_timeout)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if isinstance(until, float):
        await asyncio.sleep(until)
    else:
        await until.wait()
    assert proc.stdin is not None
    proc.stdin.close()
    out, _ = await proc.communicate()
    return json.loads(out)


class Driver:
    def __init__(self, target: Target, cfg: Config, served: str) -> None:
        self.t, self.cfg, self.served = target, cfg, served
        self.fig = Figures()
        self.engine = engine_child(target.pid)
        self.t0 = time.monotonic()

    def probes_corpus(self, doc: dict) -> list[Probe]:
        rng = random.Random(self.cfg.seed)
        fields_ = [p for p in field_cases(doc, self.served) if rng.random() < self.cfg.corpus_fields]
        corpus = list(adversarial(self.served)) + fields_
        if not self.cfg.corpus_max or len(corpus) <= self.cfg.corpus_max:
            return corpus
        key = [p for p in corpus if any(k in p.kind for k in KEY_CASES)]
        rest = [p for p in corpus if not any(k in p.kind for k in KEY_CASES)]
        return key + rng.sample(rest, max(0, self.cfg.corpus_max - len(key)))

    async def send(self, session: Any, p: Probe) -> None:
        import aiohttp

        t0 = time.monotonic()
        status: int | str
        answer = b""
        try:
            async with session.request(p.method, self.t.url + p.path, data=p.body, headers=p.headers) as resp:
                status = resp.status
                while len(answer) < READ_LIMIT:
                    chunk = await resp.content.read(65536)
                    if not chunk:
                        break
                    answer += chunk
        except TimeoutError:
            status = "hang"
        except (aiohttp.ClientError, OSError) as exc:
            status, answer = "connection", repr(exc).encode()
        dt = time.monotonic() - t0
        f = self.fig
        f.sent += 1
        f.statuses[status] += 1
        f.kinds[p.kind.split("/")[0] + ("/" + p.kind.split("/")[1].split("_")[0] if "/" in p.kind else "")] += 1
        f.slowest = sorted([*f.slowest, (dt, p.kind, p.path, status)], reverse=True)[:8]
        if self.t.down is not None and (
            status == "connection" or (status == 503 and b"server_shutting_down" in answer)
        ):
            f.recycle_answers += 1  # a planned recycle's drain and restart, not a fault
            return
        bad = isinstance(status, str) or status >= 500
        if isinstance(status, int) and 400 <= status < 500:
            try:
                err = json.loads(answer)["error"]
                assert isinstance(err["message"], str)
            except (ValueError, KeyError, TypeError, AssertionError):
                f.not_json_4xx += 1
                bad = True
        if status == 200 and not structured_output_ok(p.body, answer):
            f.invalid_structured += 1
            bad = True
        if status == "hang":
            f.hangs += 1
        elif status == "connection":
            f.connection_errors += 1
        elif isinstance(status, int) and status >= 500:
            f.server_errors += 1
        if bad:
            body = p.body or b""
            finding = Finding(
                p.kind,
                p.method,
                p.path,
                status,
                round(dt, 2),
                len(body),
                hashlib.sha256(body).hexdigest()[:16],
                body[:300].decode("latin-1"),
                answer[:300].decode("utf-8", "replace"),
            )
            f.findings.append(finding)
            if self.cfg.findings_dir is not None:
                self.cfg.findings_dir.mkdir(parents=True, exist_ok=True)
                stem = self.cfg.findings_dir / f"{len(f.findings):04d}"
                stem.with_suffix(".body").write_bytes(body)
                stem.with_suffix(".json").write_text(json.dumps(finding.__dict__, indent=1))

    async def monitor(self, stop: asyncio.Event) -> None:
        import aiohttp

        last_rss = 0.0
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            while not stop.is_set():
                await asyncio.sleep(1)
                alive = running(self.t.pid)
                if self.t.down is not None and time.monotonic() > self.t.down:
                    self.t.down = None
                if self.t.pid is not None and not alive:
                    if self.t.recycled is not None and self.t.recycled():
                        self.fig.recycles += 1
                        self.t.down = float("inf")
                    else:
                        self.fig.restarts += 1
                    if self.t.restart is None:
                        stop.set()  # not ours to start again: the run ends here
                        return
                    try:
                        self.t.pid = await asyncio.to_thread(self.t.restart)
                    except Exception as exc:  # it does not come back: the run ends with what it has
                        print(f"runtime restart failed: {exc}", file=sys.stderr)
                        stop.set()
                        return
                    self.engine = engine_child(self.t.pid)
                    if self.t.down is not None:
                        self.t.down = time.monotonic() + 5  # answers already in flight
                child = engine_child(self.t.pid)
                if self.engine is not None and child != self.engine:
                    self.fig.engine_changes += 1
                    self.engine = child
                try:
                    async with s.get(self.t.url + "/v2/health/live") as r:
                        live = r.status == 200
                except (TimeoutError, aiohttp.ClientError):
                    live = False
                self.fig.liveness_failures += not live
                now = time.monotonic() - self.t0
                if now - last_rss >= 2:
                    last_rss = now
                    self.fig.rss.append((self.fig.sent, round(now, 1), rss_kib(self.t.pid), rss_kib(self.engine)))

    async def fuzz(self, doc: dict) -> None:
        import aiohttp

        cfg = self.cfg
        corpus = self.probes_corpus(doc)
        generated_n = max(0, cfg.requests - len(corpus))
        gen = await asyncio.create_subprocess_exec(
            *_sub("--generate-child", self.t.url, str(generated_n), str(cfg.seed), str(cfg.max_tokens)),
            stdout=subprocess.PIPE,
            limit=64 << 20,
        )
        assert gen.stdout is not None
        rng = random.Random(cfg.seed)
        # corpus entries spread over the run: each slot is a corpus probe with this chance
        share = len(corpus) / max(1, len(corpus) + generated_n)
        rng.shuffle(corpus)
        deadline = self.t0 + cfg.duration
        lock = asyncio.Lock()
        issued = 0

        async def next_probe() -> Probe | None:
            nonlocal issued
            async with lock:
                if issued >= cfg.requests or time.monotonic() > deadline:
                    return None
                issued += 1
                if corpus and (rng.random() < share or gen.stdout.at_eof()):
                    return corpus.pop()
                line = await gen.stdout.readline()
                if not line:
                    return corpus.pop() if corpus else None
                d = json.loads(line)
                body = None if d["body"] is None else d["body"].encode()
                return Probe(d["kind"], d["method"], d["path"], body, dict(JSON_CT) if body is not None else {})

        async def worker(session: aiohttp.ClientSession) -> None:
            while (p := await next_probe()) is not None:
                await self.send(session, p)

        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            await asyncio.gather(*(worker(session) for _ in range(cfg.concurrency)))
        if gen.returncode is None:
            gen.kill()
        await gen.wait()

    async def run(self) -> Figures:
        doc = json.loads(await asyncio.to_thread(_get, self.t.url + "/openapi.json"))
        f = self.fig
        f.baseline = Steady.of(await _run_steady(self.t.url, self.served, self.cfg, float(self.cfg.baseline)))
        stop, fuzz_done = asyncio.Event(), asyncio.Event()
        mon = asyncio.ensure_future(self.monitor(stop))
        steady = asyncio.ensure_future(_run_steady(self.t.url, self.served, self.cfg, fuzz_done))
        t0 = time.monotonic()
        fuzz = asyncio.ensure_future(self.fuzz(doc))
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait([fuzz, stopper], return_when=asyncio.FIRST_COMPLETED)
        if not fuzz.done():
            fuzz.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fuzz
        f.seconds = time.monotonic() - t0
        fuzz_done.set()
        f.under_fuzz = Steady.of(await steady)
        stop.set()
        stopper.cancel()
        await mon
        return f


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def fuzz(target: Target, cfg: Config) -> Figures:
    """One bounded fuzz run against `target`; its figures."""
    served = json.loads(_get(target.url + "/v3/models"))["data"][0]["id"]
    return asyncio.run(Driver(target, cfg, served).run())


def report(f: Figures, cfg: Config) -> str:
    lines = [
        f"fuzz requests: {f.sent} in {f.seconds:.0f}s ({f.sent / max(f.seconds, 1e-9):.0f}/s), "
        f"concurrency {cfg.concurrency}",
        "  by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(f.kinds.items())),
        "  statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(f.statuses.items(), key=lambda kv: str(kv[0]))),
        f"5xx: {f.server_errors}  hangs (> {cfg.request_timeout:g}s): {f.hangs}  connection errors: "
        f"{f.connection_errors}  4xx not OpenAI error JSON: {f.not_json_4xx}  structured output finished as "
        f"invalid JSON: {f.invalid_structured}",
        f"runtime restarts: {f.restarts}  engine child changes: {f.engine_changes}  liveness failures (1/s polls): "
        f"{f.liveness_failures}",
        f"planned recycles (engine memory guard: drained, exit 0): {f.recycles}, answered 503 shutting down or not "
        f"connected meanwhile: {f.recycle_answers}",
    ]
    for label, s in (("without the fuzzer", f.baseline), ("under the fuzzer", f.under_fuzz)):
        lines.append(
            f"steady clients ({cfg.steady} streams, max_tokens {cfg.steady_max_tokens}) {label}: {s.requests} "
            f"requests, {len(s.failures)} failures, p50 {s.p50 * 1000:.0f} ms, p99 {s.p99 * 1000:.0f} ms"
        )
    for label, idx in (("HTTP process", 2), ("engine child", 3)):
        pts = [(float(r[0]), float(r[idx])) for r in f.rss if r[idx] is not None]
        half = pts[len(pts) // 2 :]  # after the allocator's arenas have grown to the largest bodies
        if pts:
            lines.append(
                f"RSS {label}: {pts[0][1] / 1024:.0f} -> {pts[-1][1] / 1024:.0f} MiB "
                f"(max {max(y for _, y in pts) / 1024:.0f}), slope {slope(pts) * 1000 / 1024:.2f} MiB per 1,000 "
                f"requests over the run, {slope(half) * 1000 / 1024:.2f} over its second half"
            )
    lines.append("slowest: " + "; ".join(f"{dt:.1f}s {kind} {path} -> {st}" for dt, kind, path, st in f.slowest))
    for fd in f.findings[:50]:
        lines.append(
            f"FINDING {fd.status} after {fd.seconds}s {fd.kind} {fd.method} {fd.path} body[{fd.body_len}] "
            f"sha256:{fd.body_sha256} {fd.body_head[:160]!r} -> {fd.answer_head[:200]!r}"
        )
    for s in (*f.baseline.failures[:5], *f.under_fuzz.failures[:10]):
        lines.append(f"STEADY FAILURE {s}")
    return "\n".join(lines)


def start_runtime(model: Path, port: int, extra: list[str], log: Path, src: Path | None = None) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "ovserve_runtime",
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--termination-log",
        f"{log}.termination",
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVSERVE_")}
    if src is not None:  # a snapshot of the runtime's source (git archive), so that edits in the tree do not land
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(cmd, stdout=open(log, "a"), stderr=subprocess.STDOUT, env=env)


def wait_ready(url: str, proc: subprocess.Popen | None, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"runtime exited {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit("runtime not ready")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--generate-child":
        url, count, seed, max_tokens = sys.argv[2:6]
        if int(count) > 0:
            with contextlib.suppress(BrokenPipeError):
                generate(url, int(count), int(seed), int(max_tokens))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--steady-child":
        url, served, clients, max_tokens, timeout = sys.argv[2:7]
        result = asyncio.run(steady_clients(url, served, int(clients), int(max_tokens), float(timeout)))
        print(json.dumps(result))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-qwen25", help="model directory or name under $OVSERVE_MODELS")
    ap.add_argument("--url", help="an already running runtime on loopback instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: its HTTP process (RSS, restarts)")
    ap.add_argument("--requests", type=int, default=10_000, help="fuzz requests (corpus + generated; default 10000)")
    ap.add_argument("--duration", type=float, default=1800, help="bound on the fuzz phase in seconds")
    ap.add_argument("--concurrency", type=int, default=4, help="fuzz requests in flight")
    ap.add_argument("--steady", type=int, default=4, help="steady streaming clients")
    ap.add_argument("--baseline", type=float, default=30, help="seconds of steady clients alone first")
    ap.add_argument("--steady-max-tokens", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16, help="max_tokens bound of generated valid bodies")
    ap.add_argument("--request-timeout", type=float, default=30, help="a fuzz request unanswered this long: a hang")
    ap.add_argument("--corpus-fields", type=float, default=1.0, help="share of the per-field corpus sent")
    ap.add_argument("--corpus-max", type=int, default=0, help="a sample of this many corpus bodies (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--findings", type=Path, help="directory for the bodies of 5xx, hangs and connection errors")
    ap.add_argument("--runtime-arg", action="append", default=[], help="extra ovserve-runtime argument (repeat)")
    ap.add_argument(
        "--runtime-src",
        type=Path,
        help="a directory holding the ovserve_runtime package to run (e.g. `git archive HEAD runtime`), first on "
        "PYTHONPATH",
    )
    args = ap.parse_args()
    cfg = Config(
        requests=args.requests,
        duration=args.duration,
        concurrency=args.concurrency,
        steady=args.steady,
        baseline=args.baseline,
        steady_max_tokens=args.steady_max_tokens,
        max_tokens=args.max_tokens,
        request_timeout=args.request_timeout,
        seed=args.seed,
        corpus_fields=args.corpus_fields,
        corpus_max=args.corpus_max,
        findings_dir=args.findings,
    )
    procs: list[subprocess.Popen] = []
    if args.url:
        host = args.url.removeprefix("http://").rsplit(":", 1)[0]
        if host not in ("127.0.0.1", "localhost", "[::1]"):
            raise SystemExit("--url: loopback only (http://127.0.0.1:PORT)")
        target = Target(args.url.rstrip("/"), args.pid)
    else:
        model = Path(args.model) if "/" in args.model else MODELS / args.model
        from socket import socket

        with socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = Path(f"/tmp/fuzz-runtime-{port}.log")
        url = f"http://127.0.0.1:{port}"

        def restart() -> int:
            procs.append(start_runtime(model, port, args.runtime_arg, log, args.runtime_src))
            try:
                wait_ready(url, procs[-1])
            except SystemExit as exc:
                raise RuntimeError(str(exc)) from None
            return procs[-1].pid

        target = Target(url, restart(), restart, recycled=lambda: procs[-1].poll() == 0)
        print(f"runtime: {model} on {url} (log {log})")
    try:
        fig = fuzz(target, cfg)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
    print(report(fig, cfg))
    return 0 if fig.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
