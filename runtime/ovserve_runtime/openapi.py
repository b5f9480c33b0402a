"""The OpenAPI 3.1 document of the runtime's own HTTP API, generated from the models that validate it.

The request bodies are the pydantic models the handlers parse with (openai/request.py for chat and
completions, tasks/ for embeddings and rerank), so the document cannot promise a field that the server
refuses or miss one that it takes; the status body is the RuntimeReport. Served at `/openapi.json` (and under
each API prefix) by http/app.py; tests/unit/test_openapi.py validates it and checks it against the routes the
App registers; benchmarks/fuzz_api.py generates its bodies from it.

Pure: no I/O, no openvino. `document()` builds a fresh dict on every call (the server keeps one rendering).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from . import endpoints
from .openai.audio import TranscriptionForm
from .openai.request import ChatRequest, CompletionRequest
from .openai.responses_request import ResponsesRequest
from .report import RuntimeReport
from .tasks import AUDIO_ROUTES, EXTRA_RERANK_PATHS, TASK_ROUTES
from .tasks.embeddings import EmbeddingsRequest
from .tasks.rerank import RerankRequest

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/{model}"
JSON = "application/json"
SSE = "text/event-stream"

# Fields whose before-validator also takes a plain string (the model's schema shows the list form only):
# (schema name, property) -> what the string stands for
STRING_FORMS = {
    ("Message", "content"): "a string is one text part",
    ("ContentPart", "image_url"): "a string is the URL",
    ("ChatRequest", "stop"): "a string is one stop sequence",
    ("CompletionRequest", "stop"): "a string is one stop sequence",
    ("CompletionRequest", "prompt"): "a string is the one prompt",
}

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "description": "An OpenAI error object; `param` names the refused field (a dotted path) when there is one.",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
MODEL_SCHEMA: dict[str, Any] = {
    "title": "Model",
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}
# the refusals every body-reading endpoint can answer (400 field, 408 slow body, 413 too large, 429 queue full,
# 503 not ready or draining); a 5xx other than 503 is a server bug
ERRORS = {
    "400": "a field is invalid or refused (`error.param` names it)",
    "404": "the `model` field names another model",
    "408": "the body did not arrive within --body-timeout-seconds",
    "413": "the body is over --max-body-bytes",
    "429": "the queue is full (Retry-After)",
    "503": "not ready, failed or draining",
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": REF.format(model=name)}


def _errors() -> dict[str, Any]:
    return {code: {"description": why, "content": {JSON: {"schema": _ref("Error")}}} for code, why in ERRORS.items()}


def _with_string_forms(schemas: dict[str, Any]) -> None:
    for (model, prop), why in STRING_FORMS.items():
        field = schemas[model]["properties"][prop]
        options = field.get("anyOf") or [{k: field.pop(k) for k in list(field) if k not in ("title", "default")}]
        field["anyOf"] = [{"type": "string"}, *options]
        field["description"] = f"{field.get('description', '')} ({why})".strip()


def _post(summary: str, body: str, answer: str, streams: bool, ctype: str = JSON) -> dict[str, Any]:
    ok: dict[str, Any] = {JSON: {"schema": {"type": "object", "description": answer}}}
    if streams:
        ok[SSE] = {"schema": {"type": "string", "description": "with `stream: true`: SSE chunks, then `[DONE]`"}}
    return {
        "post": {
            "summary": summary,
            "operationId": None,  # set per path below
            "requestBody": {"required": True, "content": {ctype: {"schema": _ref(body)}}},
            "responses": {"200": {"description": answer, "content": ok}, **_errors()},
        }
    }


def _get(summary: str, schema: dict[str, Any], extra: dict[str, str] | None = None, ctype: str = JSON) -> dict:
    responses: dict[str, Any] = {"200": {"description": summary, "content": {ctype: {"schema": schema}}}}
    for code, why in (extra or {}).items():
        responses[code] = {"description": why, "content": {JSON: {"schema": {"type": "object"}}}}
    return {"get": {"summary": summary, "operationId": None, "responses": responses}}


def _operation_id(method: str, path: str) -> str:
    return method + "".join(f"_{p}" for p in path.strip("/").replace("{", "").replace("}", "").split("/"))


def paths() -> dict[str, dict[str, Any]]:
    """Every path the App registers -> its OpenAPI path item (operationIds unique by path)."""
    out: dict[str, dict[str, Any]] = {}
    task_bodies = {"embeddings": "EmbeddingsRequest", "rerank": "RerankRequest"}
    model_list = {
        "type": "object",
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}},
    }
    for prefix in endpoints.API_PREFIXES:
        out[f"{prefix}/chat/completions"] = _post(
            "Chat completions (OpenAI)", "ChatRequest", "a chat.completion object", streams=True
        )
        out[f"{prefix}/completions"] = _post(
            "Completions (OpenAI)", "CompletionRequest", "a text_completion object", streams=True
        )
        out[f"{prefix}/responses"] = _post(
            "Responses (OpenAI)", "ResponsesRequest", "a response object (with `stream`: typed events)", streams=True
        )
        rid = [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}]
        out[f"{prefix}/responses/{{response_id}}"] = {
            **_get("A stored response (store true; this pod's store)", {"type": "object"}, {"404": "not stored"}),
            "delete": {
                "summary": "Delete a stored response",
                "operationId": None,
                "responses": {"200": {"description": "deleted"}, "404": {"description": "not stored"}},
            },
            "parameters": rid,
        }
        for path in TASK_ROUTES.values():
            out[f"{prefix}/{path}"] = _post(
                f"{path.capitalize()} (a serving of that task)", task_bodies[path], f"the {path} answer", streams=False
            )
        for path, translate in AUDIO_ROUTES.items():  # multipart/form-data, OpenAI's audio API
            answer = "the transcript in response_format (json, text, srt, vtt, verbose_json); transcriptions with "
            answer += "stream: SSE transcript.text.delta events, then transcript.text.done"
            out[f"{prefix}/{path}"] = _post(
                "Translation into English (a transcription serving)" if translate else "Transcription",
                "TranscriptionForm",
                answer,
                streams=False,
                ctype="multipart/form-data",
            )
        out[f"{prefix}/models"] = _get("The served model", model_list)
        out[f"{prefix}/models/{{model}}"] = _get("One model", _ref("Model"), {"404": "not the served model"})
        out[f"{prefix}/models/{{model}}"]["parameters"] = [
            {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
        ]
        out[f"{prefix}{endpoints.OPENAPI}"] = _get("This document", {"type": "object"})
    for path in EXTRA_RERANK_PATHS:
        out[path] = _post("Rerank (Cohere v2 path)", "RerankRequest", "the rerank answer", streams=False)
    out[endpoints.OPENAPI] = _get("This document", {"type": "object"})
    out[endpoints.STATUS] = _get("The runtime report", _ref("RuntimeReport"))
    out[endpoints.LIVE] = _get("Liveness", {"type": "object"}, {"503": "the pipeline failed or the engine stalled"})
    out[endpoints.READY] = _get("Readiness", {"type": "object"}, {"503": "loading, failed or draining"})
    out[endpoints.METRICS] = _get("Prometheus metrics", {"type": "string"}, ctype="text/plain")
    for path, item in out.items():
        for method, op in item.items():
            if method != "parameters":
                op["operationId"] = _operation_id(method, path)
    return out


def schemas() -> dict[str, Any]:
    """The components' schemas: every request model (and what it refers to), the report, the error."""
    models: list[tuple[type[BaseModel], Any]] = [
        (ChatRequest, "validation"),
        (CompletionRequest, "validation"),
        (ResponsesRequest, "validation"),
        (EmbeddingsRequest, "validation"),
        (RerankRequest, "validation"),
        (TranscriptionForm, "validation"),
        (RuntimeReport, "serialization"),
    ]
    _, defs = models_json_schema(models, ref_template=REF)
    out: dict[str, Any] = defs["$defs"]
    _with_string_forms(out)
    out["Error"] = ERROR_SCHEMA
    out["Model"] = MODEL_SCHEMA
    return out


def document(version: str = "0") -> dict[str, Any]:
    """The OpenAPI 3.1 document of this runtime's API."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "ovserve-runtime",
            "version": version,
            "description": "OpenAI-compatible API of the ovserve runtime (under /v3 and /v1), health, status and "
            "metrics. Which endpoints answer depends on the serving's task (docs/runtime.md).",
        },
        "paths": paths(),
        "components": {"schemas": schemas()},
    }
