"""Tracing end to end on the real cluster: Jaeger 1.75.0 (all-in-one, built from the Go module proxy by
hack/build-jaeger.sh) runs as a local process in the cluster's network namespace, on the node address the pods
reach; an LLMServing with spec.observability.tracing pointing at its OTLP/HTTP receiver; a chat completion with a
W3C traceparent through the serving's Service; the trace is found in Jaeger's query API with the runtime's spans
(the request, prepare, queue, generate) and attributes, and without the prompt's text. The same serving has
spec.routing: a chat through the routing gateway (Envoy and GIE's endpoint picker as local processes,
tests/routing/gateway.py) keeps its caller's trace, found in Jaeger as a child of the caller's span. The operator
(traced through OVSERVE_OTLP_TRACES_ENDPOINT) has its sync passes of the serving there too (reconcile, observe,
decide, act)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ENV, HACK, run_on_host_network
from tests.operator.test_operator_e2e import llms, pvc_model, runtime, status  # noqa: F401  (runtime: the models PVC)
from tests.routing.gateway import Gateway, install_pool_crd

pytestmark = [pytest.mark.cluster]

NODE_IP = "10.245.0.1"  # hack/cluster.sh: the node address, reachable from the pods
NAME = "traced"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
GATEWAY_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "b7ad6b7169203331"
PROMPT = "the password is marmalade"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((NODE_IP, 0))
        return s.getsockname()[1]


@pytest.fixture
def jaeger(cluster, tmp_path):
    """Jaeger all-in-one (in-memory storage) on the node address: (OTLP/HTTP endpoint, query API URL)."""
    proc = run_on_host_network(["bash", str(HACK / "build-jaeger.sh")], timeout=3000)  # the Go module proxy
    if proc.returncode != 0:
        pytest.fail(f"hack/build-jaeger.sh failed:\n{proc.stderr[-4000:]}", pytrace=False)
    binary = Path(ENV["JAEGER_BIN_DIR"]) / "jaeger-all-in-one"
    otlp, query = free_port(), free_port()
    args = [
        str(binary),
        f"--collector.otlp.http.host-port={NODE_IP}:{otlp}",
        f"--collector.otlp.grpc.host-port={NODE_IP}:{free_port()}",
        f"--query.http-server.host-port={NODE_IP}:{query}",
        f"--query.grpc-server.host-port={NODE_IP}:{free_port()}",
        f"--admin.http.host-port={NODE_IP}:{free_port()}",
        f"--collector.http-server.host-port={NODE_IP}:{free_port()}",
        f"--collector.grpc-server.host-port={NODE_IP}:{free_port()}",
    ]
    log = tmp_path / "jaeger.log"
    with open(log, "w") as out:
        p = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SPAN_STORAGE_TYPE": "memory"}
        )
    url = f"http://{NODE_IP}:{query}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if p.poll() is not None:
            pytest.fail(f"jaeger exited {p.returncode}:\n{log.read_text()[-4000:]}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{url}/api/services", timeout=2):
                break
        except OSError:
            time.sleep(0.3)
    else:
        pytest.fail(f"jaeger's query API did not answer:\n{log.read_text()[-4000:]}", pytrace=False)
    yield f"http://{NODE_IP}:{otlp}", url
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def trace(query_url: str, trace_id: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{query_url}/api/traces/{trace_id}", timeout=5) as r:
            data = json.loads(r.read())["data"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    return data[0] if data else None


@pytest.fixture
def traced_operator(start_operator, jaeger):
    """One operator sending its sync passes' spans to Jaeger, ready to act."""
    p = start_operator("op-traced", OVSERVE_OTLP_TRACES_ENDPOINT=jaeger[0], OVSERVE_ROUTING="true")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        h = p.health()
        if h and h.get("role") == "leader" and h.get("kopf"):
            return p
        if not p.alive():
            pytest.fail(f"operator exited {p.proc.returncode}:\n{p.logs()}", pytrace=False)
        time.sleep(0.3)
    pytest.fail(f"operator did not become leader:\n{p.logs()}", pytrace=False)


@pytest.fixture
def routing_parts(cluster) -> None:
    """The routing gateway's parts (hack/build-routing.sh, cached; `make test` builds them first) and the
    InferencePool CRD, before the serving asks for its pool."""
    proc = run_on_host_network(["bash", str(HACK / "build-routing.sh")], timeout=1800)  # the Go module proxy
    if proc.returncode != 0:
        pytest.fail(f"hack/build-routing.sh failed:\n{proc.stderr[-4000:]}", pytrace=False)
    install_pool_crd(cluster)


def chat(url: str, traceparent: str | None = None) -> tuple[int, dict]:
    body = {"model": NAME, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 5, "ignore_eos": True}
    headers = {"Content-Type": "application/json"}
    if traceparent is not None:
        headers["traceparent"] = traceparent
    req = urllib.request.Request(f"{url}/v3/chat/completions", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {}


@pytest.mark.usefixtures("routing_parts")
def test_a_chat_with_a_traceparent_is_found_in_jaeger(cluster, namespace, runtime, jaeger, traced_operator, tmp_path):  # noqa: F811
    otlp, query_url = jaeger
    spec = {
        "model": pvc_model("tiny-llm"),
        "resources": {"requests": {"cpu": "100m"}},
        "observability": {"tracing": {"endpoint": otlp}},
        "routing": {},
    }
    cluster.apply(llms(NAME, spec), namespace)
    st = cluster.wait_for(
        lambda: (s := status(cluster, namespace, NAME)).get("phase") == "Ready" and s, 120, "the serving Ready"
    )
    pod = next(p for p in cluster.get("pods", namespace=namespace)["items"] if p["metadata"]["name"].startswith(NAME))
    command = pod["spec"]["containers"][0].get("args") or pod["spec"]["containers"][0].get("command")
    assert "--otlp-traces-endpoint" in command, command
    svc = cluster.get("service", NAME, namespace)
    code, answer = chat(f"http://{svc['spec']['clusterIP']}:8000", f"00-{TRACE_ID}-{PARENT_ID}-01")
    assert code == 200, answer

    def found():  # the batch processor exports within its 5 s delay
        t = trace(query_url, TRACE_ID)
        return t if t and len(t["spans"]) >= 4 else None

    t = cluster.wait_for(found, 30, f"the trace {TRACE_ID} in Jaeger ({query_url})")
    spans = {s["operationName"]: s for s in t["spans"]}
    assert set(spans) == {f"chat {NAME}", "prepare", "queue", "generate"}, list(spans)
    root = spans[f"chat {NAME}"]
    assert root["references"] == [{"refType": "CHILD_OF", "traceID": TRACE_ID, "spanID": PARENT_ID}], root
    for child in ("prepare", "queue", "generate"):
        assert spans[child]["references"][0]["spanID"] == root["spanID"], spans[child]
    tags = {tag["key"]: tag["value"] for tag in root["tags"]}
    assert tags["gen_ai.request.model"] == NAME, tags
    assert tags["gen_ai.usage.output_tokens"] == answer["usage"]["completion_tokens"] == 5, tags
    assert tags["gen_ai.usage.input_tokens"] == answer["usage"]["prompt_tokens"], tags
    assert tags["ovserve.pipeline.resolved"] == st["pipeline"]["resolved"] == "LM_CB", tags
    assert tags["ovserve.pipeline.fallback"] is False and tags["ovserve.task"] == "text-generation", tags
    assert tags["http.response.status_code"] == 200 and tags["ovserve.time_to_first_token_seconds"] > 0, tags
    process = t["processes"][root["processID"]]
    assert process["serviceName"] == "ovserve-runtime", process
    assert {tag["key"]: tag["value"] for tag in process["tags"]}.get("service.instance.id") == pod["metadata"]["name"]
    assert "marmalade" not in json.dumps(t)

    # through the routing gateway: Envoy and the endpoint picker pass the caller's traceparent on to the runtime
    cluster.wait_for(lambda: (status(cluster, namespace, NAME).get("routing") or {}).get("endpoints") == 1, 60, "pool")
    gw = Gateway(pool=NAME, namespace=namespace, kubeconfig=cluster.kubeconfig, workdir=tmp_path / "gw").start()
    try:
        cluster.wait_for(lambda: chat(gw.url)[0] == 200, 90, "a chat through the gateway")
        code, answer = chat(gw.url, f"00-{GATEWAY_TRACE_ID}-{PARENT_ID}-01")
        assert code == 200, answer
    finally:
        gw.stop()
    t = cluster.wait_for(
        lambda: (t := trace(query_url, GATEWAY_TRACE_ID)) and len(t["spans"]) >= 4 and t, 30, "the gateway's trace"
    )
    root = next(s for s in t["spans"] if s["operationName"] == f"chat {NAME}")
    assert root["references"] == [{"refType": "CHILD_OF", "traceID": GATEWAY_TRACE_ID, "spanID": PARENT_ID}], root

    # the operator's sync passes of this serving
    def synced():
        url = f"{query_url}/api/traces?service=ovserve-operator&limit=50&lookback=1h"
        with urllib.request.urlopen(url, timeout=5) as r:
            traces = json.loads(r.read())["data"]
        for t in traces:
            names = {s["operationName"] for s in t["spans"]}
            if f"reconcile {namespace}/{NAME}" in names and {"observe", "decide", "act"} <= names:
                return t
        return None

    t = cluster.wait_for(synced, 30, f"a traced sync pass of {namespace}/{NAME} in Jaeger ({query_url})")
    root = next(s for s in t["spans"] if s["operationName"].startswith("reconcile "))
    tags = {tag["key"]: tag["value"] for tag in root["tags"]}
    assert tags["k8s.namespace.name"] == namespace and tags["ovserve.llmserving"] == NAME, tags
    for s in t["spans"]:
        if s is not root:
            assert s["references"][0]["spanID"] == root["spanID"], s
