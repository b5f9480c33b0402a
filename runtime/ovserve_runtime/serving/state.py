"""What the servings share: the server's configuration (`ServerConfig`, from the flags) and `ServingState`, the
one object every endpoint's serving reads and the HTTP app builds: the report, metrics, the engine once attached,
the batch encoder, admission, drain, the prepare pool, the grammar service, the tool and reasoning parsers, what
the pipeline supports, the prompt limits; `counts()`, `prompt_limit`, the 429 and the readiness 503s.

No aiohttp here: the servings (base.py) turn its ApiErrors into responses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

from ..admission import Admission
from ..drain import SHUTTING_DOWN, Drain
from ..encoder import BatchEncoder
from ..flags import RuntimeFlags, default
from ..grammars import GrammarService
from ..metrics import Metrics
from ..openai import assistant
from ..openai.errors import ApiError
from ..openai.grammar import Limits
from ..openai.support import PipelineSupport
from ..report import Capabilities, RuntimeReport, State
from ..responsestore import ResponseStore
from ..tracing import RequestTracer
from .prepare import Context

log = logging.getLogger("ovserve.server")

# without a token table: no token is assumed longer than this many characters (the prompt-size pre-check)
DEFAULT_MAX_TOKEN_CHARS = 256


@dataclass
class ServerConfig:
    """What the HTTP side runs with. A field named like a flag is that flag (flags.py: its default, bounds
    and meaning); `from_flags` builds one from the command line."""

    served_name: str
    max_prompt_tokens: int = default("max_prompt_tokens")  # 0: the model's max position
    default_max_tokens: int = default("default_max_tokens")
    max_queued_requests: int = default("max_queued_requests")  # beyond max_num_seqs generating + this many: 429
    max_body_bytes: int = default("max_body_bytes")
    body_timeout_seconds: float = default("body_timeout_seconds")  # the body must arrive within this (408)
    liveness_stall_seconds: float = default("liveness_stall_seconds")  # the progress watchdog's floor
    max_images: int = default("max_images")  # image parts per request
    max_image_pixels: int = default("max_image_pixels")  # per image, from its header, before decoding
    max_decoded_image_bytes: int = default("max_decoded_image_bytes")  # RGB bytes of all the images of a request
    prepare_threads: int = default("prepare_threads")  # workers for bodies over INLINE_BODY_BYTES; 0: min(4,CPUs)
    drain_timeout_s: float = default("drain_timeout_seconds")  # SIGTERM: how long in-flight requests may run
    stream_interval_s: float = default("stream_interval_ms") / 1000  # text this close to a stream's last write waits
    tool_parser: str = default("tool_parser")  # AUTO: from the chat template (openai/assistant.resolve_parsers)
    grammar_timeout_seconds: float = default("grammar_timeout_seconds")  # one grammar build, in its worker
    max_grammar_bytes: int = default("max_grammar_bytes")
    grammar_cache_entries: int = default("grammar_cache_entries")
    grammar_cache_bytes: int = default("grammar_cache_bytes")
    grammar_memory_bytes: int = default("grammar_memory_bytes")  # the worker's RLIMIT_AS
    chat_template_kwargs: str = default("chat_template_kwargs")  # JSON: the serving's template variables
    responses_store_entries: int = default("responses_store_entries")
    responses_store_bytes: int = default("responses_store_bytes")
    responses_store_ttl_seconds: float = default("responses_store_ttl_seconds")
    reasoning_parser: str = default("reasoning_parser")
    otlp_traces_endpoint: str | None = default("otlp_traces_endpoint")  # None: tracing off
    trace_sample_ratio: float = default("trace_sample_ratio")

    @classmethod
    def from_flags(cls, flags: RuntimeFlags, served_name: str) -> ServerConfig:
        # served_name: the CLI resolves it (the directory name when the flag is unset)
        same = ({f.name for f in fields(cls)} & set(RuntimeFlags.model_fields)) - {"served_name"}
        return cls(
            served_name=served_name,
            drain_timeout_s=flags.drain_timeout_seconds,
            stream_interval_s=flags.stream_interval_ms / 1000,
            **flags.model_dump(include=same),
        )


class ServingState:
    """The state every serving shares. Built with the server (no engine yet); `attach` once the pipeline runs."""

    def __init__(self, cfg: ServerConfig, report: RuntimeReport, metrics: Metrics | None = None) -> None:
        self.cfg = cfg
        self.report = report
        self.metrics = metrics or Metrics()
        self.metrics.set_report(report)
        self.engine = None
        self.encoder: BatchEncoder | None = None
        self.max_position: int | None = None
        self.max_token_chars = DEFAULT_MAX_TOKEN_CHARS
        self.support = PipelineSupport(structured_output=False, images=False)
        self.parsers = assistant.Parsers()  # tool calling and reasoning: resolved from the chat template at attach
        self.admission = Admission(max_queued=cfg.max_queued_requests)
        self.metrics.queue_limit.set(cfg.max_queued_requests)
        self.created = int(time.time())
        self.pool = ThreadPoolExecutor(
            max_workers=cfg.prepare_threads or min(4, os.cpu_count() or 1), thread_name_prefix="prepare"
        )
        self.grammars = GrammarService(
            Limits(max_regex_bytes=cfg.max_grammar_bytes),
            cfg.grammar_timeout_seconds,
            cfg.grammar_memory_bytes,
            cfg.grammar_cache_entries,
            cfg.grammar_cache_bytes,
            on_outcome=self.metrics.grammar_outcome,
        )
        self.drain = Drain(cfg.drain_timeout_s, abort=self._abort)
        self.responses = ResponseStore(
            cfg.responses_store_entries, cfg.responses_store_bytes, cfg.responses_store_ttl_seconds
        )
        self.template_kwargs: dict = json.loads(cfg.chat_template_kwargs) if cfg.chat_template_kwargs else {}
        self.tracer: RequestTracer | None = (
            RequestTracer(cfg.otlp_traces_endpoint, cfg.trace_sample_ratio, cfg.served_name)
            if cfg.otlp_traces_endpoint
            else None
        )

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.grammars.close()
        if self.encoder is not None:
            self.encoder.close()

    # --- lifecycle -----------------------------------------------------------------------------
    def set_report(self, report: RuntimeReport) -> None:
        self.report = report
        self.metrics.set_report(report)

    def attach(self, engine, max_position: int | None, generates: bool = True) -> None:
        """On the loop, once the pipeline runs. `generates`: False for a task engine (embeddings, rerank), which
        generates no text (no structured output, logprobs or parsers)."""
        self.engine = engine
        self.max_position = max_position
        self.encoder = BatchEncoder(engine.tokenizer)
        engine.attach(asyncio.get_running_loop())
        self.admission.capacity = engine.capacity
        self.metrics.attach(engine, self.counts)
        table = getattr(engine, "token_table", None)
        texts = getattr(table, "texts", None)
        if texts:
            self.max_token_chars = max(1, max(len(t) for t in texts if t is not None))
        self.support = PipelineSupport(
            structured_output=generates and not engine.is_vlm,
            images=engine.is_vlm,
            logprobs=generates and engine.continuous_batching,
        )
        if self.support.structured_output:
            self.grammars.warm()  # spawn the grammar worker now, not on the first schema
        template = None
        if generates:
            try:
                template = engine.tokenizer.chat_template
            except Exception:  # a tokenizer without one
                template = None
        self.parsers = assistant.resolve_parsers(str(self.cfg.tool_parser), str(self.cfg.reasoning_parser), template)
        log.info(
            "tool parser: %s (%s%s); reasoning parser: %s (%s%s)",
            self.parsers.tool or "none",
            self.parsers.tool_source,
            f": {self.parsers.tool_detail}" if self.parsers.tool_detail else "",
            self.parsers.reasoning or "none",
            self.parsers.reasoning_source,
            f": {self.parsers.reasoning_detail}" if self.parsers.reasoning_detail else "",
        )

    def capabilities(self) -> Capabilities:
        """What this model and pipeline serve (the runtime report's `capabilities`)."""
        return Capabilities(
            structuredOutput=self.support.structured_output,
            images=self.support.images,
            toolParser=self.parsers.tool if self.parsers.renders_tools else None,
            reasoningParser=self.parsers.reasoning,
            logprobs=self.support.logprobs,
            maxContext=self.max_position,
            maxPromptTokens=self.prompt_limit,
            thinkingSwitch=self.parsers.thinking_switch,
        )

    def fail(self, message: str) -> None:
        """On the loop, when the pipeline broke: every request still waiting for events ends with an error
        now (the engine answers them too; whichever comes first ends the request)."""
        for greq in self.drain.generations():
            if greq.events is not None:
                greq.events.put_nowait(("error", f"pipeline failed: {message}"))

    def _abort(self, greq, message: str) -> None:
        """Drain deadline: end this generation now; its handler answers 503 or ends the stream with an error."""
        self.engine.cancel(greq)
        greq.events.put_nowait(("error", ApiError(503, message, "server_error", code=SHUTTING_DOWN)))

    # --- what the servings read ----------------------------------------------------------------
    def counts(self) -> tuple[int, int]:
        """(queued, running): requests admitted here and not generating, and those generating."""
        running = min(self.engine.running, self.admission.inflight) if self.engine is not None else 0
        return self.admission.queued(running), running

    @property
    def prompt_limit(self) -> int | None:
        limits = [x for x in (self.cfg.max_prompt_tokens, self.max_position) if x]
        return min(limits) if limits else None

    def prepare_context(self) -> Context:
        """What preparing a generation request reads of this state (prepare.py takes this, not the state)."""
        cfg = self.cfg
        return Context(
            served_name=cfg.served_name,
            support=self.support,
            parsers=self.parsers,
            prompt_limit=self.prompt_limit,
            max_position=self.max_position,
            max_token_chars=self.max_token_chars,
            default_max_tokens=cfg.default_max_tokens,
            max_images=cfg.max_images,
            max_image_pixels=cfg.max_image_pixels,
            max_decoded_image_bytes=cfg.max_decoded_image_bytes,
            template_kwargs=self.template_kwargs,
        )

    def queue_full(self) -> ApiError:
        """The 429 of a request beyond the admission bound, with its Retry-After."""
        _queued, running = self.counts()
        retry = self.admission.retry_after(running)
        return ApiError(
            429,
            f"the server is at capacity: {self.admission.inflight} requests in flight ({running} generating, "
            f"at most {self.cfg.max_queued_requests} may wait); retry after {retry} s",
            "rate_limit_exceeded",
            code="queue_full",
            headers={"Retry-After": str(retry)},
        )

    def not_ready(self) -> ApiError:
        return ApiError(
            503, f"the model is not ready (state {self.report.state})", "server_error", code="model_not_ready"
        )

    def ready_engine(self):
        """The engine, when the serving is ready and its pipeline has not failed; the 503 otherwise."""
        engine = self.engine
        if engine is None or self.report.state != State.READY:
            raise self.not_ready()
        if engine.fatal is not None:
            raise ApiError(503, f"the pipeline failed: {engine.fatal}", "server_error", code="pipeline_failed")
        return engine

    def on_the_way(self, leaving: int = 0) -> int:
        """Admitted requests not yet submitted to the engine, less `leaving` (the caller's own)."""
        return self.admission.inflight - self.drain.generating() - leaving

    def hint_preparing(self, leaving: int = 0) -> None:
        """Tell the engine how many admitted requests are on their way (a burst's first prefill waits)."""
        if self.engine is not None:
            self.engine.preparing(self.on_the_way(leaving))
