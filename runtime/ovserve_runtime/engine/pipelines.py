"""The pipelines an engine core owns, built from the scheduler options the flags give: a
ContinuousBatchingPipeline (with a draft model or prompt lookup when speculation runs) or a legacy stateful
LLMPipeline/VLMPipeline on the SDPA backend. Built in the process that steps them (the engine-core child builds
its own from these plain values)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from . import pages

log = logging.getLogger("ovserve.engine")


@dataclass
class SchedulerOptions:
    cache_size_gb: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    dynamic_split_fuse: bool | None = None
    kv_cache_precision: str | None = None
    cache_eviction_max_tokens: int | None = None
    cache_eviction_start_tokens: int = 32
    cache_eviction_recent_tokens: int = 128
    cache_eviction_aggregation: str = "NORM_SUM"
    sparse_attention: str | None = None

    def eviction_text(self) -> str | None:
        """The asked eviction as the decision record writes it (observe.scheduler_values); None: off."""
        if self.cache_eviction_max_tokens is None:
            return None
        return (
            f"start {self.cache_eviction_start_tokens}, recent {self.cache_eviction_recent_tokens}, "
            f"max {self.cache_eviction_max_tokens} tokens, {self.cache_eviction_aggregation}"
        )

    def scheduler_config(self):
        import openvino_genai as g

        s = g.SchedulerConfig()
        if self.cache_size_gb is not None:
            # SchedulerConfig.cache_size is whole GB (0: let openvino-genai size the cache itself)
            s.cache_size = 0 if self.cache_size_gb <= 0 else max(1, round(self.cache_size_gb))
        if self.max_num_seqs is not None:
            s.max_num_seqs = self.max_num_seqs
        if self.max_num_batched_tokens is not None:
            s.max_num_batched_tokens = self.max_num_batched_tokens
        if self.enable_prefix_caching is not None:
            s.enable_prefix_caching = self.enable_prefix_caching
        if self.dynamic_split_fuse is not None:
            s.dynamic_split_fuse = self.dynamic_split_fuse
        if self.cache_eviction_max_tokens is not None:
            s.use_cache_eviction = True
            s.cache_eviction_config = g.CacheEvictionConfig(
                self.cache_eviction_start_tokens,
                self.cache_eviction_recent_tokens,
                self.cache_eviction_max_tokens,
                getattr(g.AggregationMode, self.cache_eviction_aggregation),
            )
        if self.sparse_attention is not None:
            s.use_sparse_attention = True
            s.sparse_attention_config = g.SparseAttentionConfig(
                mode=getattr(g.SparseAttentionMode, self.sparse_attention)
            )
        return s

    def kv_precision(self) -> str | None:
        """The asked KV-cache precision; None when unset or AUTO (the plugin and openvino-genai decide)."""
        p = self.kv_cache_precision
        return None if not p or p.upper() == "AUTO" else p

    def properties(self) -> dict[str, Any]:
        p = self.kv_precision()
        return {"KV_CACHE_PRECISION": p} if p else {}

    def effective_max_num_seqs(self) -> int:
        """max_num_seqs as set, or openvino-genai's default."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        import openvino_genai as g

        return int(g.SchedulerConfig().max_num_seqs)


def construct_cb(path: str, device: str, sched: SchedulerOptions, props: dict[str, Any], spec=None):
    """`spec`: a speculative.SpeculativeConfig to run (a draft model or prompt lookup), or None."""
    import openvino_genai as g

    cfg = sched.scheduler_config()
    extra = {**props, **sched.properties()}
    if spec is not None and spec.mode == "draft":
        extra["draft_model"] = g.draft_model(
            spec.draft_path, spec.draft_device or device, **dict(spec.draft_properties)
        )
    elif spec is not None and spec.mode == "promptLookup":
        extra["prompt_lookup"] = True
    log.info(
        "ContinuousBatchingPipeline scheduler: cache_size=%s max_num_seqs=%s max_num_batched_tokens=%s "
        "enable_prefix_caching=%s dynamic_split_fuse=%s properties=%s",
        cfg.cache_size,
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        cfg.enable_prefix_caching,
        cfg.dynamic_split_fuse,
        extra,
    )
    pipe = g.ContinuousBatchingPipeline(path, cfg, device, extra)
    pages.warm_then_release(pipe, [path, spec.draft_path if spec is not None and spec.mode == "draft" else ""])
    return pipe


def construct_legacy(path: str, device: str, vlm: bool, props: dict[str, Any]):
    """Legacy stateful pipeline with the SDPA backend forced (never the silent PA-then-SDPA default)."""
    import openvino_genai as g

    cls = g.VLMPipeline if vlm else g.LLMPipeline
    return cls(path, device, ATTENTION_BACKEND="SDPA", **props)
