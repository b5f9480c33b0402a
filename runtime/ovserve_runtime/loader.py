"""Carry out the resolution of `resolve` with the real openvino-genai: the one place pipelines are built."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import observe, resolve
from .detok import TokenTable
from .engine import (
    CBEngine,
    Engine,
    EngineError,
    LegacyEngine,
    SchedulerOptions,
    construct_cb,
    construct_legacy,
)
from .report import PipelineReport, PipelineType, Reason

log = logging.getLogger("ovserve.loader")


class LoadFailure(Exception):
    def __init__(self, report: PipelineReport) -> None:
        super().__init__(f"{report.reason}: {report.message}")
        self.report = report


@dataclass
class LoadOptions:
    model_path: str
    pipeline_type: PipelineType = PipelineType.AUTO
    device: str = "CPU"
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)
    properties: dict[str, Any] = field(default_factory=dict)  # e.g. INFERENCE_NUM_THREADS
    structural_check: bool = True
    # text CB models: the pipeline in an engine-core child process (engine_core.py), not a thread here
    engine_process: bool = True
    observe: bool = True  # read the resolved settings back (observe.py) for the decisions record


def available_devices() -> list[str]:
    import openvino as ov

    return list(ov.Core().available_devices)


def load(opts: LoadOptions) -> tuple[Engine, PipelineReport, resolve.Layout]:
    """Resolve and construct the pipeline, and prove it with a one-token smoke generation.

    Returns (started engine, pipeline report, layout); raises LoadFailure carrying the failed report.
    """
    requested = opts.pipeline_type
    layout = resolve.inspect_dir(opts.model_path)
    devices = available_devices() if layout.exists and layout.kind else []
    p = resolve.plan(requested, layout, opts.device, devices)
    if isinstance(p, resolve.Failure):
        raise LoadFailure(resolve.failed_report(requested, p.reason, p.message))

    structure: resolve.Structure | None = None
    if p.try_cb and opts.structural_check:
        t = time.perf_counter()
        try:
            from .structure import check

            structure = check(Path(opts.model_path) / layout.language_xml)
        except Exception as exc:  # the check is an early signal; the real construction stays authoritative
            log.warning("structural check failed (%s); relying on construction errors", exc)
        else:
            log.info(
                "structural check of %s in %.0f ms: %s",
                layout.language_xml,
                (time.perf_counter() - t) * 1000,
                structure,
            )

    vlm = p.kind == PipelineType.VLM
    probed = _probe(opts, layout) if opts.observe else None
    if p.try_cb:
        predicted = resolve.structural_reason(structure) if structure is not None else None
        if predicted is not None and structure is not None and structure.pa_error:
            # openvino's own SDPAToPagedAttention pass already failed on a clone: the CB construction
            # would raise this very text, so decide now (same classification as the error path)
            error = structure.pa_error
            log.info("PagedAttention not possible (structural check): %s", error.splitlines()[-1])
        else:
            error = None
            t = time.perf_counter()
            try:
                if opts.engine_process and p.cb_type == PipelineType.LM_CB:
                    from .engine_core import ProcessCBEngine

                    engine: Engine = ProcessCBEngine(
                        opts.model_path, opts.device, opts.scheduler, opts.properties, p.cb_type
                    )
                else:
                    engine = CBEngine(
                        construct_cb(opts.model_path, opts.device, opts.scheduler, opts.properties),
                        p.cb_type,
                        max_active=opts.scheduler.effective_max_num_seqs(),
                    )
            except Exception as exc:
                error = str(exc).strip()
                log.info("ContinuousBatchingPipeline construction failed: %s", error)
                if predicted is None and resolve.classify_error(error) == Reason.PAGED_ATTENTION_NOT_SUPPORTED:
                    log.warning("structural check predicted CB support, construction disagreed")
            else:
                log.info("ContinuousBatchingPipeline constructed in %.2fs", time.perf_counter() - t)
                report = resolve.cb_report(p)
                _prove(engine, report, requested)
                engine.observed = observe.observe(
                    probed,
                    asked_kv=opts.scheduler.kv_precision(),
                    scheduler=observe.scheduler_values(opts.scheduler.scheduler_config()),
                    cache_bytes=engine.cache_bytes(),
                )
                return engine, report, layout
        decision = resolve.after_cb_failure(p, error)
        if isinstance(decision, resolve.Refuse):
            raise LoadFailure(decision.report)
        report = decision.report
        log.warning("falling back to the legacy %s pipeline (SDPA): %s", p.kind, report.reason)
    else:
        report = resolve.legacy_report(p)

    t = time.perf_counter()
    try:
        pipe = construct_legacy(opts.model_path, opts.device, vlm, opts.properties)
    except Exception as exc:
        msg = resolve.load_failed_message(str(exc))
        raise LoadFailure(resolve.failed_report(requested, Reason.MODEL_LOAD_FAILED, msg)) from exc
    log.info("legacy %s pipeline (SDPA) constructed in %.2fs", p.kind, time.perf_counter() - t)
    engine = LegacyEngine(pipe, p.kind)
    _prove(engine, report, requested)
    engine.observed = observe.observe(probed)
    return engine, report, layout


def _probe(opts: LoadOptions, layout: resolve.Layout) -> observe.Probe | None:
    """The plugin's resolution for this model, device and properties (observe.py); None when it cannot be read
    (the decisions then say unknown; serving does not depend on it)."""
    t = time.perf_counter()
    props = {**opts.properties, **opts.scheduler.properties()}
    try:
        pr = observe.probe(Path(opts.model_path) / layout.language_xml, opts.device, props)
    except Exception as exc:
        log.warning("could not probe the plugin's settings (%s); the decisions will say unknown", exc)
        return None
    log.info("probe of the plugin's settings in %.0f ms: %s", (time.perf_counter() - t) * 1000, pr)
    return pr


def _prove(engine: Engine, report: PipelineReport, requested: PipelineType) -> Engine:
    engine.start()
    t = time.perf_counter()
    try:
        engine.smoke()
    except EngineError as exc:
        engine.stop()
        msg = resolve.load_failed_message(str(exc))
        raise LoadFailure(resolve.failed_report(requested, Reason.MODEL_LOAD_FAILED, msg)) from exc
    log.info("smoke generation ok in %.0f ms (%s)", (time.perf_counter() - t) * 1000, report.resolved)
    engine.token_table = TokenTable.build(engine.tokenizer)
    return engine
