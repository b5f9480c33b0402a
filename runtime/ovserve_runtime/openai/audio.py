"""OpenAI's audio API, the pure part: the multipart/form-data body of `POST /v1/audio/transcriptions` and
`/v1/audio/translations` -> a validated request (`AudioRequest`), and a transcript -> each `response_format`
(json, text, srt, vtt, verbose_json) and the stream's events (`transcript.text.delta`, `transcript.text.done`).

Every form field is honoured or refused with 400 naming it (docs/audio.md has the table): `file`, `model`,
`language` (transcriptions only, a language the model's tokenizer has), `prompt` (Whisper's previous-text
prompt), `response_format`, `temperature` (0: greedy; above: sampling at that temperature, without OpenAI's
fallback ladder), `timestamp_granularities[]` (segment; word where the pipeline computes word timestamps; with
verbose_json only, as OpenAI's), `stream` (transcriptions, json or text), `chunking_strategy` ("auto" only: the
pipeline cuts long audio into Whisper's 30 s windows itself). `include[]` (logprobs) and speaker fields are
refused by name; a field this server does not know is refused by name too.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .audio_languages import LANGUAGE_NAMES
from .request import RequestError, error_of

MAX_PARTS = 32  # form parts per request
MAX_FIELD_BYTES = 64 * 1024  # one text field
MAX_PROMPT_CHARS = 4096  # Whisper reads at most 224 prompt tokens; the pipeline keeps the last of them
LIST_FIELDS = ("timestamp_granularities", "include", "known_speaker_names", "known_speaker_references")
REFUSED = {  # fields OpenAI has that change the answer and this server does not compute
    "include": "log probabilities of the transcript (include[]=logprobs) are not computed by this server",
    "known_speaker_names": "speaker diarization is not supported by this server",
    "known_speaker_references": "speaker diarization is not supported by this server",
}

# error.code values of the refusals made here
MISSING_FILE = "missing_file"
INVALID_MULTIPART = "invalid_multipart"
UNSUPPORTED = "unsupported_value"


class Format(StrEnum):
    JSON = "json"
    TEXT = "text"
    SRT = "srt"
    VTT = "vtt"
    VERBOSE_JSON = "verbose_json"


TIMESTAMPED = frozenset({Format.SRT, Format.VTT, Format.VERBOSE_JSON})  # need the pipeline's segments


class TranscriptionForm(BaseModel):
    """The form of /audio/transcriptions and /audio/translations: the `file` part and the text fields (lax: form
    values are strings; "0.2" is a temperature, "true" a bool). A list field is sent as `name[]`, once per item."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: bytes
    model: str | None = None
    language: Annotated[str, Field(min_length=1, max_length=16)] | None = None
    prompt: Annotated[str, Field(max_length=MAX_PROMPT_CHARS)] | None = None
    response_format: Format = Format.JSON
    temperature: Annotated[float, Field(ge=0, le=1)] = 0.0
    timestamp_granularities: list[Literal["word", "segment"]] | None = None
    stream: bool = False
    chunking_strategy: Literal["auto"] | None = None
    include: list[str] | None = None
    known_speaker_names: list[str] | None = None
    known_speaker_references: list[str] | None = None


@dataclass(frozen=True)
class Upload:
    """What the HTTP side hands the transcription service: the body and the header that says how to split it."""

    content_type: str
    body: bytes
    translate: bool  # /translations: into English


@dataclass(frozen=True)
class AudioRequest:
    """A valid request: the file's bytes and what to do with them."""

    filename: str
    translate: bool
    form: TranscriptionForm
    words: bool  # word timestamps asked for

    @property
    def file(self) -> bytes:
        return self.form.file

    # segment timestamps needed: srt and vtt, and verbose_json unless only words were asked for (openvino-genai
    # 2026.4 gives no words in a pass that also times segments, so word-only asks for words alone)
    segments: bool


# ------------------------------------------------------------------------------------------- the form


@dataclass
class _Part:
    headers: dict[str, str] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, list[str]], dict[str, tuple[str, bytes]]]:
    """(text fields by name, each value as sent; file parts by name: (filename, bytes)). Linear in the body
    (python-multipart's streaming parser); RequestError for a body that is not multipart/form-data."""
    from python_multipart.multipart import MultipartParser, parse_options_header

    kind, options = parse_options_header(content_type or "")
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise RequestError(
            "the body must be multipart/form-data (a 'file' part and the other fields as form fields)",
            None,
            INVALID_MULTIPART,
        )
    parts: list[_Part] = []
    header: list[bytes] = [b"", b""]

    def part_begin() -> None:
        if len(parts) >= MAX_PARTS:
            raise RequestError(f"more than {MAX_PARTS} form parts", None, INVALID_MULTIPART)
        parts.append(_Part())

    def header_field(data: bytes, start: int, end: int) -> None:
        header[0] += data[start:end]

    def header_value(data: bytes, start: int, end: int) -> None:
        header[1] += data[start:end]

    def header_end() -> None:
        parts[-1].headers[header[0].decode("latin-1").lower()] = header[1].decode("latin-1")
        header[0], header[1] = b"", b""

    def part_data(data: bytes, start: int, end: int) -> None:
        parts[-1].data += data[start:end]

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": part_begin,
            "on_header_field": header_field,
            "on_header_value": header_value,
            "on_header_end": header_end,
            "on_part_data": part_data,
        },
    )
    try:
        parser.write(body)
        parser.finalize()
    except RequestError:
        raise
    except Exception as exc:  # python-multipart's MultipartParseError and friends
        raise RequestError(f"invalid multipart/form-data body: {exc}", None, INVALID_MULTIPART) from None
    fields: dict[str, list[str]] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for part in parts:
        _, disp = parse_options_header(part.headers.get("content-disposition", ""))
        name = disp.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise RequestError("a form part without a name", None, INVALID_MULTIPART)
        if b"filename" in disp:
            if name in files:
                raise RequestError(f"'{name}' is sent twice", name, INVALID_MULTIPART)
            files[name] = (disp[b"filename"].decode("utf-8", "replace"), bytes(part.data))
            continue
        if len(part.data) > MAX_FIELD_BYTES:
            raise RequestError(f"'{name}' is longer than {MAX_FIELD_BYTES} bytes", name, "field_too_large")
        try:
            value = part.data.decode("utf-8")
        except UnicodeDecodeError:
            raise RequestError(f"'{name}' is not UTF-8 text", name, INVALID_MULTIPART) from None
        fields.setdefault(name, []).append(value)
    return fields, files


def parse(content_type: str, body: bytes, translate: bool, word_timestamps: bool) -> AudioRequest:
    """A valid request, or RequestError naming the field. `word_timestamps`: the pipeline computes them."""
    fields, files = parse_multipart(content_type, body)
    values: dict[str, Any] = {}
    for name, sent in fields.items():
        key = name[:-2] if name.endswith("[]") else name
        if key in LIST_FIELDS:
            values.setdefault(key, []).extend(sent)
        elif len(sent) > 1 or key in values:
            raise RequestError(f"'{key}' is sent more than once", key, INVALID_MULTIPART)
        else:
            values[key] = sent[0]
    for name in files:
        if name != "file":
            raise RequestError(f"Unrecognized request argument supplied: '{name}'", name, "unknown_parameter")
    if "file" not in files:
        raise RequestError("Missing required parameter: 'file' (the audio, as a file part)", "file", MISSING_FILE)
    if "file" in values:
        raise RequestError("'file' must be sent as a file part (with a filename)", "file", INVALID_MULTIPART)
    if "chunking_strategy" in values and values["chunking_strategy"].lstrip().startswith("{"):
        raise RequestError(
            "chunking_strategy server_vad is not supported: the audio is cut into Whisper's 30 s windows "
            "(send 'auto' or nothing)",
            "chunking_strategy",
            UNSUPPORTED,
        )
    filename, values["file"] = files["file"]
    try:
        form = TranscriptionForm.model_validate(values)
    except ValidationError as exc:
        raise error_of(exc) from None
    for name, why in REFUSED.items():
        if getattr(form, name):
            raise RequestError(why, name, UNSUPPORTED)
    if translate:  # OpenAI's translations take no language (the target is English) and do not stream
        for name in ("language", "timestamp_granularities", "stream", "chunking_strategy"):
            if name in values:
                raise RequestError(f"Unrecognized request argument supplied: '{name}'", name, "unknown_parameter")
    grains = set(form.timestamp_granularities or ())
    if grains and form.response_format != Format.VERBOSE_JSON:
        raise RequestError(
            "timestamp_granularities needs response_format verbose_json", "timestamp_granularities", UNSUPPORTED
        )
    if "word" in grains and not word_timestamps:
        raise RequestError(
            "word timestamps are not computed by this serving's pipeline", "timestamp_granularities", UNSUPPORTED
        )
    if form.stream and form.response_format not in (Format.JSON, Format.TEXT):
        raise RequestError(
            f"stream is served with response_format json or text, not {form.response_format}",
            "response_format",
            UNSUPPORTED,
        )
    segments = form.response_format in TIMESTAMPED and grains != {"word"}
    return AudioRequest(filename=filename, translate=translate, form=form, words="word" in grains, segments=segments)


def language_token(language: str, lang_to_id: dict[str, int]) -> str:
    """`language` ("en", "english" or "<|en|>") -> the model's token; RequestError when the model has none."""
    code = language.strip().lower()
    if code.startswith("<|") and code.endswith("|>"):
        code = code[2:-2]
    by_name = {name: c for c, name in LANGUAGE_NAMES.items()}
    code = by_name.get(code, code)
    token = f"<|{code}|>"
    if token not in lang_to_id:
        known = ", ".join(sorted(t[2:-2] for t in lang_to_id)[:12])
        raise RequestError(
            f"language '{language}' is not one this model transcribes (its languages: {known}"
            f"{', ...' if len(lang_to_id) > 12 else ''})",
            "language",
            UNSUPPORTED,
        )
    return token


# ------------------------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Transcript:
    """What the pipeline gave back for one file."""

    text: str
    duration: float  # seconds of audio
    language: str | None = None  # the language token (<|en|>) the pipeline used or detected
    segments: tuple[Segment, ...] = ()
    words: tuple[Word, ...] = ()


def usage(duration: float) -> dict:
    """OpenAI's duration usage of whisper-1 (whole seconds, rounded up)."""
    return {"type": "duration", "seconds": max(1, math.ceil(duration))}


def language_name(token: str | None) -> str | None:
    if not token:
        return None
    code = token.strip("<|>")
    return LANGUAGE_NAMES.get(code, code)


def _clock(t: float, sep: str) -> str:
    ms = max(0, round(t * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt(segments: tuple[Segment, ...]) -> str:
    return "".join(
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n\n" for i, s in enumerate(segments, 1)
    )


def vtt(segments: tuple[Segment, ...]) -> str:
    return "WEBVTT\n\n" + "".join(
        f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n\n" for s in segments
    )


def _compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return round(len(raw) / len(zlib.compress(raw)), 4) if raw else 0.0


def verbose(req: AudioRequest, t: Transcript) -> dict:
    body: dict[str, Any] = {
        "task": "translate" if req.translate else "transcribe",
        "language": language_name(t.language) or "",
        "duration": round(t.duration, 3),
        "text": t.text,
    }
    if req.segments:
        body["segments"] = [
            {
                "id": i,
                "seek": int(s.start * 100),  # frames of 10 ms, as Whisper's
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text,
                "temperature": req.form.temperature,
                "compression_ratio": _compression_ratio(s.text),
            }
            for i, s in enumerate(t.segments)
        ]
    if req.words:
        body["words"] = [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in t.words]
    body["usage"] = usage(t.duration)
    return body


def answer(req: AudioRequest, t: Transcript) -> tuple[str, str | dict]:
    """(content type, body): a dict is JSON; a str is sent as it is."""
    fmt = req.form.response_format
    if fmt == Format.TEXT:
        return "text/plain", t.text + "\n"
    if fmt == Format.SRT:
        return "text/plain", srt(t.segments)
    if fmt == Format.VTT:
        return "text/vtt", vtt(t.segments)
    if fmt == Format.VERBOSE_JSON:
        return "application/json", verbose(req, t)
    return "application/json", {"text": t.text, "usage": usage(t.duration)}


def delta_event(text: str) -> bytes:
    return _event({"type": "transcript.text.delta", "delta": text})


def done_event(t: Transcript) -> bytes:
    return _event({"type": "transcript.text.done", "text": t.text, "usage": usage(t.duration)})


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
