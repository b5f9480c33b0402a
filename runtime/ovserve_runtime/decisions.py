"""The decision record: what was asked for + what OpenVINO says it runs -> the report's `decisions` block.

Pure (no openvino import): `Asked` comes from the flags, `Observed` from `observe.py` (the compiled model's
properties, the continuous-batching pipeline's metrics, the scheduler config handed to the pipeline), and
`record` turns both into report.Decisions. Each decision says whether it was asked for (`requested`) or chosen
by the runtime, openvino-genai, the plugin or the image (`automatic`), and how it was read (`detail`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .report import Decision, Decisions, Source, SpeculativeReport, Versions
from .tuning import Tuning, on_cpu

AUTO = "AUTO"
GB = 1024**3


@dataclass(frozen=True)
class Asked:
    """What the user asked for; None = not asked (the runtime, openvino-genai or the plugin decides)."""

    device: str = "CPU"
    kv_cache_precision: str | None = None  # AUTO counts as not asked
    inference_precision: str | None = None
    inference_threads: int | None = None  # 0 counts as not asked
    cache_size_gb: float | None = None
    enable_prefix_caching: bool | None = None
    dynamic_split_fuse: bool | None = None
    cache_eviction: str | None = None  # a one-line description of the asked eviction config, None = not asked
    sparse_attention: str | None = None  # the asked sparse-attention mode, None = not asked
    max_prompt_tokens: int | None = None  # 0 counts as not asked
    dynamic_quantization_group_size: int | None = None


@dataclass(frozen=True)
class Observed:
    """What OpenVINO reports for the loaded pipeline (None: it does not say)."""

    continuous_batching: bool = False
    execution_devices: tuple[str, ...] = ()
    device_name: str = ""  # FULL_DEVICE_NAME of the execution device
    inference_precision: str | None = None
    kv_cache_precision: str | None = None
    num_streams: int | None = None
    inference_threads: int | None = None
    performance_hint: str | None = None
    dynamic_quantization_group_size: int | None = None  # CPU plugin only
    # continuous batching: the scheduler config the pipeline was constructed with (asked values and
    # openvino-genai's defaults for the rest) and what its metrics say about the cache
    cache_size_gb: float | None = None  # SchedulerConfig.cache_size (0: grows on demand)
    prefix_caching: bool | None = None
    dynamic_split_fuse: bool | None = None
    cache_eviction: str | None = None
    sparse_attention: str | None = None
    cache_bytes: int | None = None  # PipelineMetrics.cache_size_in_bytes: KV-cache memory allocated now
    block_bytes: int | None = None  # bytes of one KV-cache block over all layers (observe.measured_precision)
    kv_cache_how: str = ""  # how the KV-cache precision was read


def _norm(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def decide(asked: object, resolved: object, *, detail_auto: str, detail_asked: str = "as asked") -> Decision:
    """A decision whose value is `resolved`: `requested` when something was asked. When the resolved value
    differs from the asked one, the detail says so (the plugin or openvino-genai overrode it)."""
    a, r = _norm(asked), _norm(resolved)
    if a is None:
        return Decision(value=r, source=Source.AUTOMATIC, detail=detail_auto)
    if r is not None and r.lower() != a.lower():
        return Decision(value=r, source=Source.REQUESTED, requested=a, detail=f"asked {a}, runs {r}")
    return Decision(value=r if r is not None else a, source=Source.REQUESTED, requested=a, detail=detail_asked)


def kv_cache_gb(o: Observed) -> Decision:
    size = o.cache_size_gb
    if size is not None and size > 0:
        return Decision(value=_norm(size), source=Source.AUTOMATIC, detail="fixed size")
    now = f"{o.cache_bytes} bytes allocated after the smoke generation" if o.cache_bytes is not None else "unknown"
    return Decision(value="dynamic", source=Source.AUTOMATIC, detail=f"grows on demand (cache_size 0); {now}")


def kv_cache_blocks(o: Observed) -> Decision | None:
    if o.cache_bytes is None or not o.block_bytes:
        return None
    blocks = o.cache_bytes // o.block_bytes
    grows = not (o.cache_size_gb and o.cache_size_gb > 0)
    return Decision(
        value=str(blocks),
        source=Source.AUTOMATIC,
        detail=f"{o.block_bytes} bytes per block" + ("; grows on demand" if grows else ""),
    )


def record(
    asked: Asked,
    observed: Observed,
    versions: Versions,
    *,
    max_position: int | None,
    speculative: SpeculativeReport,
    tuning: Tuning | None = None,
) -> Decisions:
    """The decisions block of a loaded pipeline. `tuning`: the CPU seen and the settings chosen for it where
    nothing was asked (tuning.py); their details say so."""
    o = observed

    def auto(setting: str, otherwise: str) -> str:
        return (tuning.why(setting) if tuning else None) or otherwise

    execution = ",".join(o.execution_devices) or None
    device_detail = o.device_name or "execution device of the compiled model"
    if execution and execution.split(".")[0].upper() != asked.device.upper():
        device_detail = f"{asked.device} resolved to {execution}" + (f" ({o.device_name})" if o.device_name else "")
    d = Decisions(
        device=Decision(
            value=execution or asked.device, source=Source.REQUESTED, requested=asked.device, detail=device_detail
        ),
        inferencePrecision=decide(
            asked.inference_precision,
            o.inference_precision,
            detail_auto=auto("inference_precision", "plugin default on this device"),
        ),
        numStreams=decide(None, o.num_streams, detail_auto=f"plugin, performance hint {o.performance_hint or '?'}"),
        inferenceThreads=decide(asked.inference_threads or None, o.inference_threads, detail_auto="plugin default"),
        maxContext=_max_context(asked.max_prompt_tokens, max_position),
        speculative=decide(
            None if speculative.requested.value == "none" else speculative.requested.value,
            speculative.resolved.value,
            detail_auto="not requested",
            detail_asked="runs as asked",
        ),
        openvino=Decision(value=versions.openvino or None, source=Source.AUTOMATIC, detail="the image's"),
        openvinoGenai=Decision(value=versions.openvinoGenai or None, source=Source.AUTOMATIC, detail="the image's"),
    )
    if o.dynamic_quantization_group_size is not None:
        d.dynamicQuantization = decide(
            asked.dynamic_quantization_group_size,
            o.dynamic_quantization_group_size,
            detail_auto=auto("dynamic_quantization_group_size", "plugin default on this device"),
        )
    if tuning is not None and on_cpu(tuning.device):
        cpu = tuning.isa
        d.cpu = Decision(
            value=cpu.level.value,
            source=Source.AUTOMATIC,
            detail=f"{cpu.model_name or 'unknown CPU'}: {' '.join(cpu.features) or 'no AVX2'}"[:300],
        )
    if speculative.fallback:
        d.speculative = d.speculative.model_copy(
            update={"detail": f"{speculative.reason}: {speculative.message}"[:300]}
        )
    if not o.continuous_batching:
        off = "the legacy pipeline has no continuous-batching scheduler"
        # the stateful model's cache lives inside the plugin: nothing to measure, and the plugin's default for a
        # lone op is not what a whole model gets (observe.py), so it is not guessed
        d.kvCachePrecision = Decision(
            value=asked.kv_cache_precision,
            source=Source.REQUESTED if asked.kv_cache_precision else Source.AUTOMATIC,
            requested=asked.kv_cache_precision,
            detail="not measured: the legacy pipeline's cache is internal to the plugin",
        )
        for name in ("prefixCaching", "dynamicSplitFuse", "cacheEviction", "sparseAttention"):
            setattr(d, name, Decision(value=None, source=Source.AUTOMATIC, detail=off))
        return d
    chosen = tuning.why("kv_cache_precision") if tuning else None
    d.kvCachePrecision = decide(
        asked.kv_cache_precision,
        o.kv_cache_precision,
        detail_auto=f"{o.kv_cache_how}; {chosen}" if chosen else o.kv_cache_how,
        detail_asked=o.kv_cache_how,
    )
    d.kvCacheGB = kv_cache_gb(o)
    if asked.cache_size_gb is not None:
        d.kvCacheGB = d.kvCacheGB.model_copy(
            update={"source": Source.REQUESTED, "requested": _norm(asked.cache_size_gb)}
        )
    d.kvCacheBlocks = kv_cache_blocks(o)
    d.prefixCaching = decide(asked.enable_prefix_caching, o.prefix_caching, detail_auto="openvino-genai default")
    d.dynamicSplitFuse = decide(asked.dynamic_split_fuse, o.dynamic_split_fuse, detail_auto="openvino-genai default")
    d.cacheEviction = decide(asked.cache_eviction, o.cache_eviction or "off", detail_auto="openvino-genai default")
    d.sparseAttention = decide(
        asked.sparse_attention, o.sparse_attention or "off", detail_auto="openvino-genai default"
    )
    return d


def _max_context(asked: int | None, max_position: int | None) -> Decision:
    if asked:
        limit = min(asked, max_position) if max_position else asked
        return decide(asked, limit, detail_auto="", detail_asked="--max-prompt-tokens")
    if max_position:
        return Decision(value=str(max_position), source=Source.AUTOMATIC, detail="the model's max position embeddings")
    return Decision(value=None, source=Source.AUTOMATIC, detail="the model's config.json names no context length")


def changes(old: Decisions | None, new: Decisions | None) -> list[str]:
    """The decisions whose value differs while what was asked is the same ("name: old -> new"), for the
    operator's Event when two pods of one spec resolved differently (an image upgrade, another node)."""
    if old is None or new is None:
        return []
    out = []
    for name in Decisions.model_fields:
        a, b = getattr(old, name), getattr(new, name)
        if a is None or b is None or a.requested != b.requested:
            continue
        if a.value != b.value:
            out.append(f"{name}: {a.value} -> {b.value}")
    return out
