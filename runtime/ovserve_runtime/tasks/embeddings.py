"""Embeddings: `/v3/embeddings` and `/v1/embeddings` (OpenAI's API) over openvino_genai.TextEmbeddingPipeline.

Request fields (docs/runtime.md has the table): `input` a string or a list of strings (token ids are refused
by name: the pipeline takes text, and decoding ids to re-tokenize them would not embed what was sent);
`encoding_format` float or base64 (little-endian float32, what the openai client sends by default and
decodes); `dimensions` the model's size, or smaller when the serving says the model was trained for it
(--embeddings-matryoshka: the first dimensions, renormalized when embeddings are normalized), else refused;
`user` ignored. An input longer than the model's context (or --max-prompt-tokens) is refused, never
truncated in silence. `usage.prompt_tokens` counts the model's tokens (special tokens included).

Concurrent requests share pipeline calls (worker.py): their texts are embedded in one `embed_documents` call.
Padding to the longest text of a batch does not change a text's embedding (the attention mask excludes it);
the runtime tests compare every served vector with the raw pipeline's for the same config.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..flags import Pooling, RuntimeFlags
from ..openai.request import RequestError, error_of
from ..report import EmbeddingsReport
from .facts import embedding_size, read_facts, read_sentence_transformers
from .resolve import EmbeddingsPlan, TaskFailure, resolve_embeddings
from .worker import Job, TaskEngine

log = logging.getLogger("ovserve.tasks.embeddings")

MAX_INPUTS = 2048  # inputs per request (OpenAI's limit)
SMOKE_TEXT = "hello"


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    model: str | None = None
    input: str | Annotated[list[str], Field(max_length=MAX_INPUTS)] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None


def parse(raw: bytes) -> EmbeddingsRequest:
    try:
        body = EmbeddingsRequest.model_validate_json(raw or b"null")
    except ValidationError as exc:
        err = error_of(exc)
        if err.param and err.param.startswith("input"):  # the union's first error names a branch, not the rule
            raise RequestError(
                f"'input' must be a string or a list of up to {MAX_INPUTS} strings", "input", "invalid_type"
            ) from None
        raise err from None
    if isinstance(body.input, list) and body.input and not isinstance(body.input[0], str):
        raise RequestError(
            "token ids in 'input' are not supported: this server embeds text, send the strings (LangChain's "
            "OpenAIEmbeddings: check_embedding_ctx_length=False; its token ids are OpenAI's vocabulary anyway)",
            "input",
            "unsupported_value",
        )
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts:
        raise RequestError("'input' must not be empty", "input", "invalid_value")
    for i, t in enumerate(texts):
        if not t:
            where = "input" if isinstance(body.input, str) else f"input[{i}]"
            raise RequestError(f"'{where}' must not be an empty string", where, "invalid_value")
    return body


@dataclass
class Context:
    body: EmbeddingsRequest
    tokens: int
    dimensions: int


class Embeddings:
    """The loaded embeddings serving: its pipeline's engine and how requests become jobs and answers."""

    def __init__(self, engine: TaskEngine, report: EmbeddingsReport, served_name: str, limit: int | None) -> None:
        self.engine = engine
        self.report = report
        self.served_name = served_name
        self.limit = limit  # tokens per input
        self.normalized = report.normalize.value == "true"

    def prepare(self, raw: bytes) -> tuple[Job, Context]:
        from ..openai.errors import ApiError

        body = parse(raw)
        if body.model is not None and body.model != self.served_name:
            raise ApiError(
                404,
                f"The model '{body.model}' does not exist; this server serves '{self.served_name}'",
                param="model",
                code="model_not_found",
            )
        size = self.report.dimensions
        dims = body.dimensions or size
        if dims != size and not (self.report.truncatableDimensions and dims < size):
            why = (
                f"at most {size}"
                if self.report.truncatableDimensions
                else f"{size} only: the model is not served as truncatable (spec.embeddings.matryoshka)"
            )
            raise RequestError(
                f"'dimensions' {dims} is not supported: this model embeds in {why}", "dimensions", "unsupported_value"
            )
        texts = [body.input] if isinstance(body.input, str) else list(body.input)
        # tokens are counted (and the context limit checked) by the worker, in one tokenizer call per batch
        job = Job(texts=texts, extra={"single": isinstance(body.input, str)})
        return job, Context(body=body, tokens=0, dimensions=dims)

    def respond(self, job: Job, result: tuple[list, int], ctx: Context) -> dict:
        vectors, ctx.tokens = result
        # one array for the request's vectors (little-endian float32: the base64 layout), not one per vector
        arr = np.asarray(vectors, dtype="<f4")
        if ctx.dimensions < arr.shape[1]:
            arr = arr[:, : ctx.dimensions]
            if self.normalized:
                norms = np.linalg.norm(arr, axis=1, keepdims=True)
                arr = np.divide(arr, norms, out=arr.copy(), where=norms > 0).astype("<f4")
        if ctx.body.encoding_format == "base64":
            embs: list[Any] = [base64.b64encode(row.tobytes()).decode() for row in arr]
        else:
            embs = arr.tolist()
        data = [{"object": "embedding", "index": i, "embedding": emb} for i, emb in enumerate(embs)]
        return {
            "object": "list",
            "data": data,
            "model": self.served_name,
            "usage": {"prompt_tokens": ctx.tokens, "total_tokens": ctx.tokens},
        }


def genai_defaults() -> tuple[Pooling, bool]:
    import openvino_genai as g

    c = g.TextEmbeddingPipeline.Config()
    return Pooling(c.pooling_type.name), bool(c.normalize)


def plan(flags: RuntimeFlags) -> EmbeddingsPlan | TaskFailure:
    st = read_sentence_transformers(flags.model_path or "")
    return resolve_embeddings(flags.embeddings_pooling, flags.embeddings_normalize, st, genai_defaults())


def pipeline_config(p: EmbeddingsPlan, max_length: int | None):
    import openvino_genai as g

    c = g.TextEmbeddingPipeline.Config()
    c.pooling_type = getattr(g.TextEmbeddingPipeline.PoolingType, p.pooling.value)
    c.normalize = p.normalize.value == "true"
    if max_length:
        c.max_length = max_length
    return c


def construct(flags: RuntimeFlags, p: EmbeddingsPlan, max_length: int | None, properties: dict) -> Any:
    import openvino_genai as g

    return g.TextEmbeddingPipeline(flags.model_path, flags.device, pipeline_config(p, max_length), **properties)


def make_engine(pipeline: Any, tokenizer: Any, max_batch: int, limit: int | None = None) -> TaskEngine:
    """The worker's call: one tokenizer call for the texts of every job (usage.prompt_tokens and the context
    limit: a job with a text over it gets its 400 and leaves the call), then one embed_documents call."""

    def run(jobs: Sequence[Job]) -> list[Any]:
        from ..openai.errors import ApiError

        texts = [t for j in jobs for t in j.texts]
        # the texts' token counts from one tokenizer call (the attention mask's rows; no per-text arrays)
        lengths = np.asarray(tokenizer.encode(texts, add_special_tokens=True).attention_mask.data).sum(axis=1).tolist()
        results: list[Any] = [None] * len(jobs)
        keep: list[int] = []
        at = 0
        for k, j in enumerate(jobs):
            own = lengths[at : at + len(j.texts)]
            at += len(j.texts)
            over = next((i for i, n in enumerate(own) if limit is not None and n > limit), None)
            if over is not None:
                where = "input" if j.extra.get("single") else f"input[{over}]"
                results[k] = ApiError(
                    400,
                    f"'{where}' has {own[over]} tokens, more than the limit of {limit}",
                    param=where,
                    code="context_length_exceeded",
                )
            else:
                results[k] = sum(own)
                keep.append(k)
        if keep:
            vectors = pipeline.embed_documents([t for k in keep for t in jobs[k].texts])
            at = 0
            for k in keep:
                n = len(jobs[k].texts)
                results[k] = (vectors[at : at + n], results[k])
                at += n
        return results

    def merge(parts: list[tuple[list, int]]) -> tuple[list, int]:
        return [v for vs, _ in parts for v in vs], sum(n for _, n in parts)

    return TaskEngine(
        "embeddings", run, tokenizer, max_batch, batch_jobs=True, smoke=Job(texts=[SMOKE_TEXT]), merge=merge
    )


def load(flags: RuntimeFlags, served_name: str, limit: int | None, properties: dict) -> Embeddings:
    """Construct the pipeline with the resolved config and prove it with the smoke input; LoadFailure-free:
    the caller (tasks.loader) turns exceptions into the failure report."""
    import openvino_genai as g

    p = plan(flags)
    if isinstance(p, TaskFailure):
        raise TaskFailureError(p)
    facts = read_facts(flags.model_path or "")
    size = embedding_size(facts)
    pipe = construct(flags, p, limit, properties)
    tokenizer = g.Tokenizer(flags.model_path)
    engine = make_engine(pipe, tokenizer, flags.embeddings_max_batch, limit)
    if size is None:  # a dynamic output: the pipeline's answer says
        size = len(pipe.embed_documents([SMOKE_TEXT])[0])
    report = EmbeddingsReport(
        pooling=p.pooling,
        normalize=p.normalize,
        dimensions=size,
        maxLength=limit,
        truncatableDimensions=flags.embeddings_matryoshka,
    )
    return Embeddings(engine, report, served_name, limit)


class TaskFailureError(Exception):
    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure
