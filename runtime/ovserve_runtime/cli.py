"""ovserve-runtime: serve one OpenVINO GenAI model over an OpenAI-compatible HTTP API.

Every flag has an environment twin OVSERVE_<FLAG_IN_UPPER_SNAKE> (e.g. --max-num-seqs and
OVSERVE_MAX_NUM_SEQS); a flag on the command line wins over the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from .report import PipelineReport, PipelineType, Reason, RuntimeReport, State, Versions

log = logging.getLogger("ovserve.cli")
EXIT_FAILED = 3
FATAL_EXIT_DELAY_S = 1.0  # after a fatal pipeline error: time for open streams to get their error event
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}
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


def _env(name: str) -> str | None:
    return os.environ.get("OVSERVE_" + name.upper().replace("-", "_"))


def _env_bool(name: str) -> bool | None:
    v = _env(name)
    if v is None:
        return None
    if v.strip().lower() in TRUE:
        return True
    if v.strip().lower() in FALSE:
        return False
    raise SystemExit(f"OVSERVE_{name.upper().replace('-', '_')}: not a boolean: {v!r}")


def non_negative(v: str) -> int:
    n = int(v)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _non_negative(v: str) -> float:
    f = float(v)
    if not f >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {v!r}")
    return f


def _stream_interval(v: str) -> float:
    f = _non_negative(v)
    if f > 1000:
        raise argparse.ArgumentTypeError(f"must be at most 1000 ms, got {v!r}")
    return f


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ovserve-runtime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )

    def env_default(name: str, default=None, conv=str):
        v = _env(name)
        if v is None or v == "":
            return default
        try:
            return conv(v)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            p.error(f"OVSERVE_{name.upper()}={v!r}: {exc}")

    g = p.add_argument_group("model")
    g.add_argument(
        "--model-path",
        default=env_default("model_path"),
        help="directory of the exported OpenVINO model (required) [OVSERVE_MODEL_PATH]",
    )
    g.add_argument(
        "--served-name",
        default=env_default("served_name"),
        help="model name clients use in 'model' and /v3/models (default: the directory name) [OVSERVE_SERVED_NAME]",
    )
    g.add_argument(
        "--pipeline-type",
        type=str.upper,
        choices=[t.value for t in PipelineType],
        default=env_default("pipeline_type", "AUTO", str.upper),
        help="AUTO: pick LM/VLM by directory content and prefer continuous batching, falling back to "
        "the legacy pipeline only when PagedAttention is unsupported; LM_CB/VLM_CB: continuous "
        "batching or refuse (never downgraded); LM/VLM: the legacy stateful pipeline with the SDPA "
        "backend (default AUTO) [OVSERVE_PIPELINE_TYPE]",
    )
    g.add_argument(
        "--device",
        type=str.upper,
        default=env_default("device", "CPU", str.upper),
        help="OpenVINO device: CPU or GPU (an Intel GPU; refused with DeviceUnavailable when openvino "
        "does not see one) (default CPU) [OVSERVE_DEVICE]",
    )
    g.add_argument(
        "--inference-threads",
        type=int,
        default=env_default("inference_threads", 0, int),
        help="INFERENCE_NUM_THREADS for the CPU plugin; 0 = openvino's default (all cores) [OVSERVE_INFERENCE_THREADS]",
    )

    s = p.add_argument_group("scheduler (continuous batching pipelines LM_CB/VLM_CB only)")
    s.add_argument(
        "--cache-size-gb",
        type=float,
        default=env_default("cache_size_gb", None, float),
        help="KV-cache size in GB reserved on the device (whole GB; 0 lets openvino-genai size it) "
        "[OVSERVE_CACHE_SIZE_GB]",
    )
    s.add_argument(
        "--max-num-seqs",
        type=int,
        default=env_default("max_num_seqs", None, int),
        help="maximum number of sequences batched together in one step [OVSERVE_MAX_NUM_SEQS]",
    )
    s.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=env_default("max_num_batched_tokens", None, int),
        help="maximum number of tokens processed in one step (prompt chunks + decode tokens) "
        "[OVSERVE_MAX_NUM_BATCHED_TOKENS]",
    )
    s.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("enable_prefix_caching"),
        help="reuse KV-cache blocks of identical prompt prefixes across requests [OVSERVE_ENABLE_PREFIX_CACHING]",
    )
    s.add_argument(
        "--dynamic-split-fuse",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("dynamic_split_fuse"),
        help="split long prompts into chunks and batch them with decode steps (openvino-genai "
        "default: on) [OVSERVE_DYNAMIC_SPLIT_FUSE]",
    )
    s.add_argument(
        "--kv-cache-precision",
        default=env_default("kv_cache_precision"),
        help="KV-cache element type, e.g. u8, f16, f32 (KV_CACHE_PRECISION; default: the plugin's "
        "choice) [OVSERVE_KV_CACHE_PRECISION]",
    )

    s.add_argument(
        "--engine-process",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("engine_process") is not False,
        help="run a text model's ContinuousBatchingPipeline in an engine-core child process, so that "
        "HTTP work overlaps inference (default: on; off: a thread in this process) [OVSERVE_ENGINE_PROCESS]",
    )

    h = p.add_argument_group("server")
    h.add_argument("--host", default=env_default("host", "0.0.0.0"), help="listen address [OVSERVE_HOST]")
    h.add_argument("--port", type=int, default=env_default("port", 8000, int), help="listen port [OVSERVE_PORT]")
    h.add_argument(
        "--termination-log",
        default=env_default("termination_log", "/dev/termination-log"),
        help="file the failure report is written to (Kubernetes termination message); skipped when "
        "not writable [OVSERVE_TERMINATION_LOG]",
    )
    h.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=env_default("max_prompt_tokens", 0, int),
        help="reject prompts longer than this (400); 0 = the model's max position embeddings "
        "[OVSERVE_MAX_PROMPT_TOKENS]",
    )
    h.add_argument(
        "--default-max-tokens",
        type=int,
        default=env_default("default_max_tokens", 512, int),
        help="max_tokens when a request sets none (capped by the context) [OVSERVE_DEFAULT_MAX_TOKENS]",
    )
    h.add_argument(
        "--max-queued-requests",
        type=non_negative,
        default=env_default("max_queued_requests", 256, non_negative),
        help="admission bound: at most this many requests wait while max_num_seqs (one for the legacy "
        "pipeline) generate; beyond it 429 with Retry-After; 0 = no waiting room "
        "[OVSERVE_MAX_QUEUED_REQUESTS]",
    )
    h.add_argument(
        "--max-body-bytes",
        type=int,
        default=env_default("max_body_bytes", 32 * 1024 * 1024, int),
        help="larger request bodies get 413 request_too_large, refused on Content-Length before they "
        "are read (default 32 MiB) [OVSERVE_MAX_BODY_BYTES]",
    )
    h.add_argument(
        "--max-images",
        type=int,
        default=env_default("max_images", 16, int),
        help="image_url parts per request; more get 400 too_many_images (default 16) [OVSERVE_MAX_IMAGES]",
    )
    h.add_argument(
        "--max-image-pixels",
        type=int,
        default=env_default("max_image_pixels", 4096 * 4096, int),
        help="width x height of one image, read from its header before decoding; larger get 413 "
        "image_too_large (default 16777216 = 4096x4096) [OVSERVE_MAX_IMAGE_PIXELS]",
    )
    h.add_argument(
        "--max-decoded-image-bytes",
        type=int,
        default=env_default("max_decoded_image_bytes", 256 * 1024 * 1024, int),
        help="decoded RGB bytes of all the images of one request; beyond, 413 image_too_large "
        "(default 256 MiB) [OVSERVE_MAX_DECODED_IMAGE_BYTES]",
    )
    h.add_argument(
        "--prepare-threads",
        type=int,
        default=env_default("prepare_threads", 0, int),
        help="threads that validate a request body over 16 KiB, apply its chat template and decode its images, off "
        "the event loop; 0 = min(4, CPUs) [OVSERVE_PREPARE_THREADS]",
    )
    h.add_argument(
        "--drain-timeout-seconds",
        type=_non_negative,
        default=env_default("drain_timeout_seconds", 30.0, _non_negative),
        help="on SIGTERM: readiness turns 503 and in-flight requests may finish for up to this long; then "
        "the streams still running end with an error event and the process exits 0 (a second signal "
        "stops waiting) (default 30) [OVSERVE_DRAIN_TIMEOUT_SECONDS]",
    )
    h.add_argument(
        "--stream-interval-ms",
        type=_stream_interval,
        default=env_default("stream_interval_ms", 10.0, _stream_interval),
        help="a stream's text that comes within this long of its last chunk waits and goes out in one chunk at "
        "the end of the interval: fewer writes and client wake-ups when a stream runs faster than 1000/this "
        "tokens per second, nothing held below that; the first token is never held; 0 = a chunk per step "
        "(default 10, at most 1000) [OVSERVE_STREAM_INTERVAL_MS]",
    )
    h.add_argument(
        "--log-level",
        default=env_default("log_level", "INFO", str.upper),
        help="DEBUG, INFO, WARNING, ERROR [OVSERVE_LOG_LEVEL]",
    )
    return p


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
    """The report as the LAST stderr line, and into the termination-message file."""
    line = report.to_line()
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


async def serve(args: argparse.Namespace, served: str) -> tuple[int, RuntimeReport]:
    from aiohttp import web

    from .engine import SchedulerOptions
    from .loader import LoadFailure, LoadOptions, load
    from .server import App, ServerConfig, failed_state

    requested = PipelineType(args.pipeline_type)
    report = RuntimeReport(
        state=State.LOADING,
        model=served,
        device=args.device,
        pipeline=PipelineReport(requested=requested, reason=Reason.LOADING),
        versions=versions(),
    )
    app = App(
        ServerConfig(
            served_name=served,
            max_prompt_tokens=args.max_prompt_tokens,
            default_max_tokens=args.default_max_tokens,
            max_queued_requests=args.max_queued_requests,
            max_body_bytes=args.max_body_bytes,
            max_images=args.max_images,
            max_image_pixels=args.max_image_pixels,
            max_decoded_image_bytes=args.max_decoded_image_bytes,
            prepare_threads=args.prepare_threads,
            drain_timeout_s=args.drain_timeout_seconds,
            stream_interval_s=args.stream_interval_ms / 1000,
        ),
        report,
    )
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

    props = {"INFERENCE_NUM_THREADS": args.inference_threads} if args.inference_threads else {}
    opts = LoadOptions(
        model_path=args.model_path,
        pipeline_type=requested,
        device=args.device,
        properties=props,
        engine_process=args.engine_process,
        scheduler=SchedulerOptions(
            cache_size_gb=args.cache_size_gb,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            enable_prefix_caching=args.enable_prefix_caching,
            dynamic_split_fuse=args.dynamic_split_fuse,
            kv_cache_precision=args.kv_cache_precision,
        ),
    )
    load_task = loop.run_in_executor(None, load, opts)
    stop_task = asyncio.ensure_future(stop.wait())
    await asyncio.wait([load_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
    if not load_task.done():  # stopped while loading
        await runner.cleanup()
        return 0, report
    try:
        engine, pipeline, layout = load_task.result()
    except LoadFailure as f:
        report = report.model_copy(update={"state": State.FAILED, "pipeline": f.report})
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

    engine.on_fatal = on_fatal
    if not engine.in_process:
        _yield_to_engine()
    app.attach(engine, layout.max_position)
    report = report.model_copy(update={"state": State.READY, "pipeline": pipeline})
    app.set_report(report)
    p = report.pipeline
    log.info(
        "ready: requested=%s resolved=%s continuousBatching=%s fallback=%s reason=%s",
        p.requested,
        p.resolved,
        p.continuousBatching,
        p.fallback,
        p.reason,
    )
    if p.fallback:
        log.warning("FALLBACK to the legacy pipeline: %s: %s", p.reason, p.message)
    await stop_task
    if exit_code == 0:  # SIGTERM: drain (drain.py); after a fatal error every request is already answered
        await app.drain.run(lambda: runner.server.connections if runner.server else [])
    log.info("shutting down")
    await runner.cleanup()
    engine.stop()
    return exit_code, app.report


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
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level, logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.model_path:
        report = RuntimeReport(
            state=State.FAILED,
            device=args.device,
            pipeline=PipelineReport(
                requested=PipelineType(args.pipeline_type),
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
