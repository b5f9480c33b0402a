"""Tracing on a real runtime (tiny-llm): spans go to an OTLP/HTTP receiver in this test (the protobuf the SDK's
exporter posts, decoded with opentelemetry-proto), the client's W3C traceparent is continued, the request's span
has its prepare / queue / generate children and the attributes of docs/observability.md, a refusal carries its
error code, and no span carries prompt or completion text. Jaeger receiving them is tests/operator's e2e."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import free_port

pytestmark = pytest.mark.runtime

PROMPT = "the secret word is pineapple"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP traces endpoint: every span it was sent, as (span, resource attributes)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans: list = []
        self.raw: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.raw.append(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        owner.spans.extend(ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, pred, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := pred(self.spans):
                return got
            time.sleep(0.1)
        return pred(self.spans)


def attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = list(x.string_value for x in v.array_value.values) if kind == "array_value" else getattr(v, kind)
    return out


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def traced(tiny_models, server_factory):
    receiver = Receiver()
    mp = pytest.MonkeyPatch()
    mp.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # the batch processor's export interval (ms): quick in a test
    try:
        srv = server_factory(
            tiny_models / "tiny-llm",
            "--otlp-traces-endpoint",
            f"http://127.0.0.1:{receiver.port}",
            "--max-num-seqs",
            "4",
        )
    finally:
        mp.undo()
    yield srv, receiver
    receiver.server.shutdown()


def test_a_request_continues_the_callers_trace_with_its_steps(traced):
    srv, receiver = traced
    body = {"model": "tiny-llm", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 6, "ignore_eos": True}
    code, answer = post(srv.url + "/v3/chat/completions", body, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    assert code == 200, answer

    def mine(spans):
        got = [s for s in spans if s.trace_id.hex() == TRACE_ID]
        return got if len(got) >= 4 else None

    spans = receiver.wait(mine)
    assert spans, [s.name for s in receiver.spans]
    root = next(s for s in spans if s.parent_span_id.hex() == PARENT_ID)
    assert root.name == "chat tiny-llm" and root.kind == 2  # SERVER
    children = {s.name: s for s in spans if s.parent_span_id == root.span_id}
    assert set(children) == {"prepare", "queue", "generate"}, [s.name for s in spans]
    # the steps follow each other inside the request
    p, q, g = children["prepare"], children["queue"], children["generate"]
    assert root.start_time_unix_nano <= p.start_time_unix_nano <= p.end_time_unix_nano <= q.start_time_unix_nano
    assert q.end_time_unix_nano <= g.start_time_unix_nano <= g.end_time_unix_nano <= root.end_time_unix_nano
    assert [e.name for e in g.events] == ["first_token"]
    a = attrs(root)
    usage = answer["usage"]
    assert a["gen_ai.request.model"] == "tiny-llm" and a["gen_ai.operation.name"] == "chat", a
    assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"], a
    assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"] == 6, a
    assert a["gen_ai.response.finish_reasons"] == ["length"], a
    assert a["ovserve.pipeline.resolved"] == "LM_CB" and a["ovserve.pipeline.fallback"] is False, a
    assert a["ovserve.task"] == "text-generation" and a["http.response.status_code"] == 200, a
    assert 0 < a["ovserve.time_to_first_token_seconds"] < 30, a
    assert "gen_ai.usage.cache_read.input_tokens" not in a  # unknown: absent, never 0
    # never the prompt or the answer
    text = answer["choices"][0]["message"]["content"]
    for raw in receiver.raw:
        assert b"pineapple" not in raw and (not text or text.encode() not in raw)


def test_a_refusal_carries_its_error_code(traced):
    srv, receiver = traced
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4737"
    body = {"model": "tiny-llm", "messages": [{"role": "user", "content": "x"}], "temperature": 9}
    code, answer = post(srv.url + "/v3/chat/completions", body, {"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
    assert code == 400, answer
    spans = receiver.wait(lambda spans: [s for s in spans if s.trace_id.hex() == trace_id])
    assert len(spans) == 1, [s.name for s in spans]  # refused in validation: no step ran
    a = attrs(spans[0])
    assert a["error.type"] == answer["error"]["code"] and a["http.response.status_code"] == 400, a
    assert spans[0].status.code == 2  # ERROR


def test_an_unsampled_parent_is_followed(traced):
    srv, receiver = traced
    trace_id = "6bf92f3577b34da6a3ce929d0e0e4738"
    body = {"model": "tiny-llm", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    code, _ = post(srv.url + "/v3/chat/completions", body, {"traceparent": f"00-{trace_id}-{PARENT_ID}-00"})
    assert code == 200
    marker = "7bf92f3577b34da6a3ce929d0e0e4739"  # a sampled request after it: once it is exported, so is the other
    post(srv.url + "/v3/chat/completions", body, {"traceparent": f"00-{marker}-{PARENT_ID}-01"})
    assert receiver.wait(lambda spans: [s for s in spans if s.trace_id.hex() == marker])
    assert not [s for s in receiver.spans if s.trace_id.hex() == trace_id]


def test_speculative_acceptance_per_request_matches_the_engines_counters(tiny_models, server_factory):
    """Prompt lookup on tiny-llm: the span's accepted tokens are the request's share of the engine's
    ovserve_speculative_accepted_tokens_total (one request at a time), and its decode steps of ..._steps_total."""
    receiver = Receiver()
    mp = pytest.MonkeyPatch()
    mp.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    try:
        srv = server_factory(
            tiny_models / "tiny-llm", "--prompt-lookup", "--otlp-traces-endpoint", f"http://127.0.0.1:{receiver.port}"
        )
    finally:
        mp.undo()
    try:

        def counters() -> tuple[float, float]:
            name = "ovserve_speculative_{}_total"
            return srv.metric(name.format("accepted_tokens")), srv.metric(name.format("steps"))

        before = counters()
        words = " ".join(["alpha beta gamma delta"] * 8)  # n-grams to look up
        body = {"model": "tiny-llm", "prompt": words, "max_tokens": 24, "ignore_eos": True, "temperature": 0}
        trace_id = "8bf92f3577b34da6a3ce929d0e0e4730"
        code, answer = post(srv.url + "/v3/completions", body, {"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
        assert code == 200, answer
        spans = receiver.wait(
            lambda spans: [s for s in spans if s.trace_id.hex() == trace_id and s.parent_span_id.hex() == PARENT_ID]
        )
        a = attrs(spans[0])
        after = counters()
        assert a["ovserve.speculative.mode"] == "promptLookup", a
        assert a["ovserve.speculative.accepted_tokens"] == after[0] - before[0], (a, before, after)
        assert a["ovserve.speculative.decode_steps"] == after[1] - before[1], (a, before, after)
        assert (
            a["gen_ai.usage.output_tokens"]
            == 24
            == 1 + a["ovserve.speculative.decode_steps"] + a["ovserve.speculative.accepted_tokens"]
        ), a
    finally:
        receiver.server.shutdown()
