"""Embeddings and rerank servings on the tiny BERT models, through real ovserve-runtime processes and the
openai client: task resolution, answers equal to the raw openvino-genai pipelines', batching, refusals by
name, admission and drain."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import json
import signal
import time
import urllib.error
import urllib.request

import numpy as np
import openvino_genai as g
import pytest
from openai import OpenAI

from .conftest import wait_until

pytestmark = pytest.mark.runtime

DOCS = [
    "paris is the capital of france",
    "the quick brown fox jumps over the lazy dog",
    "a cat in the house",
    "kubernetes operator serving runtime",
    "one two three",
]


def post(url: str, body: dict, timeout: float = 30) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


@pytest.fixture(scope="module")
def embed_server(encoder_models, server_factory):
    return server_factory(encoder_models / "tiny-embed")


@pytest.fixture(scope="module")
def rerank_server(encoder_models, server_factory):
    return server_factory(encoder_models / "tiny-rerank", "--served-name", "reranker")


@pytest.fixture(scope="module")
def raw_embedder(encoder_models, embed_server):
    """The raw pipeline with the config the server reports it resolved."""
    rep = embed_server.status()["embeddings"]
    c = g.TextEmbeddingPipeline.Config()
    c.pooling_type = getattr(g.TextEmbeddingPipeline.PoolingType, rep["pooling"]["value"])
    c.normalize = rep["normalize"]["value"] == "true"
    return g.TextEmbeddingPipeline(str(encoder_models / "tiny-embed"), "CPU", c, INFERENCE_NUM_THREADS=1)


def test_embeddings_task_and_settings_resolved_from_the_model(embed_server):
    s = embed_server.status()
    assert s["state"] == "ready"
    assert s["task"]["requested"] == "AUTO" and s["task"]["resolved"] == "embeddings"
    assert "last_hidden_state" in s["task"]["source"]
    assert s["pipeline"]["resolved"] == "TextEmbedding" and s["pipeline"]["reason"] == "TaskPipeline"
    # the model's sentence-transformers config says mean pooling and a Normalize module (genai's default: CLS)
    pooling = s["embeddings"]["pooling"]
    assert (pooling["value"], pooling["source"]) == ("MEAN", "automatic")
    assert pooling["detail"] == "model: sentence-transformers pooling config"
    assert s["embeddings"]["normalize"]["value"] == "true"
    assert s["embeddings"]["dimensions"] == 32
    assert 'ovserve_task_info{task="embeddings"} 1.0' in embed_server.metrics()
    assert s["capabilities"]["task"] == "embeddings" and s["capabilities"]["structuredOutput"] is False


def test_openai_client_embeddings_equal_the_raw_pipeline(embed_server, raw_embedder):
    client = OpenAI(base_url=embed_server.url + "/v3", api_key="unused")
    raw = np.array(raw_embedder.embed_documents(DOCS), dtype=np.float32)
    got = client.embeddings.create(model="tiny-embed", input=DOCS)  # the client's default: base64
    assert [d.index for d in got.data] == list(range(len(DOCS)))
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), raw, rtol=0, atol=1e-5)
    floats = client.embeddings.create(model="tiny-embed", input=DOCS, encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in floats.data]), raw, rtol=0, atol=1e-5)
    one = client.embeddings.create(model="tiny-embed", input=DOCS[0])
    np.testing.assert_allclose(one.data[0].embedding, raw[0], rtol=0, atol=1e-5)
    tok = g.Tokenizer(str(embed_server_model(embed_server)))
    expected = int(np.asarray(tok.encode(DOCS).attention_mask.data).sum())
    assert got.usage.prompt_tokens == expected == got.usage.total_tokens
    v1 = OpenAI(base_url=embed_server.url + "/v1", api_key="unused").embeddings.create(model="tiny-embed", input="x")
    assert len(v1.data[0].embedding) == 32


def embed_server_model(server):
    return server.proc.args[server.proc.args.index("--model-path") + 1]


def test_base64_is_little_endian_float32(embed_server, raw_embedder):
    status, body, _ = post(embed_server.url + "/v3/embeddings", {"input": ["hello world"], "encoding_format": "base64"})
    assert status == 200
    vec = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, raw_embedder.embed_documents(["hello world"])[0], atol=1e-5)


def test_concurrent_requests_share_pipeline_calls(embed_server, raw_embedder):
    calls_before = embed_server.metric("ovserve_task_batch_texts_count")
    texts = [f"{DOCS[i % len(DOCS)]} {i}" for i in range(48)]
    client = OpenAI(base_url=embed_server.url + "/v3", api_key="unused", max_retries=0)
    with cf.ThreadPoolExecutor(48) as pool:
        results = list(pool.map(lambda t: client.embeddings.create(model="tiny-embed", input=t), texts))
    calls = embed_server.metric("ovserve_task_batch_texts_count") - calls_before
    assert calls < len(texts), f"{calls} pipeline calls for {len(texts)} concurrent requests: not batched"
    raw = np.array(raw_embedder.embed_documents(texts))
    np.testing.assert_allclose(np.array([r.data[0].embedding for r in results]), raw, rtol=0, atol=1e-5)
    assert embed_server.metric("ovserve_requests_total", 'endpoint="embeddings",status="200"') >= len(texts)
    assert embed_server.metric("ovserve_prompt_tokens_total") > 0
    assert embed_server.metric("ovserve_task_documents_total", 'task="embeddings"') >= len(texts)


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"input": [1, 2, 3]}, 400, "input", "unsupported_value"),
        ({"input": [[1, 2], [3]]}, 400, "input", "unsupported_value"),
        ({"input": []}, 400, "input", "invalid_value"),
        ({"input": ["a", ""]}, 400, "input[1]", "invalid_value"),
        ({"input": 5}, 400, "input", "invalid_type"),
        ({"input": "a", "dimensions": 16}, 400, "dimensions", "unsupported_value"),
        ({"input": "a", "dimensions": 64}, 400, "dimensions", "unsupported_value"),
        ({"input": "a", "encoding_format": "int8"}, 400, "encoding_format", "invalid_value"),
        ({"input": "a", "model": "other"}, 404, "model", "model_not_found"),
        ({"input": ["ok", "hello " * 200]}, 400, "input[1]", "context_length_exceeded"),
    ],
)
def test_embeddings_refusals_name_the_field(embed_server, body, status, param, code):
    got, err, _ = post(embed_server.url + "/v3/embeddings", body)
    assert (got, err["error"]["param"], err["error"]["code"]) == (status, param, code), err


def test_dimensions_equal_to_the_model_size_is_honoured(embed_server):
    status, body, _ = post(embed_server.url + "/v3/embeddings", {"input": "a", "dimensions": 32})
    assert status == 200 and len(body["data"][0]["embedding"]) == 32


def test_matryoshka_serving_truncates_and_renormalizes(encoder_models, server_factory, raw_embedder):
    s = server_factory(encoder_models / "tiny-embed", "--embeddings-matryoshka")
    assert s.status()["embeddings"]["truncatableDimensions"] is True
    status, body, _ = post(s.url + "/v3/embeddings", {"input": "hello world", "dimensions": 8})
    assert status == 200
    full = np.array(raw_embedder.embed_documents(["hello world"])[0])
    want = full[:8] / np.linalg.norm(full[:8])
    np.testing.assert_allclose(body["data"][0]["embedding"], want, atol=1e-5)


def test_pooling_and_normalization_flags_win_over_the_model(encoder_models, server_factory):
    s = server_factory(encoder_models / "tiny-embed", "--embeddings-pooling", "CLS", "--no-embeddings-normalize")
    rep = s.status()["embeddings"]
    assert (rep["pooling"]["value"], rep["pooling"]["source"]) == ("CLS", "requested")
    assert (rep["normalize"]["value"], rep["normalize"]["source"]) == ("false", "requested")
    c = g.TextEmbeddingPipeline.Config()
    c.pooling_type = g.TextEmbeddingPipeline.PoolingType.CLS
    c.normalize = False
    raw = g.TextEmbeddingPipeline(str(encoder_models / "tiny-embed"), "CPU", c).embed_documents(DOCS[:2])
    status, body, _ = post(s.url + "/v3/embeddings", {"input": DOCS[:2]})
    assert status == 200
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], raw, atol=1e-5)


def test_other_tasks_endpoints_are_not_served(embed_server, rerank_server):
    status, err, _ = post(embed_server.url + "/v3/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    assert (status, err["error"]["code"]) == (404, "task_not_served")
    status, err, _ = post(embed_server.url + "/v3/rerank", {"query": "a", "documents": ["b"]})
    assert (status, err["error"]["code"]) == (404, "task_not_served")
    status, err, _ = post(rerank_server.url + "/v1/embeddings", {"input": "a"})
    assert (status, err["error"]["code"]) == (404, "task_not_served")


# ------------------------------------------------------------------------------------------- rerank


def test_rerank_scores_equal_the_raw_pipeline_sorted(encoder_models, rerank_server):
    s = rerank_server.status()
    assert s["task"]["resolved"] == "rerank" and s["pipeline"]["resolved"] == "TextRerank"
    c = g.TextRerankPipeline.Config()
    c.top_n = len(DOCS)
    raw = dict(g.TextRerankPipeline(str(encoder_models / "tiny-rerank"), "CPU", c).rerank("capital of france", DOCS))
    for path in ("/v3/rerank", "/v1/rerank", "/v2/rerank"):
        status, body, _ = post(
            rerank_server.url + path, {"model": "reranker", "query": "capital of france", "documents": DOCS}
        )
        assert status == 200, body
        results = body["results"]
        assert sorted(r["index"] for r in results) == list(range(len(DOCS)))
        scores = [r["relevance_score"] for r in results]
        assert scores == sorted(scores, reverse=True)
        for r in results:
            assert r["relevance_score"] == pytest.approx(raw[r["index"]], abs=1e-6)
            assert "document" not in r
        assert body["usage"]["total_tokens"] > 0


def test_rerank_top_n_and_return_documents(rerank_server):
    docs = [DOCS[0], {"text": DOCS[1]}, DOCS[2]]
    status, body, _ = post(
        rerank_server.url + "/v3/rerank", {"query": "fox", "documents": docs, "top_n": 2, "return_documents": True}
    )
    assert status == 200 and len(body["results"]) == 2
    for r in body["results"]:
        want = docs[r["index"]] if isinstance(docs[r["index"]], str) else docs[r["index"]]["text"]
        assert r["document"] == {"text": want}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"documents": ["a"]}, "query", "missing_required_parameter"),
        ({"query": "q", "documents": []}, "documents", "invalid_value"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n", "invalid_value"),
        ({"query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, "max_chunks_per_doc", "unsupported_value"),
        ({"query": "q", "documents": ["a"], "rank_fields": ["x"]}, "rank_fields", "unsupported_value"),
        ({"query": "q", "documents": ["a", "word " * 200]}, "documents[1]", "context_length_exceeded"),
    ],
)
def test_rerank_refusals_name_the_field(rerank_server, body, param, code):
    status, err, _ = post(rerank_server.url + "/v3/rerank", body)
    assert (status, err["error"]["param"], err["error"]["code"]) == (400, param, code), err


# ------------------------------------------------------------------------------ failure and admission


@pytest.mark.parametrize(
    ("model", "args", "reason"),
    [
        ("tiny-rerank", ("--task", "embeddings"), "TaskMismatch"),
        ("tiny-embed", ("--task", "rerank"), "TaskMismatch"),
        ("tiny-embed", ("--task", "text-generation"), "TaskMismatch"),
        ("tiny-embed", ("--task", "embeddings", "--pipeline-type", "LM_CB"), "TaskMismatch"),
    ],
)
def test_task_mismatch_fails_with_a_named_reason(encoder_models, server_factory, model, args, reason):
    s = server_factory(encoder_models / model, *args, ready=False)
    assert s.proc.wait(timeout=60) == 3
    report = json.loads(s.termination_log.read_text())
    assert report["state"] == "failed" and report["pipeline"]["reason"] == reason
    assert report["task"]["requested"] == args[1]
    assert report["pipeline"]["message"]


def test_admission_bound_answers_429_with_retry_after(encoder_models, server_factory):
    s = server_factory(encoder_models / "tiny-embed", "--max-queued-requests", "0", "--embeddings-max-batch", "1")
    big = {"input": ["hello world " * 50] * 64}
    with cf.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: post(s.url + "/v3/embeddings", big), range(16)))
    codes = [a[0] for a in answers]
    assert 200 in codes and 429 in codes, codes
    refused = next(a for a in answers if a[0] == 429)
    assert refused[1]["error"]["code"] == "queue_full" and int(refused[2]["Retry-After"]) >= 1
    assert s.status()["state"] == "ready"


def test_sigterm_drains_in_flight_requests(encoder_models, server_factory):
    s = server_factory(encoder_models / "tiny-embed", "--embeddings-max-batch", "1")
    big = {"input": ["the quick brown fox " * 20] * 256}
    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post, s.url + "/v3/embeddings", big, 120) for _ in range(8)]
        assert wait_until(lambda: s.metric("ovserve_requests_running") >= 1, 20)
        s.proc.send_signal(signal.SIGTERM)
        in_flight = sum(not f.done() for f in futures)
        codes = [f.result()[0] for f in futures]
    assert in_flight >= 2, "the requests finished before SIGTERM: nothing was drained"
    assert codes == [200] * 8
    assert s.proc.wait(timeout=60) == 0


def test_drain_deadline_ends_what_is_still_running_with_503(encoder_models, server_factory):
    s = server_factory(encoder_models / "tiny-embed", "--embeddings-max-batch", "1", "--drain-timeout-seconds", "0.3")
    big = {"input": ["the quick brown fox " * 20] * 1024}
    with cf.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(post, s.url + "/v3/embeddings", big, 120) for _ in range(4)]
        assert wait_until(lambda: s.metric("ovserve_requests_running") >= 1, 20)
        s.proc.send_signal(signal.SIGTERM)
        answers = [f.result() for f in futures]
    ended = [body for code, body, _ in answers if code == 503]
    assert ended, [code for code, _, _ in answers]
    assert all(b["error"]["code"] == "server_shutting_down" for b in ended)
    assert all(code in (200, 503) for code, _, _ in answers)
    assert s.proc.wait(timeout=60) == 0


def test_queue_depth_metric_counts_requests_waiting_for_a_call(encoder_models, server_factory):
    """The autoscaling metric (QueueDepth) for these tasks: admitted requests not in the current pipeline call."""
    s = server_factory(encoder_models / "tiny-embed", "--embeddings-max-batch", "1")
    big = {"input": ["the quick brown fox " * 20] * 32}
    seen: list[tuple[float, float]] = []
    with cf.ThreadPoolExecutor(9) as pool:
        futures = [pool.submit(post, s.url + "/v3/embeddings", big, 120) for _ in range(8)]
        while not all(f.done() for f in futures):
            seen.append((s.metric("ovserve_queue_depth"), s.metric("ovserve_requests_running")))
            time.sleep(0.02)
        assert [f.result()[0] for f in futures] == [200] * 8
    assert max(q for q, _ in seen) >= 2, seen
    assert max(r for _, r in seen) <= 1, seen  # one request per call at --embeddings-max-batch 1
    assert s.metric("ovserve_queue_depth") == 0


def test_liveness_stays_live_while_embeddings_run_and_counts_slices_as_progress(encoder_models, server_factory):
    """The liveness watchdog reads the embeddings jobs in flight (a job without the progress it reads made every
    probe under load a 500, and the kubelet restarted a busy pod); a request longer than the stall floor stays
    live because its slices count as progress."""
    from .conftest import http_get

    s = server_factory(encoder_models / "tiny-embed", "--embeddings-max-batch", "1", "--liveness-stall-seconds", "1")
    big = {"input": ["the quick brown fox " * 20] * 2048}  # one request, 2048 calls of one text: seconds
    codes: list[int] = []
    with cf.ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        f = pool.submit(post, s.url + "/v3/embeddings", big, 300)
        assert wait_until(lambda: s.metric("ovserve_requests_running") >= 1, 20)
        while not f.done():
            codes.append(http_get(s.url + "/v2/health/live")[0])
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        assert f.result()[0] == 200
    assert codes and set(codes) == {200}, codes
    assert elapsed > 2, f"the request took {elapsed:.1f} s: too short to outlast the 1 s stall floor"
