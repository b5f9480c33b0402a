"""Read back from OpenVINO what the loaded pipeline runs with (decisions.Observed).

openvino-genai does not expose the compiled model inside its pipelines, so two readings stand in for it:

- a probe: the model's first PagedAttention op (openvino's own SDPAToPagedAttention pass on a clone of the
  IR, as the structural check runs it), its computed inputs cut to parameters, compiled on the same device
  with the same properties. The plugin resolves INFERENCE_PRECISION_HINT, NUM_STREAMS, INFERENCE_NUM_THREADS
  and EXECUTION_DEVICES on it as on the whole model, and its key_cache/value_cache inputs give the shape of
  one KV-cache block for each candidate precision (the u8/u4 layouts carry their scales);
- the continuous-batching pipeline's own metrics: PipelineMetrics.cache_size_in_bytes is a whole number of
  blocks, so the precision whose block size divides it is the one the pipeline allocated. This matters: the
  plugin's KV_CACHE_PRECISION default (u8 on this CPU for a lone PagedAttention op) is not what a whole model
  gets (bf16 for a fp32 tiny-llm, measured), so the cache is measured, never assumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .decisions import Observed

log = logging.getLogger("ovserve.observe")

# openvino element type names -> the names users write (KV_CACHE_PRECISION values)
_TYPE_NAMES = {
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "uint8_t": "u8",
    "int8_t": "i8",
    "uint4_t": "u4",
    "int4_t": "i4",
}
CANDIDATES = ("f32", "f16", "bf16", "u8", "u4")
_PLUGIN_KEYS = (
    "EXECUTION_DEVICES",
    "INFERENCE_PRECISION_HINT",
    "KV_CACHE_PRECISION",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "PERFORMANCE_HINT",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE",
)


def type_name(value: Any) -> str | None:
    """'u8' for <Type: 'uint8_t'> (and for the string 'u8'); None for None."""
    if value is None:
        return None
    get = getattr(value, "get_type_name", None)
    name = get() if callable(get) else str(value)
    name = name.strip()
    if name.startswith("<Type:"):
        name = name.split("'")[1]
    return _TYPE_NAMES.get(name, name)


@dataclass(frozen=True)
class Probe:
    """What the plugin resolved on the probe, and the bytes of one KV-cache block per candidate precision."""

    properties: dict[str, Any]
    block_bytes: dict[str, int]  # precision -> bytes of one block over all layers
    layers: int


def _pa_probe(xml: Path):
    """(one-op model holding the first PagedAttention op, number of PagedAttention ops)."""
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    model = ov.Core().read_model(str(xml))
    paged_attention_transformation(model)
    pas = [op for op in model.get_ordered_ops() if op.get_type_name() == "PagedAttentionExtension"]
    if not pas:
        raise RuntimeError("no PagedAttention op after the SDPAToPagedAttention pass")
    pa, params = pas[0], []
    for i, inp in enumerate(pa.inputs()):
        node = inp.get_source_output().get_node()
        if node.get_type_name() == "Constant":
            continue
        if node.get_type_name() == "Parameter":
            params.append(node)
            continue
        src = inp.get_source_output()
        p = ov.opset13.parameter(src.get_partial_shape(), src.get_element_type(), name=f"probe_in{i}")
        inp.replace_source_output(p.output(0))
        params.append(p)
    return ov.Model([pa.output(0)], params, "ovserve-probe"), len(pas)


def _plain_probe():
    import numpy as np
    import openvino as ov
    import openvino.opset13 as op

    x = op.parameter([1, 8], ov.Type.f32, name="x")
    return ov.Model([op.relu(op.matmul(x, op.constant(np.ones((8, 8), np.float32)), False, False))], [x], "probe")


def _block_bytes(compiled) -> int:
    """Bytes of one block of the probe's key and value cache (dims after the block dimension)."""
    total = 0
    for port in compiled.inputs:
        if port.get_any_name().startswith(("key_cache.", "value_cache.")):
            dims = port.get_partial_shape()
            elems = 1
            for d in list(dims)[1:]:
                elems *= d.get_length()
            bits = port.get_element_type().bitwidth
            total += elems * bits // 8
    return total


def probe(xml: Path, device: str, props: dict[str, Any]) -> Probe:
    """Compile the probe as the pipeline's model is compiled: once with the pipeline's properties, then once
    per candidate KV-cache precision for the block sizes. About 50 ms per compile on CPU."""
    import openvino as ov

    try:
        model, layers = _pa_probe(xml)
    except Exception as exc:  # no PagedAttention possible (a legacy pipeline): the plugin's settings only
        log.info("probe without PagedAttention (%s)", str(exc).strip().splitlines()[-1] if str(exc).strip() else exc)
        model, layers = _plain_probe(), 0
    core = ov.Core()
    supported = set(core.get_property(device, "SUPPORTED_PROPERTIES"))
    cfg = {k: v for k, v in props.items() if k in supported}  # openvino-genai's own keys are not the plugin's
    cm = core.compile_model(model, device, cfg)
    out: dict[str, Any] = {}
    for key in _PLUGIN_KEYS:
        try:
            out[key] = cm.get_property(key)
        except Exception:  # a plugin without it (the GPU has no INFERENCE_NUM_THREADS): it does not say
            out[key] = None
    devices = list(out["EXECUTION_DEVICES"] or [device])
    try:
        out["FULL_DEVICE_NAME"] = str(core.get_property(devices[0], "FULL_DEVICE_NAME")).strip()
    except Exception:
        out["FULL_DEVICE_NAME"] = ""
    sizes: dict[str, int] = {}
    for prec in CANDIDATES if layers else ():
        try:
            c = core.compile_model(model, device, {**cfg, "KV_CACHE_PRECISION": prec})
        except Exception as exc:  # the device does not offer it
            log.debug("probe: KV_CACHE_PRECISION %s refused on %s: %s", prec, device, exc)
            continue
        if type_name(c.get_property("KV_CACHE_PRECISION")) == prec:
            sizes[prec] = _block_bytes(c) * layers
    return Probe(properties=out, block_bytes=sizes, layers=layers)


def measured_precision(
    cache_bytes: int | None, block_bytes: dict[str, int], inference_precision: str | None, asked: str | None
) -> tuple[str | None, int | None, str]:
    """(precision, block bytes, how) from the bytes the pipeline allocated: the candidate whose block size
    divides them. f16 and bf16 blocks are the same size: the inference precision tells them apart (the plugin
    keeps a 16-bit cache in it). Several sizes dividing: the asked one, else the first, said ambiguous."""
    if not cache_bytes or not block_bytes:
        return None, None, "no KV cache allocated to measure"
    fits = [p for p, b in block_bytes.items() if b and cache_bytes % b == 0]
    if not fits:
        return None, None, f"{cache_bytes} bytes match no block size of {sorted(block_bytes.items())}"
    sixteen = [p for p in fits if p in ("f16", "bf16")]
    if len(sixteen) == 2 and block_bytes["f16"] == block_bytes["bf16"]:
        keep = asked if asked in sixteen else ("bf16" if inference_precision == "bf16" else "f16")
        fits = [p for p in fits if p not in sixteen or p == keep]
    if asked in fits:
        choice = asked
    else:
        choice = fits[0]
    how = f"measured: {cache_bytes} allocated bytes / {block_bytes[choice]} bytes per block"
    if len(fits) > 1:
        how += f" (also divisible by the {', '.join(p for p in fits if p != choice)} block size)"
    return choice, block_bytes[choice], how


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def observe(
    pr: Probe | None,
    *,
    asked_kv: str | None = None,
    scheduler: dict[str, Any] | None = None,
    cache_bytes: int | None = None,
) -> Observed:
    """decisions.Observed from the probe and, for a CB pipeline, its scheduler config (as plain values:
    cache_size, enable_prefix_caching, dynamic_split_fuse, cache_eviction, sparse_attention) and the bytes its
    KV cache holds after the smoke generation."""
    p = pr.properties if pr is not None else {}
    inference = type_name(p.get("INFERENCE_PRECISION_HINT"))
    hint = p.get("PERFORMANCE_HINT")
    o: dict[str, Any] = dict(
        execution_devices=tuple(str(d) for d in p.get("EXECUTION_DEVICES") or ()),
        device_name=p.get("FULL_DEVICE_NAME") or "",
        inference_precision=inference,
        kv_cache_precision=type_name(p.get("KV_CACHE_PRECISION")),
        num_streams=_int(p.get("NUM_STREAMS")),
        inference_threads=_int(p.get("INFERENCE_NUM_THREADS")),
        performance_hint=str(hint).split(".")[-1] if hint is not None else None,
        dynamic_quantization_group_size=_int(p.get("DYNAMIC_QUANTIZATION_GROUP_SIZE")),
    )
    if scheduler is not None:
        prec, block, how = measured_precision(cache_bytes, pr.block_bytes if pr else {}, inference, asked_kv)
        o.update(
            continuous_batching=True,
            cache_size_gb=float(scheduler["cache_size"]),
            prefix_caching=bool(scheduler["enable_prefix_caching"]),
            dynamic_split_fuse=bool(scheduler["dynamic_split_fuse"]),
            cache_eviction=scheduler.get("cache_eviction") or "off",
            sparse_attention=scheduler.get("sparse_attention") or "off",
            cache_bytes=cache_bytes,
            block_bytes=block,
            kv_cache_precision=prec,
            kv_cache_how=how,
        )
    return Observed(**o)


def scheduler_values(s) -> dict[str, Any]:
    """The plain values of an openvino_genai.SchedulerConfig the decisions need (picklable, for the pipe)."""
    out: dict[str, Any] = {
        "cache_size": s.cache_size,
        "enable_prefix_caching": s.enable_prefix_caching,
        "dynamic_split_fuse": s.dynamic_split_fuse,
        "cache_eviction": None,
        "sparse_attention": None,
    }
    if s.use_cache_eviction:
        c = s.cache_eviction_config
        mode = str(c.aggregation_mode).split(".")[-1]
        out["cache_eviction"] = (
            f"start {c.get_start_size()}, recent {c.get_recent_size()}, max {c.get_max_cache_size()} tokens, {mode}"
        )
    if s.use_sparse_attention:
        out["sparse_attention"] = str(s.sparse_attention_config.mode).split(".")[-1]
    return out
