"""Prometheus metrics of the runtime (own registry; names documented in docs/runtime.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from .metricnames import (  # the names the endpoint picker reads
    CACHE_BLOCK_SIZE_LABEL,
    CACHE_CONFIG_INFO,
    CACHE_NUM_BLOCKS_LABEL,
    CACHE_PREFIX_LABEL,
    KV_USAGE_RATIO,
)
from .report import RuntimeReport

disable_created_metrics()  # no *_created samples: they only add noise to scrapes

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Tokens per KV-cache block of the PagedAttention op as the OpenVINO plugins compile it: the value cache's shape is
# [blocks, kv_heads, block_size, head_size] (tests/runtime/test_routing_gauges.py reads it back on CPU).
PAGED_BLOCK_TOKENS = {"CPU": 32, "GPU": 16}
_DYNAMIC_CACHE = "dynamic"  # decisions.kv_cache_gb: the cache grows on demand, no fixed number of blocks


def cache_config(rep: RuntimeReport) -> dict[str, str] | None:
    """The labels of ovserve_kv_cache_config_info for a report, None where no paged KV cache runs (the legacy
    pipeline, a task without generation, a pod not loaded yet): block size in tokens, blocks (empty while the cache
    grows on demand: no fixed number is true) and whether prefix caching is on."""
    p, d = rep.pipeline, rep.decisions
    if rep.state != "ready" or not p.continuousBatching or d is None:
        return None
    device = (d.device.value if d.device and d.device.value else rep.device).split(".")[0].split(":")[0].upper()
    block = PAGED_BLOCK_TOKENS.get(device)
    if block is None:
        return None
    fixed = d.kvCacheGB is not None and d.kvCacheGB.value not in (None, _DYNAMIC_CACHE)
    blocks = d.kvCacheBlocks.value if fixed and d.kvCacheBlocks and d.kvCacheBlocks.value else ""
    prefix = d.prefixCaching is not None and (d.prefixCaching.value or "").lower() == "true"
    return {
        CACHE_BLOCK_SIZE_LABEL: str(block),
        CACHE_NUM_BLOCKS_LABEL: blocks,
        CACHE_PREFIX_LABEL: str(prefix).lower(),
    }


class PagedCacheCollector(Collector):
    """The two families only a paged KV cache can tell, exported only where one runs (no zero that would attract
    traffic to a legacy pod): the cache usage as a ratio (0-1) and the cache's configuration as an info gauge."""

    def __init__(self) -> None:
        self.usage: float | None = None  # the last step's usage, 0-100; None: no paged cache
        self.config: dict[str, str] | None = None

    def describe(self) -> list[Metric]:
        return []  # families appear and disappear with the pipeline: never checked at registration

    def collect(self) -> Iterator[Metric]:
        if self.config is None or self.usage is None:
            return
        yield GaugeMetricFamily(
            KV_USAGE_RATIO,
            "KV-cache usage of the continuous batching pipeline at its last step, 0-1 (the endpoint picker's "
            "kvUsageSpec); 0 when no request is in the pipeline; absent for the legacy pipeline (no paged cache)",
            value=min(1.0, max(0.0, self.usage / 100.0)),
        )
        info = GaugeMetricFamily(
            CACHE_CONFIG_INFO,
            "The paged KV cache (value 1): block_size in tokens, num_blocks (empty while the cache grows on "
            "demand), enable_prefix_caching; absent for the legacy pipeline",
            labels=list(self.config),
        )
        info.add_metric(list(self.config.values()), 1.0)
        yield info


_TPOT = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "ovserve_requests",
            "Generation requests by endpoint and outcome",
            ["endpoint", "status"],
            registry=r,
        )
        self.prompt_tokens = Counter("ovserve_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generated_tokens = Counter("ovserve_generated_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "ovserve_time_to_first_token_seconds",
            "Time from request arrival to the first generated token",
            buckets=_LATENCY,
            registry=r,
        )
        self.tpot = Histogram(
            "ovserve_time_per_output_token_seconds",
            "Mean time per output token after the first, per request",
            buckets=_TPOT,
            registry=r,
        )
        self.e2e = Histogram(
            "ovserve_request_duration_seconds",
            "Request duration, arrival to last token",
            buckets=_LATENCY,
            registry=r,
        )
        self.itl = Histogram(
            "ovserve_inter_token_latency_seconds",
            "Time between successive token deliveries of a request (one observation per gap; a step that yields "
            "several tokens, e.g. speculative decoding, is one delivery)",
            buckets=_TPOT,
            registry=r,
        )
        self.queue_wait = Histogram(
            "ovserve_request_queue_seconds",
            "Time from handing a generation request to the engine to the engine taking it into its pipeline "
            "(waiting for a --max-num-seqs slot, or for the legacy pipeline's one request)",
            buckets=_LATENCY,
            registry=r,
        )
        self.prepare = Histogram(
            "ovserve_request_prepare_seconds",
            "Time from a generation request's arrival to handing it to the engine: body, validation, chat "
            "template, output grammar and tokenization",
            buckets=_LATENCY,
            registry=r,
        )
        self.finished = Counter(
            "ovserve_request_finish",
            "Generation requests by endpoint and how their generation ended: stop, length, cancelled (client "
            "gone, or n > 1 choices ended early), error",
            ["endpoint", "reason"],
            registry=r,
        )
        self.errors = Counter(
            "ovserve_request_errors",
            "Error answers of the API endpoints by endpoint, HTTP status and error.code (4xx and 5xx)",
            ["endpoint", "status", "code"],
            registry=r,
        )
        self.started = Gauge(
            "ovserve_runtime_start_time_seconds",
            "Unix time this runtime process started (its changes count restarts of a pod's runtime)",
            registry=r,
        )
        self.started.set(time.time())
        self.queue_depth = Gauge(
            "ovserve_queue_depth",
            "Requests accepted and not generating yet (parsed, queued, or not scheduled by the last step)",
            registry=r,
        )
        self.running = Gauge(
            "ovserve_requests_running", "Requests the pipeline generated for in its last step", registry=r
        )
        self.queue_limit = Gauge(
            "ovserve_queue_limit",
            "Most requests that may wait (--max-queued-requests); beyond it requests get 429",
            registry=r,
        )
        self.kv_cache = Gauge(
            "ovserve_kv_cache_usage_percent",
            "KV-cache usage of the continuous batching pipeline (pipeline.get_metrics().cache_usage at its "
            "last step); 0 when no request is in the pipeline, and for the legacy pipeline",
            registry=r,
        )
        self.ready = Gauge("ovserve_ready", "1 when the pipeline is loaded and serving", registry=r)
        self.refusals = Counter(
            "ovserve_refusals",
            "4xx answers by status, error.code and error.param (indexes dropped, unknown field names as "
            "'(unknown field)', at most 256 label sets: refusals.py)",
            ["status", "code", "param"],
            registry=r,
        )
        self.grammar_builds = Counter(
            "ovserve_grammar_builds",
            "Output grammars asked for (json_schema, forced tool calls) by outcome: hit (cached), built, refused "
            "(400: over a limit or unsupported), timeout (400: over --grammar-timeout-seconds)",
            ["outcome"],
            registry=r,
        )
        self.grammar_seconds = Histogram(
            "ovserve_grammar_build_seconds",
            "Time to build one output grammar in the grammar worker (cache misses)",
            buckets=_LATENCY,
            registry=r,
        )
        self.spec_steps = Counter(
            "ovserve_speculative_steps",
            "Decode steps of requests generated with speculative decoding",
            registry=r,
        )
        self.spec_proposed = Counter(
            "ovserve_speculative_draft_tokens",
            "Tokens a draft model proposed (counted for a draft proposing a fixed number per step: "
            "min(num_assistant_tokens, tokens left - 1); prompt lookup and a confidence threshold propose a varying "
            "number openvino-genai does not expose)",
            registry=r,
        )
        self.spec_accepted = Counter(
            "ovserve_speculative_accepted_tokens",
            "Proposed tokens the main model accepted (tokens beyond one per decode step)",
            registry=r,
        )
        self.spec_rate = Gauge(
            "ovserve_speculative_acceptance_rate",
            "accepted / proposed draft tokens since start (draft with a fixed count); 0 until a token was proposed",
            registry=r,
        )
        self._spec_seen = (0, 0, 0)
        self.info = Gauge(
            "ovserve_pipeline_info",
            "The pipeline that runs (value 1)",
            [
                "model",
                "device",
                "state",
                "requested",
                "resolved",
                "continuous_batching",
                "fallback",
                "reason",
            ],
            registry=r,
        )
        self.task_documents = Counter(
            "ovserve_task_documents",
            "Texts embedded (embeddings) and documents scored (rerank), by task",
            ["task"],
            registry=r,
        )
        self.task_batch = Histogram(
            "ovserve_task_batch_texts",
            "Texts (embeddings) or documents (rerank) per pipeline call; _count is the number of calls",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
            registry=r,
        )
        self.audio_seconds = Counter(
            "ovserve_audio_seconds", "Seconds of audio transcribed or translated (transcription task)", registry=r
        )
        self.audio_rtf = Histogram(
            "ovserve_audio_real_time_factor",
            "The pipeline's time on a file over the file's duration (below 1: faster than real time)",
            buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5),
            registry=r,
        )
        self.task_info = Gauge(
            "ovserve_task_info", "The task this serving runs (value 1; empty until resolved)", ["task"], registry=r
        )
        self.paged = PagedCacheCollector()
        r.register(self.paged)
        self._info_labels: tuple[str, ...] | None = None
        self._task_label: str | None = None
        self.engine = None
        self.counts: Callable[[], tuple[int, int]] = lambda: (0, 0)  # (queued, running) as the server counts

    def attach(self, engine, counts: Callable[[], tuple[int, int]]) -> None:
        self.engine, self.counts = engine, counts

    def grammar_outcome(self, outcome: str, seconds: float) -> None:
        self.grammar_builds.labels(outcome).inc()
        if outcome != "hit":
            self.grammar_seconds.observe(seconds)

    def set_report(self, rep: RuntimeReport) -> None:
        p = rep.pipeline
        labels = (
            rep.model,
            rep.device,
            str(rep.state),
            str(p.requested),
            str(p.resolved or ""),
            str(p.continuousBatching).lower(),
            str(p.fallback).lower(),
            str(p.reason),
        )
        if self._info_labels is not None and self._info_labels != labels:
            self.info.remove(*self._info_labels)
        self.info.labels(*labels).set(1)
        self._info_labels = labels
        self.ready.set(1 if rep.state == "ready" else 0)
        task = str(rep.task.resolved or "")
        if self._task_label is not None and self._task_label != task:
            self.task_info.remove(self._task_label)
        self.task_info.labels(task).set(1)
        self._task_label = task
        self.paged.config = cache_config(rep)

    def _speculation(self, now: tuple[int, int, int]) -> None:
        """The engine's cumulative counts as counter increments since the last scrape."""
        seen, self._spec_seen = self._spec_seen, now
        for counter, new, old in zip((self.spec_steps, self.spec_proposed, self.spec_accepted), now, seen, strict=True):
            if new > old:
                counter.inc(new - old)
        if now[1]:
            self.spec_rate.set(now[2] / now[1])

    def render(self) -> tuple[bytes, str]:
        e = self.engine
        if e is not None:
            queued, running = self.counts()
            self.queue_depth.set(queued)
            self.running.set(running)
            # None: no figure (the legacy pipeline, a CB engine that broke): nothing is using a KV cache
            usage = e.cache_usage()
            self.kv_cache.set(usage or 0.0)
            self.paged.usage = usage
            counts = getattr(e, "speculation_counts", None)
            if counts is not None:
                self._speculation(counts())
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
