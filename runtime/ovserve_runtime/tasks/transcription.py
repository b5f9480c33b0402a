"""Transcription: speech to text over openvino_genai.WhisperPipeline, behind OpenAI's audio API
(`/v1/audio/transcriptions`, `/v1/audio/translations`; the form and the answers: openai/audio.py).

`prepare` (a worker thread of the server's pool, never the event loop) parses the form, checks `model`, decodes
the file (audio.py: bounded size, duration and time; 16 kHz mono) and turns the fields into the pipeline's
generation settings; the job then goes through the task engine (tasks/worker.py): one pipeline, one thread, one
file per call (WhisperPipeline takes one audio per generate; it cuts audio longer than 30 s into Whisper's
windows itself, and gives segment timestamps across them). The pipeline's streamer callback sees the text as it
is decoded: it counts progress for the liveness watchdog, hands a streamed request its deltas, and stops the
generation when the request was cancelled (client gone, drain deadline).

Word timestamps: the pipeline is built with word_timestamps=True (it rewrites the decoder's cross-attention to
read the alignment heads' weights); a model where that fails is loaded without, and a request for word
timestamps is then refused by name. Which one ran is in the report's pipeline message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import audio
from ..openai import audio as api
from ..openai.errors import ApiError, unknown_model
from ..openai.request import RequestError
from .worker import Job, TaskEngine

log = logging.getLogger("ovserve.tasks")

SMOKE_SECONDS = 1.0
SMOKE_TOKENS = 4  # the smoke call proves the pipeline, it does not need a transcript
ENGLISH = {"<|en|>": 0}  # what an English-only model understands of `language`


@dataclass
class Context:
    request: api.AudioRequest
    audio: audio.Audio


@dataclass(frozen=True)
class Done:
    """A call's result: the transcript and the pipeline's time on it (the real-time factor's numerator)."""

    transcript: api.Transcript
    compute_s: float


class Transcription:
    def __init__(self, engine: TaskEngine, pipeline: Any, served_name: str, limits: audio.Limits, words: bool) -> None:
        self.engine = engine
        self.served_name = served_name
        self.limits = limits
        self.word_timestamps = words  # the pipeline was built to compute them
        config = pipeline.get_generation_config()
        self.lang_to_id = dict(config.lang_to_id or {})
        self.multilingual = bool(config.is_multilingual)

    def prepare(self, upload: api.Upload) -> tuple[Job, Context]:
        req = api.parse(upload.content_type, upload.body, upload.translate, self.word_timestamps)
        if req.form.model is not None and req.form.model != self.served_name:
            raise unknown_model(req.form.model, self.served_name)
        options: dict[str, Any] = {}
        if self.multilingual:
            options["task"] = "translate" if req.translate else "transcribe"
            if req.form.language is not None:
                options["language"] = api.language_token(req.form.language, self.lang_to_id)
        elif req.translate:  # an English-only Whisper has no task tokens: it neither translates nor takes a language
            raise RequestError("this model is English-only: it does not translate", "file", api.UNSUPPORTED)
        elif req.form.language is not None:
            api.language_token(req.form.language, ENGLISH)  # en or english: nothing to ask; another: 400
        if req.form.prompt:
            options["initial_prompt"] = req.form.prompt
        if req.form.temperature > 0:
            options["do_sample"] = True
            options["temperature"] = req.form.temperature
        if req.segments:
            options["return_timestamps"] = True
        if req.words:
            options["word_timestamps"] = True
        try:
            decoded = audio.decode(req.file, self.limits)
        except audio.AudioError as exc:
            raise ApiError(400, exc.message, param="file", code=exc.code) from None
        job = Job(texts=[req.filename], extra={"audio": decoded.samples, "options": options, "stream": req.form.stream})
        return job, Context(request=req, audio=decoded)


def _transcript(result: Any, seconds: float, language: str | None) -> api.Transcript:
    def clamp(t: float) -> float:  # a model's timestamp past the end of the audio (the pipeline passes it on)
        return min(max(0.0, float(t)), seconds)

    segments = tuple(api.Segment(clamp(c.start_ts), clamp(c.end_ts), c.text) for c in (result.chunks or ()))
    words = tuple(api.Word(w.word, clamp(w.start_ts), clamp(w.end_ts)) for w in (result.words or ()))
    detected = getattr(result, "language", None) or language
    return api.Transcript(
        text=result.texts[0] if result.texts else "",
        duration=seconds,
        language=detected,
        segments=segments,
        words=words,
    )


def make_engine(pipeline: Any) -> TaskEngine:
    """One file per call; the streamer counts progress, streams deltas and stops a cancelled request."""

    def generate(job: Job) -> Done:
        loop, events, stream = job.loop, job.events, job.extra.get("stream", False)

        def streamer(text: str) -> bool:
            job.generated += 1
            if stream and text and loop is not None and events is not None and not job.finished:
                try:
                    loop.call_soon_threadsafe(events.put_nowait, ("delta", text))
                except RuntimeError:
                    return True  # the loop is closed: nobody reads
            return job.cancelled  # True stops the generation

        samples = job.extra["audio"]
        options = job.extra["options"]
        t = time.perf_counter()
        result = pipeline.generate(samples, streamer=streamer, **options)
        seconds = len(samples) / audio.SAMPLE_RATE
        return Done(_transcript(result, seconds, options.get("language")), time.perf_counter() - t)

    def run(jobs: Sequence[Job]) -> list[Any]:
        return [generate(j) for j in jobs]

    silence = np.zeros(int(SMOKE_SECONDS * audio.SAMPLE_RATE), dtype=np.float32)
    smoke = Job(texts=["smoke"], extra={"audio": silence, "options": {"max_new_tokens": SMOKE_TOKENS}})
    return TaskEngine("transcription", run, pipeline.get_tokenizer(), max_batch=1, batch_jobs=False, smoke=smoke)


def construct(model_path: str, device: str, properties: dict) -> tuple[Any, bool]:
    """(the pipeline, whether it computes word timestamps): with them when the model allows, else without."""
    import openvino_genai as g

    try:
        return g.WhisperPipeline(model_path, device, word_timestamps=True, **properties), True
    except Exception as exc:
        log.warning("WhisperPipeline with word timestamps failed (%s); loading it without", str(exc).strip()[:300])
    return g.WhisperPipeline(model_path, device, **properties), False


def load(flags: Any, served_name: str, properties: dict) -> Transcription:
    pipeline, words = construct(flags.model_path, flags.device, properties)
    limits = audio.Limits(max_seconds=flags.max_audio_seconds, decode_timeout_s=flags.audio_decode_timeout_seconds)
    return Transcription(make_engine(pipeline), pipeline, served_name, limits, words)
