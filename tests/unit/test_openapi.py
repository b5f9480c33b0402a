"""The runtime's OpenAPI document (openapi.py): valid OpenAPI 3.1, every registered route in it, its bodies
the request models' own, and served by the App at /openapi.json and under each API prefix."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate
from ovserve_runtime import endpoints, openapi
from ovserve_runtime.http import App, ServerConfig
from ovserve_runtime.openai.audio import TranscriptionForm
from ovserve_runtime.openai.request import ChatRequest, CompletionRequest
from ovserve_runtime.openai.responses_request import ResponsesRequest
from ovserve_runtime.report import PipelineReport, PipelineType, Reason, RuntimeReport, State
from ovserve_runtime.tasks.embeddings import EmbeddingsRequest
from ovserve_runtime.tasks.rerank import RerankRequest

BODIES = {
    "ChatRequest": ChatRequest,
    "CompletionRequest": CompletionRequest,
    "EmbeddingsRequest": EmbeddingsRequest,
    "RerankRequest": RerankRequest,
    "ResponsesRequest": ResponsesRequest,
    "TranscriptionForm": TranscriptionForm,
}


def _app() -> App:
    report = RuntimeReport(
        state=State.LOADING,
        model="m",
        device="CPU",
        pipeline=PipelineReport(requested=PipelineType.AUTO, reason=Reason.LOADING),
    )
    return App(ServerConfig(served_name="m"), report)


def _body_schema(doc: dict, name: str) -> dict:
    """A self-contained JSON schema of one component (its $refs resolve inside the document)."""
    return {**doc["components"]["schemas"][name], "components": doc["components"]}


def test_the_document_is_valid_openapi_3_1():
    doc = openapi.document("1.2.3")
    assert doc["openapi"].startswith("3.1")
    validate(doc)
    json.dumps(doc)  # plain JSON: no enum members, no sets
    ids = [op["operationId"] for item in doc["paths"].values() for m, op in item.items() if m != "parameters"]
    assert len(ids) == len(set(ids))


def test_every_registered_route_is_documented_and_nothing_else():
    doc = openapi.document()
    registered = {
        (r.method.lower(), r.resource.canonical)
        for r in _app().web.router.routes()
        if r.method in ("GET", "POST") and r.resource is not None
    }
    documented = {(m, p) for p, item in doc["paths"].items() for m in item if m in ("get", "post")}
    assert registered == documented
    posts = {p for m, p in registered if m == "post"}
    assert {
        f"{prefix}/{path}" for prefix in endpoints.API_PREFIXES for path in ("chat/completions", "completions")
    } <= posts


def test_request_bodies_are_the_models_own():
    """Drift: each POST body names one request model, and its properties are that model's fields (aliases)."""
    doc = openapi.document()
    schemas = doc["components"]["schemas"]
    for path, item in doc["paths"].items():
        if "post" not in item:
            continue
        (content,) = item["post"]["requestBody"]["content"].values()  # JSON, or the audio API's multipart form
        ref = content["schema"]["$ref"]
        name = ref.rsplit("/", 1)[1]
        model = BODIES[name]
        fields = {f.alias or n for n, f in model.model_fields.items()}
        assert set(schemas[name]["properties"]) == fields, path
        assert set(schemas[name].get("required", [])) == {
            f.alias or n for n, f in model.model_fields.items() if f.is_required()
        }


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("ChatRequest", {"messages": [{"role": "user", "content": "hi"}], "stop": "x", "max_tokens": 3}),
        ("ChatRequest", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "data:,"}]}]}),
        ("ChatRequest", {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto", "seed": 2**64 - 1}),
        ("CompletionRequest", {"prompt": "hello", "stop": ["a", "b"], "stream": True}),
        ("EmbeddingsRequest", {"input": ["a", "b"], "encoding_format": "base64"}),
        ("RerankRequest", {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}),
    ],
)
def test_bodies_the_server_takes_fit_the_document(name, body):
    BODIES[name].model_validate_json(json.dumps(body))  # the server takes it
    jsonschema.validate(body, _body_schema(openapi.document(), name))


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("ChatRequest", {"messages": []}),
        ("ChatRequest", {"messages": [{"role": "user", "content": "hi"}], "max_token": 3}),
        ("ChatRequest", {"messages": [{"role": "user", "content": "hi"}], "temperature": 3}),
        ("ChatRequest", {"messages": [{"role": "user", "content": "hi"}], "stream": "false"}),
        ("CompletionRequest", {"prompt": "x", "seed": 2**64}),
        ("RerankRequest", {"query": "", "documents": ["a"]}),
    ],
)
def test_bodies_the_server_refuses_do_not_fit_the_document(name, body):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _body_schema(openapi.document(), name))


def test_the_app_serves_the_document():
    async def fetch() -> list[tuple[int, str, dict]]:
        async with TestClient(TestServer(_app().web)) as client:
            out = []
            for path in (endpoints.OPENAPI, *(f"{p}{endpoints.OPENAPI}" for p in endpoints.API_PREFIXES)):
                resp = await client.get(path)
                out.append((resp.status, resp.headers["Content-Type"], json.loads(await resp.read())))
            return out

    expected = openapi.document()
    for code, ctype, doc in asyncio.run(fetch()):
        assert code == 200 and ctype.startswith("application/json")
        assert (doc["paths"], doc["components"]) == (expected["paths"], expected["components"])
