"""Rerank: `/v3/rerank` and `/v1/rerank` (Cohere / Jina style) over openvino_genai.TextRerankPipeline.

Request: `query`, `documents` (strings, or objects with `text` as Jina and Cohere v1 accept), `top_n`
(default: all), `return_documents` (default false); `model` checked like the other endpoints; fields that
would change the answer and are not implemented (`max_chunks_per_doc`, `max_tokens_per_doc`, `rank_fields`)
are refused by name. A query + document pair longer than the model's context is refused, never truncated in
silence. Answer: `results` sorted by `relevance_score` (the pipeline's score: the sigmoid of a one-label
cross-encoder's logit), each with the document's `index` in the request (and `document.text` when asked),
plus `usage.total_tokens` (the pairs' tokens) and Cohere's `meta.billed_units.search_units` (1 per request).

A pipeline call scores one query against a list of documents, so each request is its own calls (the worker
does not merge requests): its documents in slices of SLICE (a cross-encoder scores each pair on its own, so
slicing changes no score), which bounds the memory of one call whatever the request's size (1,000 documents in
one call padded them all to the longest); the pipeline is constructed with top_n = --rerank-max-documents so
that every score comes back and the request's own top_n is applied here. The pairs are counted (and checked
against the context limit) in slices too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..flags import RuntimeFlags
from ..openai.request import RequestError, error_of
from .worker import Job, TaskEngine

SMOKE_QUERY, SMOKE_DOCS = "hello", ["hello world"]
SLICE = 64  # documents per pipeline call (and per tokenizer call): the embeddings' default batch
REFUSED = ("max_chunks_per_doc", "max_tokens_per_doc", "rank_fields")


class Document(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    text: str


class RerankRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    model: str | None = None
    query: Annotated[str, Field(min_length=1)]
    documents: Annotated[list[str | Document], Field(min_length=1)]
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool = False


def parse(raw: bytes, max_documents: int) -> tuple[RerankRequest, list[str]]:
    try:
        body = RerankRequest.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise error_of(exc) from None
    for name in REFUSED:
        if (body.model_extra or {}).get(name) is not None:
            raise RequestError(f"'{name}' is not supported by this server", name, "unsupported_value")
    if len(body.documents) > max_documents:
        raise RequestError(
            f"{len(body.documents)} documents, more than the limit of {max_documents} per request",
            "documents",
            "too_many_documents",
        )
    texts = [d if isinstance(d, str) else d.text for d in body.documents]
    return body, texts


@dataclass
class Context:
    body: RerankRequest
    tokens: int


class Rerank:
    def __init__(
        self, engine: TaskEngine, pair_tokenizer: Any, served_name: str, limit: int | None, max_documents: int
    ) -> None:
        self.engine = engine
        self.pair_tokenizer = pair_tokenizer
        self.served_name = served_name
        self.limit = limit
        self.max_documents = max_documents

    def prepare(self, raw: bytes) -> tuple[Job, Context]:
        from ..openai.errors import ApiError

        body, texts = parse(raw, self.max_documents)
        if body.model is not None and body.model != self.served_name:
            raise ApiError(
                404,
                f"The model '{body.model}' does not exist; this server serves '{self.served_name}'",
                param="model",
                code="model_not_found",
            )
        lengths = np.concatenate([self._lengths(body.query, texts[i : i + SLICE]) for i in range(0, len(texts), SLICE)])
        if self.limit is not None:
            for i, n in enumerate(lengths):
                if n > self.limit:
                    raise ApiError(
                        400,
                        f"the query and 'documents[{i}]' have {int(n)} tokens together, more than the limit of "
                        f"{self.limit}",
                        param=f"documents[{i}]",
                        code="context_length_exceeded",
                    )
        return Job(texts=texts, query=body.query), Context(body=body, tokens=int(lengths.sum()))

    def _lengths(self, query: str, texts: list[str]) -> np.ndarray:
        """The tokens of each (query, document) pair."""
        if self.pair_tokenizer is not None:
            enc = self.pair_tokenizer.encode([query], texts)
        else:  # a tokenizer without pairs: the pipeline scores query + document concatenated, counted alike
            enc = self.engine.tokenizer.encode([query + t for t in texts])
        return np.asarray(enc.attention_mask.data).sum(axis=1)

    def respond(self, job: Job, scored: list, ctx: Context) -> dict:
        ranked = sorted(scored, key=lambda p: -p[1])  # the pipeline sorts too; sorted here whatever it does
        if ctx.body.top_n is not None:
            ranked = ranked[: ctx.body.top_n]
        results = []
        for index, score in ranked:
            r: dict[str, Any] = {"index": int(index), "relevance_score": float(score)}
            if ctx.body.return_documents:
                r["document"] = {"text": job.texts[index]}
            results.append(r)
        return {
            "id": "rerank-" + uuid.uuid4().hex[:24],
            "object": "rerank",
            "model": self.served_name,
            "results": results,
            "usage": {"prompt_tokens": ctx.tokens, "total_tokens": ctx.tokens},
            "meta": {"billed_units": {"search_units": 1}},
        }


def make_engine(pipeline: Any, tokenizer: Any, slice_size: int = SLICE) -> TaskEngine:
    """One request per call, its documents in slices of `slice_size` (the worker runs them and `merge`s)."""

    def run(jobs: Sequence[Job]) -> list[Any]:
        return [list(pipeline.rerank(j.query, j.texts)) for j in jobs]

    def merge(parts: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
        # each slice's indices are its own: slice k starts at document k * slice_size
        return [(k * slice_size + int(i), s) for k, part in enumerate(parts) for i, s in part]

    return TaskEngine(
        "rerank",
        run,
        tokenizer,
        max_batch=1,
        batch_jobs=False,
        smoke=Job(texts=SMOKE_DOCS, query=SMOKE_QUERY),
        merge=merge,
        slice_size=slice_size,
    )


def load(flags: RuntimeFlags, served_name: str, limit: int | None, properties: dict) -> Rerank:
    import openvino_genai as g

    c = g.TextRerankPipeline.Config()
    c.top_n = flags.rerank_max_documents  # every score back; the request's top_n is applied by respond()
    if limit:
        c.max_length = limit
    pipe = g.TextRerankPipeline(flags.model_path, flags.device, c, **properties)
    tokenizer = g.Tokenizer(flags.model_path)
    try:  # the pipeline tokenizes (query, document) pairs when the tokenizer can; counted the same way here
        pair = g.Tokenizer(flags.model_path, add_second_input=True)
        pair = pair if pair.supports_paired_input() else None
    except Exception:
        pair = None
    return Rerank(make_engine(pipe, tokenizer), pair, served_name, limit, flags.rerank_max_documents)
