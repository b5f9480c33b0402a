"""ovserve-runtime: serve one OpenVINO GenAI model over an OpenAI-compatible HTTP API.

Every flag has an environment twin OVSERVE_<FLAG_IN_UPPER_SNAKE> (e.g. --max-num-seqs and
OVSERVE_MAX_NUM_SEQS); a flag on the command line wins, an empty variable counts as unset.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from . import decisions, isa, memguard, startup, tuning
from .engine import pages
from .flags import RuntimeFlags, add_arguments, from_sources
from .openai import assistant, thinking
from .report import (
    TERMINATION_MESSAGE_LIMIT,
    PipelineReport,
    Reason,
    RuntimeReport,
    SpeculativeMode,
    State,
    Task,
    TaskReport,
    Versions,
)
from .sources import ConfigError
from .speculative import SpeculativeConfig

log = logging.getLogger("ovserve.cli")
EXIT_FAILED = 3
FATAL_EXIT_DELAY_S = 1.0  # after a fatal pipeline error: time for open streams to get their error event
EPILOG = """\
pipeline resolution:
  AUTO    VLM when the directory holds openvino_text_embeddings_model.xml and
          openvino_vision_embeddings_model.bin, else LM; the continuous-batching pipeline
          (PagedAttention requested explicitly) is tried first; only when the model cannot use
          PagedAttention is the legacy SDPA pipeline loaded, reported as fallback=true,
          reason=PagedAttentionNotSupported
  LM_CB / VLM_CB   continuous batching or refuse (exit 3); never downgraded
  LM / VLM         the legacy stateful pipeline with ATTENTION_BACKEND=SDPA
On any failure the runtime report (JSON) is the last stderr line and is written to --termination-log,
and the process exits 3 (also when the pipeline breaks while serving: every open request gets an error
first).

endpoints: /v3/chat/completions /v3/completions /v3/models (and /v1/...), /v1/status,
/v2/health/live, /v2/health/ready, /metrics
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ovserve-runtime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    add_arguments(p)
    return p


def parse_flags(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> RuntimeFlags:
    """The command line over the OVSERVE_* environment, validated; a refused value is a usage error (exit 2)."""
    parser = build_parser()
    given = vars(parser.parse_args(argv))
    try:
        return from_sources(given, os.environ if environ is None else environ)
    except ConfigError as exc:
        parser.error(str(exc))


def versions() -> Versions:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for key, dist in (("openvino", "openvino"), ("openvinoGenai", "openvino-genai")):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = ""
    return Versions(**out)


def write_failure(report: RuntimeReport, termination_log: str | None) -> None:
    """The report as the LAST stderr line, and into the termination-message file (trimmed to what the kubelet
    keeps, the newline included: a longer message would be cut and never parse)."""
    line = report.to_line(limit=TERMINATION_MESSAGE_LIMIT - 1)
    logging.shutdown()
    if termination_log:
        try:
            Path(termination_log).write_text(line + "\n")
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _detach_signals() -> None:
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


async def serve(args: RuntimeFlags, served: str) -> tuple[int, RuntimeReport]:
    from aiohttp import web

    from . import tasks
    from .engine import SchedulerOptions
    from .http import App, ServerConfig, failed_state
    from .loader import LoadFailure, LoadOptions

    requested = args.pipeline_type
    report = RuntimeReport(
        state=State.LOADING,
        model=served,
        device=args.device,
        pipeline=PipelineReport(requested=requested, reason=Reason.LOADING),
        versions=versions(),
        task=TaskReport(requested=args.task),
    )
    app = App(ServerConfig.from_flags(args, served), report)
    # shutdown_timeout: what cleanup still waits for handlers after the drain (which has its own bound)
    runner = web.AppRunner(app.web, handler_cancellation=True, access_log=None, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    log.info("listening on %s:%d (loading %s)", args.host, args.port, args.model_path)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # A child forked by a library (openvino's telemetry sender does this at import) would share asyncio's
    # signal wakeup socket: a SIGTERM sent to the child would stop this server. Children get their own.
    os.register_at_fork(after_in_child=_detach_signals)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    tuned = tuning.choose(isa.detect(), args.device, args.model_dump(include=set(tuning.SETTINGS)))
    if tuned.chosen:
        log.info("engine defaults for %s: %s", tuned.isa.describe(), tuned.updates())
    run_args = args.model_copy(update=tuned.updates())  # what the engine runs with; `args` stays what was asked
    props = plugin_properties(run_args)
    opts = LoadOptions(
        speculative=speculative_config(args, props),
        model_path=args.model_path,
        pipeline_type=requested,
        device=args.device,
        properties=props,
        encoder_properties=plugin_properties(args),
        engine_process=args.engine_process,
        scheduler=SchedulerOptions(
            **run_args.model_dump(include={f.name for f in dataclasses.fields(SchedulerOptions)})
        ),
    )
    load_task = loop.run_in_executor(None, startup.load, opts, args, report.versions, tasks.load_serving, args, served)
    stop_task = asyncio.ensure_future(stop.wait())
    await asyncio.wait([load_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
    if not load_task.done():  # stopped while loading
        await runner.cleanup()
        return 0, report
    try:
        loaded, started = load_task.result()
    except LoadFailure as f:
        task = getattr(f, "task", report.task)
        update = {"state": State.FAILED, "pipeline": f.report, "task": task}
        if getattr(f, "speculative", None) is not None:
            update["speculative"] = f.speculative
        report = report.model_copy(update=update)
        app.set_report(report)
        await runner.cleanup()
        return EXIT_FAILED, report
    except Exception as exc:  # unexpected: still a truthful report
        log.exception("loading failed")
        pipe = PipelineReport(requested=requested, reason=Reason.MODEL_LOAD_FAILED, message=str(exc))
        report = report.model_copy(update={"state": State.FAILED, "pipeline": pipe})
        await runner.cleanup()
        return EXIT_FAILED, report

    exit_code = 0

    def on_fatal(message: str) -> None:
        """From the engine's thread: report failed, end every request, exit 3 a moment later (handlers
        write their error events first) so that the kubelet restarts the container and the operator reads
        the report from the termination message."""

        def apply() -> None:
            nonlocal exit_code
            app.set_report(failed_state(app.report, message))
            app.fail(message)
            log.error("pipeline failed while serving: %s; exiting", message)
            exit_code = EXIT_FAILED
            loop.call_later(FATAL_EXIT_DELAY_S, stop.set)

        loop.call_soon_threadsafe(apply)

    engine, pipeline = loaded.engine, loaded.pipeline
    engine.on_fatal = on_fatal
    if not engine.in_process:
        _yield_to_engine()
    app.attach(engine, loaded.max_position)
    app.attach_service(loaded.task.resolved, engine, loaded.service)  # embeddings, rerank: prepare and respond
    speculative = getattr(engine, "speculative", None) or report.speculative
    record = decisions.record(
        asked(args),
        getattr(engine, "observed", None) or decisions.Observed(),
        report.versions,
        max_position=loaded.max_position,
        speculative=speculative,
        # the rows are measured on text generation: an embeddings or rerank serving runs as asked (its CPU noted)
        tuning=tuned if loaded.task.resolved == Task.TEXT_GENERATION else tuning.Tuning(tuned.isa, tuned.device),
    )
    if loaded.task.resolved == Task.TEXT_GENERATION:  # embeddings and rerank read no tool calls
        record = record.model_copy(update=assistant.decisions(app.parsers))
        record = record.model_copy(update=thinking.decision(app.state.template_kwargs, app.parsers.thinking_switch))
    update = {
        "state": State.READY,
        "pipeline": pipeline,
        "speculative": speculative,
        "decisions": record,
        "task": loaded.task,
        "embeddings": loaded.embeddings,
        "capabilities": app.capabilities().model_copy(update={"task": loaded.task.resolved}),
        "startup": started.model_copy(update={"totalSeconds": startup.process_age_s()}),
    }
    report = report.model_copy(update=update)
    app.set_report(report)
    p = report.pipeline
    log.info(
        "ready: task=%s requested=%s resolved=%s continuousBatching=%s fallback=%s reason=%s",
        report.task.resolved,
        p.requested,
        p.resolved,
        p.continuousBatching,
        p.fallback,
        p.reason,
    )
    if p.fallback:
        log.warning("FALLBACK to the legacy pipeline: %s: %s", p.reason, p.message)
    log.info(
        "decisions: %s",
        "; ".join(f"{k}={d.value} ({d.source.value})" for k, d in record.items()),
    )
    pages.trim_heap()  # what loading freed (the probe's IR, the tokenizer's compile) goes back to the system
    guard_task = _start_memory_guard(args, engine, stop) if not engine.in_process else None
    await stop_task
    if guard_task is not None:
        guard_task.cancel()
    if exit_code == 0:  # SIGTERM: drain (drain.py); after a fatal error every request is already answered
        await app.drain.run(lambda: runner.server.connections if runner.server else [])
    log.info("shutting down")
    await runner.cleanup()
    engine.stop()
    return exit_code, app.report


GUARD_PERIOD_S = 5.0


def _start_memory_guard(args: RuntimeFlags, engine, stop: asyncio.Event) -> asyncio.Task | None:
    """Watch the engine process's growth (memguard.py); past the budget, recycle as on SIGTERM."""
    proc = getattr(engine, "proc", None)
    if not args.engine_memory_growth_bytes or proc is None or proc.pid is None:
        return None
    pid = proc.pid
    guard = memguard.Guard(args.engine_memory_growth_bytes)
    engine_rss = memguard.rss_bytes(pid)
    own = memguard.rss_bytes(os.getpid())
    pod = engine_rss + own if engine_rss is not None and own is not None else None
    guard.start(engine_rss, engine.cache_bytes(), pod, memguard.cgroup_limit())
    log.info("engine memory guard: %d MiB of growth allowed", guard.budget >> 20)

    async def watch() -> None:
        while not stop.is_set():
            await asyncio.sleep(GUARD_PERIOD_S)
            why = guard.check(memguard.rss_bytes(pid), engine.cache_bytes())
            if why:
                log.warning("%s", why)
                stop.set()
                return

    return asyncio.ensure_future(watch())


def plugin_properties(args: RuntimeFlags) -> dict:
    """The plugin properties the flags set (the scheduler's KV-cache precision goes with the scheduler)."""
    props: dict = {"INFERENCE_NUM_THREADS": args.inference_threads} if args.inference_threads else {}
    if args.inference_precision and args.inference_precision != "AUTO":
        props["INFERENCE_PRECISION_HINT"] = args.inference_precision
    if args.dynamic_quantization_group_size is not None and tuning.on_cpu(args.device):
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = args.dynamic_quantization_group_size
    return props


def speculative_config(args: RuntimeFlags, props: dict) -> SpeculativeConfig:
    """The speculative mode the flags ask for; the draft runs with the main model's threads and precision."""
    if args.draft_model_path:
        mode = SpeculativeMode.DRAFT
    elif args.prompt_lookup:
        mode = SpeculativeMode.PROMPT_LOOKUP
    else:
        return SpeculativeConfig()
    return SpeculativeConfig(
        mode=mode,
        draft_path=args.draft_model_path,
        draft_device=args.draft_device,
        num_assistant_tokens=args.num_assistant_tokens,
        assistant_confidence_threshold=args.assistant_confidence_threshold,
        max_ngram_size=args.max_ngram_size,
        required=args.speculative_required,
        draft_properties=tuple(sorted(props.items())),
    )


def asked(args: RuntimeFlags) -> decisions.Asked:
    """What the flags ask for, as the decision record compares it with what runs."""
    kv = args.kv_cache_precision
    return decisions.Asked(
        device=args.device,
        kv_cache_precision=None if not kv or kv.upper() == "AUTO" else kv,
        inference_threads=args.inference_threads or None,
        cache_size_gb=args.cache_size_gb,
        enable_prefix_caching=args.enable_prefix_caching,
        dynamic_split_fuse=args.dynamic_split_fuse,
        max_prompt_tokens=args.max_prompt_tokens or None,
        inference_precision=None if args.inference_precision in (None, "AUTO") else args.inference_precision,
        cache_eviction=opts_eviction(args),
        sparse_attention=args.sparse_attention,
        dynamic_quantization_group_size=args.dynamic_quantization_group_size,
    )


def opts_eviction(args: RuntimeFlags) -> str | None:
    from .engine import SchedulerOptions

    names = {f.name for f in dataclasses.fields(SchedulerOptions)}
    return SchedulerOptions(**args.model_dump(include=names)).eviction_text()


def _yield_to_engine() -> None:
    """The event loop's thread, and every thread it starts from now on (the request pool, the encoder), run
    SCHED_BATCH: their wake-ups do not preempt the engine process's step loop. Each step's pipe write wakes the
    loop, and under SCHED_OTHER that wake-up took the engine's core on a busy machine (a 50 us write took
    330 us median at 16 streams on 2 cores): tiny-llm HTTP/raw 0.54 -> 0.70 at 16 streams, 0.62 -> 0.67 at 64,
    no change on tiny-bench. Unprivileged (no capability; the thread's nice value is kept)."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError) as exc:  # not Linux, or refused by a seccomp profile: only slower
        log.info("HTTP threads stay SCHED_OTHER (SCHED_BATCH refused: %s)", exc)
    else:
        log.info("HTTP threads: SCHED_BATCH (their wake-ups do not preempt the engine process)")


def main(argv: list[str] | None = None) -> int:
    args = parse_flags(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.model_path:
        report = RuntimeReport(
            state=State.FAILED,
            device=args.device,
            pipeline=PipelineReport(
                requested=args.pipeline_type,
                reason=Reason.MODEL_NOT_FOUND,
                message="--model-path (OVSERVE_MODEL_PATH) is required",
            ),
            versions=versions(),
        )
        write_failure(report, args.termination_log)
        return EXIT_FAILED
    served = args.served_name or Path(args.model_path.rstrip("/")).name or "model"
    code, report = asyncio.run(serve(args, served))
    if code != 0:
        write_failure(report, args.termination_log)
        os._exit(code)  # nothing may write to stderr after the report line
    return code


if __name__ == "__main__":
    sys.exit(main())
