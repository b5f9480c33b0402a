"""Tasks other than text generation (embeddings, rerank, transcription) and the task resolution of every serving.

The server hooks in at two places: its routes (`TASK_ROUTES`, `EXTRA_RERANK_PATHS`, each answered by a
serving.TaskServing; `AUDIO_ROUTES`, by a serving.AudioServing), and `load_serving` instead of the generation
loader (it resolves the task, then loads the generation pipeline through loader.load or a task pipeline here);
the loaded service (`Loaded.service`: its `prepare`, and `respond` but for audio) is attached to its serving
once loaded.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .. import resolve as pipeline_resolve
from ..engine import EngineError
from ..flags import RuntimeFlags
from ..loader import LoadFailure, LoadOptions, available_devices, load
from ..report import EmbeddingsReport, PipelineReport, Reason, Task, TaskPipeline, TaskReport
from .facts import read_facts
from .resolve import TaskFailure, resolve_task

log = logging.getLogger("ovserve.tasks")

TASK_ROUTES = {Task.EMBEDDINGS: "embeddings", Task.RERANK: "rerank"}  # path under each API prefix
EXTRA_RERANK_PATHS = ("/v2/rerank",)  # Cohere's v2 client
AUDIO_ROUTES = {"audio/transcriptions": False, "audio/translations": True}  # path under each prefix -> translate


class TaskLoadFailure(LoadFailure):
    def __init__(self, report: PipelineReport, task: TaskReport) -> None:
        super().__init__(report)
        self.task = task


@dataclass
class Loaded:
    engine: Any
    pipeline: PipelineReport
    max_position: int | None
    task: TaskReport
    embeddings: EmbeddingsReport | None = None
    service: Any = None  # embeddings.Embeddings | rerank.Rerank | transcription.Transcription


def _failed(flags: RuntimeFlags, task: TaskReport, reason: Reason, message: str) -> TaskLoadFailure:
    return TaskLoadFailure(pipeline_resolve.failed_report(flags.pipeline_type, reason, message), task)


def _encoder_properties(opts: LoadOptions) -> dict:
    return opts.properties if opts.encoder_properties is None else opts.encoder_properties


def load_serving(opts: LoadOptions, flags: RuntimeFlags, served_name: str) -> Loaded:
    """Resolve the task, then load its pipeline and prove it with a smoke call; TaskLoadFailure otherwise."""
    facts = read_facts(opts.model_path)
    decided = resolve_task(flags.task, flags.pipeline_type, facts)
    if isinstance(decided, TaskFailure):
        raise _failed(flags, TaskReport(requested=flags.task), decided.reason, decided.message)
    task = TaskReport(requested=flags.task, resolved=decided.task, source=decided.source)
    log.info("task %s (%s)", decided.task, decided.source)
    if decided.task == Task.TEXT_GENERATION:
        try:
            engine, pipeline, layout = load(opts)
        except LoadFailure as f:
            failure = TaskLoadFailure(f.report, task)
            failure.speculative = f.speculative
            raise failure from f
        return Loaded(engine, pipeline, layout.max_position, task)

    layout = pipeline_resolve.inspect_dir(opts.model_path)
    if not layout.exists:
        raise _failed(flags, task, Reason.MODEL_NOT_FOUND, "model directory does not exist")
    speech = decided.task == Task.TRANSCRIPTION
    if not speech and not layout.has_lm:
        raise _failed(
            flags, task, Reason.MODEL_NOT_FOUND, f"no OpenVINO model in the directory: {pipeline_resolve.LM_XML}"
        )
    devices = available_devices()
    if not pipeline_resolve.device_available(opts.device, devices):
        raise _failed(
            flags,
            task,
            Reason.DEVICE_UNAVAILABLE,
            f"device {opts.device} is not available on this machine (openvino sees: {', '.join(devices) or 'none'})",
        )
    limits = [x for x in (flags.max_prompt_tokens, layout.max_position) if x]
    limit = min(limits) if limits else None
    t = time.perf_counter()
    embeddings_report = None
    detail = ""
    try:
        if speech:
            from . import transcription

            service = transcription.load(flags, served_name, _encoder_properties(opts))
            resolved = TaskPipeline.WHISPER
            detail = f" (word timestamps: {'on' if service.word_timestamps else 'off, the model does not allow them'})"
        elif decided.task == Task.EMBEDDINGS:
            from . import embeddings

            try:
                service: Any = embeddings.load(flags, served_name, limit, _encoder_properties(opts))
            except embeddings.TaskFailureError as exc:
                raise _failed(flags, task, exc.failure.reason, exc.failure.message) from exc
            embeddings_report = service.report
            resolved = TaskPipeline.TEXT_EMBEDDING
        else:
            from . import rerank

            service = rerank.load(flags, served_name, limit, _encoder_properties(opts))
            resolved = TaskPipeline.TEXT_RERANK
    except TaskLoadFailure:
        raise
    except Exception as exc:
        raise _failed(flags, task, Reason.MODEL_LOAD_FAILED, str(exc).strip()) from exc
    opts.phases.compile = time.perf_counter() - t
    t_first = time.perf_counter()
    engine = service.engine
    engine.start()
    try:
        engine.smoke()
    except EngineError as exc:
        engine.stop()
        raise _failed(flags, task, Reason.MODEL_LOAD_FAILED, str(exc)) from exc
    opts.phases.first_token = time.perf_counter() - t_first
    log.info("%s pipeline constructed and proven in %.2fs", resolved, time.perf_counter() - t)
    pipeline = PipelineReport(
        requested=flags.pipeline_type,
        resolved=resolved,
        reason=Reason.TASK_PIPELINE,
        message=f"task {decided.task} runs openvino_genai.{resolved}Pipeline{detail}; pipelineType applies to text "
        "generation only",
    )
    return Loaded(engine, pipeline, layout.max_position, task, embeddings_report, service)
