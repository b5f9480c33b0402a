"""Which field of OpenAI's audio API each endpoint honours or refuses: the registry of the docs table (docs/audio.md,
`python -m ovserve_runtime.openai.audio_support --write docs/audio.md`) and of the table test that every field of
the form model (openai/audio.py `TranscriptionForm`) is in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import docblock
from .audio import TranscriptionForm
from .support import H, R


@dataclass(frozen=True)
class AudioField:
    name: str  # the form field (a list field is sent as name[])
    transcriptions: str
    translations: str
    note: str = ""


FIELDS: tuple[AudioField, ...] = (
    AudioField(
        "file",
        H,
        H,
        "wav, flac, mp3, ogg (vorbis, opus), aiff, caf: decoded by libsndfile, resampled to 16 kHz mono (libsoxr); "
        "m4a/mp4 and webm: 400 unsupported_audio_format; over --max-audio-seconds or --audio-decode-timeout-seconds, "
        "empty or corrupt: 400 naming `file`; long audio runs in Whisper's 30 s windows",
    ),
    AudioField("model", H, H, "must be the served name (404 otherwise); may be omitted"),
    AudioField(
        "language",
        H,
        R,
        "ISO 639-1 code or Whisper's language name (en, english); one the model lacks: 400; "
        "translations: 400 unknown_parameter, as OpenAI answers",
    ),
    AudioField("prompt", H, H, "Whisper's previous-text prompt (initial_prompt)"),
    AudioField(
        "response_format",
        H,
        H,
        "json, text, srt, vtt, verbose_json (segments; no avg_logprob, no_speech_prob, tokens: the pipeline "
        "does not give them)",
    ),
    AudioField(
        "temperature",
        H,
        H,
        "0 (default): greedy; above: sampling at that temperature, without OpenAI's fallback ladder",
    ),
    AudioField(
        "timestamp_granularities",
        H,
        R,
        "with verbose_json only; segment (default), word (the pipeline's word timestamps; word alone gives words "
        "and no segments); a model without word timestamps: 400",
    ),
    AudioField(
        "stream",
        H,
        R,
        "transcript.text.delta events as the pipeline decodes, then transcript.text.done with usage; json and "
        "text only (srt, vtt, verbose_json: 400 naming response_format)",
    ),
    AudioField("chunking_strategy", H, R, "auto only (30 s windows); server_vad: 400"),
    AudioField("include", R, R, "logprobs are not computed: 400"),
    AudioField("known_speaker_names, known_speaker_references", R, R, "no diarization: 400"),
    AudioField("any other field", R, R, "400 unknown_parameter"),
)


def covered() -> set[str]:
    return {n.strip() for f in FIELDS for n in f.name.split(",") if f.name != "any other field"}


def request_fields() -> set[str]:
    return set(TranscriptionForm.model_fields)


def _rows():
    for f in FIELDS:
        name = ", ".join(f"`{n.strip()}`" for n in f.name.split(",")) if f.name != "any other field" else f.name
        yield (name, f.transcriptions, f.translations, f.note)


DOCS = docblock.Block(
    "audio-fields",
    "ovserve_runtime.openai.audio_support",
    "docs/audio.md",
    ("field", "transcriptions", "translations", "note"),
    _rows,
)

if __name__ == "__main__":
    raise SystemExit(DOCS.main())
