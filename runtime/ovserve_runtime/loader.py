"""Carry out the resolution of `resolve` with the real openvino-genai: the one place pipelines are built."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import observe, resolve, speculative
from .detok import TokenTable
from .engine import EngineClient, EngineError, SchedulerOptions, construct_cb, construct_legacy
from .engine.inprocess import cb_client, legacy_client
from .report import PipelineReport, PipelineType, Reason, SpeculativeReason, SpeculativeReport
from .speculative import SpeculativeConfig
from .startup import Phases

log = logging.getLogger("ovserve.loader")


class LoadFailure(Exception):
    def __init__(self, report: PipelineReport, speculative: SpeculativeReport | None = None) -> None:
        super().__init__(f"{report.reason}: {report.message}")
        self.report = report
        self.speculative = speculative


@dataclass
class LoadOptions:
    model_path: str
    pipeline_type: PipelineType = PipelineType.AUTO
    device: str = "CPU"
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)
    properties: dict[str, Any] = field(default_factory=dict)  # e.g. INFERENCE_NUM_THREADS
    # embeddings and rerank: the properties as asked, without the text-generation defaults tuning.py chose for
    # the CPU (measured on generation only); None: `properties`
    encoder_properties: dict[str, Any] | None = None
    structural_check: bool = True
    # text CB models: the pipeline in an engine-core child process (engine/process.py), not a thread here
    engine_process: bool = True
    observe: bool = True  # read the resolved settings back (observe.py) for the decisions record
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    phases: Phases = field(default_factory=Phases)  # the start phases this load times (startup.py)


def available_devices() -> list[str]:
    import openvino as ov

    return list(ov.Core().available_devices)


def load(opts: LoadOptions) -> tuple[EngineClient, PipelineReport, resolve.Layout]:
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
            spec, problem = _speculation(opts, p)
            t = time.perf_counter()
            engine, error = _construct_cb(opts, p, spec)
            if engine is None and spec is not None:
                # the draft (or prompt lookup) may be what failed: without it, does the main model load?
                engine, plain_error = _construct_cb(opts, p, None)
                if engine is not None:
                    reason = (
                        SpeculativeReason.DRAFT_MODEL_LOAD_FAILED
                        if spec.mode == "draft"
                        else SpeculativeReason.NEEDS_CONTINUOUS_BATCHING
                    )
                    problem = (reason, error or "")
                    if opts.speculative.required:
                        engine.stop()
                        _refuse(requested, opts.speculative, problem)
                else:
                    error = plain_error
            if engine is None:
                log.info("ContinuousBatchingPipeline construction failed: %s", error)
                if predicted is None and resolve.classify_error(error or "") == Reason.PAGED_ATTENTION_NOT_SUPPORTED:
                    log.warning("structural check predicted CB support, construction disagreed")
            else:
                opts.phases.compile = time.perf_counter() - t
                log.info("ContinuousBatchingPipeline constructed in %.2fs", opts.phases.compile)
                report = resolve.cb_report(p)
                engine.speculative = speculative.report(opts.speculative, *(problem or (None, "")))
                if problem is None and spec is not None:
                    engine.set_speculation(spec.generation_fields(), spec.counted)
                elif problem is not None:
                    log.warning("serving WITHOUT speculative decoding: %s: %s", problem[0], problem[1])
                _prove(engine, report, requested, opts.phases)
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
    opts.phases.compile = time.perf_counter() - t
    log.info("legacy %s pipeline (SDPA) constructed in %.2fs", p.kind, opts.phases.compile)
    engine = legacy_client(pipe, p.kind)
    legacy_problem = _legacy_problem(opts)
    if legacy_problem is not None and opts.speculative.required:
        _refuse(requested, opts.speculative, legacy_problem)
    engine.speculative = speculative.report(opts.speculative, *(legacy_problem or (None, "")))
    _prove(engine, report, requested, opts.phases)
    engine.observed = observe.observe(probed)
    return engine, report, layout


def _construct_cb(
    opts: LoadOptions, p: resolve.Plan, spec: SpeculativeConfig | None
) -> tuple[EngineClient | None, str]:
    """(engine client, "") or (None, the construction error)."""
    try:
        if opts.engine_process and p.cb_type == PipelineType.LM_CB:
            from .engine.process import ProcessClient

            return ProcessClient(opts.model_path, opts.device, opts.scheduler, opts.properties, p.cb_type, spec), ""
        pipe = construct_cb(opts.model_path, opts.device, opts.scheduler, opts.properties, spec)
        return cb_client(pipe, p.cb_type, max_active=opts.scheduler.effective_max_num_seqs()), ""
    except Exception as exc:
        return None, str(exc).strip()


def _refuse(requested: PipelineType, cfg: SpeculativeConfig, problem: tuple[SpeculativeReason, str]) -> None:
    """`required` speculation cannot run: the serving is refused, naming why."""
    sp = speculative.report(cfg, *problem)
    msg = f"{problem[0]}: {problem[1]}"
    raise LoadFailure(resolve.failed_report(requested, Reason.SPECULATIVE_UNAVAILABLE, msg), sp)


def _legacy_problem(opts: LoadOptions) -> tuple[SpeculativeReason, str] | None:
    if not opts.speculative.on:
        return None
    return (
        SpeculativeReason.NEEDS_CONTINUOUS_BATCHING,
        "speculative decoding runs on the continuous-batching text pipeline (LM_CB); the legacy pipeline serves",
    )


def _speculation(opts: LoadOptions, p: resolve.Plan) -> tuple[SpeculativeConfig | None, tuple | None]:
    """(the speculative config to construct with, or None; the problem that keeps it from running, or None).
    Refuses (LoadFailure) when speculation is required and cannot run."""
    cfg = opts.speculative
    if not cfg.on:
        return None, None
    problem: tuple[SpeculativeReason, str] | None = None
    if p.cb_type != PipelineType.LM_CB:
        problem = (
            SpeculativeReason.NEEDS_CONTINUOUS_BATCHING,
            f"speculative decoding runs on the text pipeline LM_CB; this model resolves to {p.cb_type}",
        )
    else:
        problem = speculative.draft_problem(cfg) or _draft_compatibility(opts)
    if problem is not None and cfg.required:
        _refuse(opts.pipeline_type, cfg, problem)
    return (None if problem else cfg), problem


def _draft_compatibility(opts: LoadOptions) -> tuple[SpeculativeReason, str] | None:
    """A draft that openvino-genai would accept but that cannot speculate for this model: one the
    SDPAToPagedAttention pass refuses, or another tokenizer (openvino-genai 2026.4 does not check it)."""
    cfg = opts.speculative
    if cfg.mode != "draft" or not cfg.draft_path:
        return None
    from .structure import check

    try:
        st = check(Path(cfg.draft_path) / resolve.LM_XML)
    except Exception as exc:
        return SpeculativeReason.DRAFT_MODEL_LOAD_FAILED, str(exc).strip()
    if st.pa_error is not None:
        return SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE, f"the draft cannot run paged: {st.pa_error}"
    import openvino_genai as g

    try:
        main, draft = g.Tokenizer(opts.model_path), g.Tokenizer(cfg.draft_path)
    except Exception as exc:
        return SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE, f"the draft's tokenizer cannot be loaded: {exc}"

    def special(t) -> tuple:
        return (t.get_bos_token_id(), t.get_eos_token_id(), t.get_pad_token_id())

    diff = speculative.tokenizer_difference(main.get_vocab(), draft.get_vocab(), special(main), special(draft))
    if diff:
        return SpeculativeReason.DRAFT_MODEL_INCOMPATIBLE, f"the draft's tokenizer is not the model's: {diff}"
    return None


def _probe(opts: LoadOptions, layout: resolve.Layout) -> observe.Probe | None:
    """The plugin's resolution for this model, device and properties (observe.py); None when it cannot be read
    (the decisions then say unknown; serving does not depend on it)."""
    t = time.perf_counter()
    # the probe's small compiles stay out of the compiled-model cache (startup.py gives CACHE_DIR to pipelines)
    props = {k: v for k, v in {**opts.properties, **opts.scheduler.properties()}.items() if k != "CACHE_DIR"}
    try:
        pr = observe.probe(Path(opts.model_path) / layout.language_xml, opts.device, props)
    except Exception as exc:
        log.warning("could not probe the plugin's settings (%s); the decisions will say unknown", exc)
        return None
    log.info("probe of the plugin's settings in %.0f ms: %s", (time.perf_counter() - t) * 1000, pr)
    return pr


def _prove(
    engine: EngineClient, report: PipelineReport, requested: PipelineType, phases: Phases | None = None
) -> EngineClient:
    t = time.perf_counter()
    engine.start()
    try:
        engine.smoke()
    except EngineError as exc:
        engine.stop()
        msg = resolve.load_failed_message(str(exc))
        raise LoadFailure(resolve.failed_report(requested, Reason.MODEL_LOAD_FAILED, msg)) from exc
    if phases is not None:
        phases.first_token = time.perf_counter() - t
    log.info("smoke generation ok in %.0f ms (%s)", (time.perf_counter() - t) * 1000, report.resolved)
    engine.token_table = TokenTable.build(engine.tokenizer)
    return engine
