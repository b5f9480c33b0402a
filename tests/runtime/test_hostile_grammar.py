"""A hostile response_format gets its own 400, at once, while other streams go on (issue 38), on a real
ovserve-runtime (continuous batching, tiny model): the schema tree that expanded to 25 MB of regex and froze the
event loop for minutes, non-finite and 4,000-digit bounds, patterns outside XGrammar's dialect; a pattern's
alternation stays inside the JSON string; refusals are cached by content and counted."""

from __future__ import annotations

import json
import threading
import time

import pytest

from .conftest import http_get
from .test_http import client, post

pytestmark = pytest.mark.runtime


def optional_tree(levels: int, width: int) -> dict:
    defs: dict = {"L0": {"type": "string"}}
    for i in range(1, levels + 1):
        defs[f"L{i}"] = {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/L{i - 1}"} for j in range(width)}}
    return {"$defs": defs, "$ref": f"#/$defs/L{levels}"}


def body(schema_text: str) -> str:
    """A chat request whose json_schema is given as raw JSON text (1e400, NaN and 4,000 digits are JSON tokens
    the client library would never write)."""
    return (
        '{"messages":[{"role":"user","content":"x"}],"max_tokens":8,'
        '"response_format":{"type":"json_schema","json_schema":{"name":"h","schema":' + schema_text + "}}}"
    )


def test_the_25_mb_schema_is_refused_while_a_stream_goes_on(cb_server):
    model = cb_server.status()["model"]
    streamed: dict = {}

    def stream() -> None:
        chunks = client(cb_server).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "tell a story"}], max_tokens=160, stream=True
        )
        streamed["finish"] = [c.choices[0].finish_reason for c in chunks if c.choices][-1]

    t = threading.Thread(target=stream)
    t.start()
    schema = json.dumps(optional_tree(3, 12))
    assert len(schema) < 1400  # the 1.3 KB
    lives = []
    for _ in range(3):  # the same schema again: the refusal comes from the cache
        status, err = post(cb_server, "/v3/chat/completions", body(schema))
        assert (status, err["error"]["param"]) == (400, "response_format"), err
        assert "bytes, more than the limit" in err["error"]["message"]
        lives.append(http_get(cb_server.url + "/v2/health/live")[0])
    t.join(60)  # before the fix: the loop compiled the regex for minutes and this stream timed out
    assert not t.is_alive() and streamed["finish"] in ("stop", "length"), streamed
    assert lives == [200, 200, 200]
    assert cb_server.metric("ovserve_grammar_builds_total", 'outcome="hit"') >= 2


@pytest.mark.parametrize(
    ("schema_text", "says"),
    [
        ('{"type":"integer","minimum":0,"maximum":1e400}', "not finite"),
        ('{"type":"integer","minimum":NaN,"maximum":3}', "not finite"),
        ('{"type":"integer","minimum":-Infinity}', "not finite"),
        ('{"type":"integer","minimum":0,"maximum":' + "9" * 4000 + "}", "digits"),
        ('{"type":"string","pattern":"(?=a)a"}', "lookahead"),
        ('{"type":"string","pattern":"(a)\\\\1"}', "backreference"),
        ('{"type":"string","maxLength":1000000000}', "maxLength"),
    ],
)
def test_hostile_bounds_are_400_naming_response_format(cb_server, schema_text, says):
    status, err = post(cb_server, "/v3/chat/completions", body(schema_text))
    assert (status, err["error"]["param"], err["error"]["code"]) == (400, "response_format", "invalid_value"), err
    assert says in err["error"]["message"], err


def test_a_pattern_alternation_stays_inside_the_string(cb_server):
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "x|y"}}, "required": ["a"]}
    for i in range(4):
        status, r = post(
            cb_server,
            "/v3/chat/completions",
            {
                "messages": [{"role": "user", "content": f"pick {i}"}],
                "max_tokens": 16,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
            },
        )
        assert status == 200, r
        assert json.loads(r["choices"][0]["message"]["content"]) in ({"a": "x"}, {"a": "y"})  # before: {"a":"x}


def _schema_request(k: int) -> dict:
    schema = {
        "type": "object",
        "properties": {f"k{k}_{j}": {"type": "string", "maxLength": 32} for j in range(6)},
        "required": [f"k{k}_{j}" for j in range(6)],
    }
    return {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }


def test_distinct_schemas_grow_the_engine_until_it_recycles_losing_nothing(tiny_models, server_factory):
    """openvino-genai keeps every compiled grammar for the pipeline's life: distinct schemas grow the engine
    process without bound (the 10,000-request fuzz run: 183 -> 1,407 MiB; ~0.7 MB a schema on tiny-llm, ~25 MB
    on a 151,936-token vocabulary). Past --engine-memory-growth-bytes the runtime drains and exits 0 (the
    kubelet restarts it with a fresh engine); the requests answered before are 200s, during the drain 503s,
    none lost to an OOM kill (memguard.py). The same schema again and again grows nothing: no recycle."""
    s = server_factory(tiny_models / "tiny-llm", "--engine-memory-growth-bytes", str(16 << 20))
    for _ in range(40):
        assert post(s, "/v3/chat/completions", _schema_request(0))[0] == 200
    time.sleep(6)  # past a guard period
    assert s.proc.poll() is None, s.log.read_text()[-2000:]
    statuses: list[int] = []
    deadline = time.monotonic() + 120
    k = 1
    while s.proc.poll() is None and time.monotonic() < deadline:
        try:
            statuses.append(post(s, "/v3/chat/completions", _schema_request(k))[0])
        except OSError:  # the process is gone: its port closed
            break
        k += 1
    assert s.proc.wait(timeout=60) == 0
    log = s.log.read_text()
    assert "recycling: drain, exit 0" in log and "--engine-memory-growth-bytes" in log, log[-2000:]
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 10, statuses
