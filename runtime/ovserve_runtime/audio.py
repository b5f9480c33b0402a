"""Audio input of the transcription task: an uploaded file's bytes -> float32 samples at 16 kHz mono, the input
openvino-genai's WhisperPipeline takes.

Decoding is libsndfile's (the `soundfile` wheel bundles it: WAV and the other PCM containers, FLAC, Ogg Vorbis,
Ogg Opus, MP3), resampling is libsoxr's (`soxr`, its high-quality setting), both C libraries a few MB in all
(no FFmpeg, no torch). MP4/M4A, WebM and the other containers libsndfile does not read are refused by name.

What a client controls is bounded (DESIGN.md, "Runtime guarantees"): the upload's size (the server's body limit),
the channels and rate the header declares, the duration (from the header before any sample is decoded, and again
while decoding, since an MP3's header only estimates it), and the decoding time (checked between blocks of a
second of audio). Every refusal is an AudioError that names what was wrong; the caller answers 400 naming `file`.
Runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000  # what Whisper's feature extractor expects
MAX_CHANNELS = 8
MIN_RATE, MAX_RATE = 1_000, 384_000  # header sample rates outside these are taken for a hostile file
BLOCK_SECONDS = 1.0  # decoded per read; the deadline is checked between reads

# refusal codes (error.code of the 400)
INVALID_AUDIO = "invalid_audio"  # not a file libsndfile can decode, or corrupt
UNSUPPORTED_FORMAT = "unsupported_audio_format"  # a container we recognise but do not decode (m4a, webm)
AUDIO_TOO_LONG = "audio_too_long"
DECODE_TIMEOUT = "audio_decode_timeout"
EMPTY_AUDIO = "empty_audio"

SUPPORTED = "wav, flac, mp3, ogg (vorbis, opus), aiff, au/snd, caf, w64"


class AudioError(Exception):
    """A file that is refused: `message` for the client, `code` for the error body and the refusal metric."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message, self.code = message, code


@dataclass(frozen=True)
class Limits:
    max_seconds: float  # --max-audio-seconds
    decode_timeout_s: float  # --audio-decode-timeout-seconds


@dataclass(frozen=True)
class Audio:
    samples: np.ndarray  # float32, mono, SAMPLE_RATE
    source_format: str  # libsndfile's format name (WAV, MP3, OGG, ...)
    source_rate: int
    channels: int

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def _container(data: bytes) -> str | None:
    """A container libsndfile does not read, recognised by its magic bytes (for a useful refusal)."""
    if data[4:8] == b"ftyp":
        return "MP4/M4A"
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return "Matroska/WebM"
    return None


def decode(data: bytes, limits: Limits) -> Audio:
    """The file's audio at 16 kHz mono, float32 in [-1, 1]; AudioError when it cannot or may not be decoded."""
    import soundfile as sf

    if not data:
        raise AudioError("the file is empty", EMPTY_AUDIO)
    other = _container(data)
    if other is not None:
        raise AudioError(f"{other} audio is not supported; send one of: {SUPPORTED}", UNSUPPORTED_FORMAT)
    deadline = time.monotonic() + limits.decode_timeout_s
    try:
        f = sf.SoundFile(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise AudioError(
            f"the file is not audio this server decodes ({_why(exc)}); send one of: {SUPPORTED}", INVALID_AUDIO
        ) from None
    with f:
        rate, channels = int(f.samplerate), int(f.channels)
        if not MIN_RATE <= rate <= MAX_RATE or not 1 <= channels <= MAX_CHANNELS:
            raise AudioError(f"implausible audio header: {channels} channels at {rate} Hz", INVALID_AUDIO)
        max_frames = int(limits.max_seconds * rate)
        if f.frames > max_frames:
            raise AudioError(_too_long(f.frames / rate, limits.max_seconds), AUDIO_TOO_LONG)
        block = max(1, int(BLOCK_SECONDS * rate))
        parts: list[np.ndarray] = []
        total = 0
        try:
            while True:
                chunk = f.read(block, dtype="float32", always_2d=True)
                if not len(chunk):
                    break
                parts.append(chunk.mean(axis=1, dtype=np.float32) if channels > 1 else chunk[:, 0].copy())
                total += len(chunk)
                if total > max_frames:
                    raise AudioError(_too_long(total / rate, limits.max_seconds), AUDIO_TOO_LONG)
                if time.monotonic() > deadline:
                    raise AudioError(f"decoding the file took longer than {limits.decode_timeout_s:g}s", DECODE_TIMEOUT)
        except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
            raise AudioError(f"the file is corrupt ({_why(exc)})", INVALID_AUDIO) from None
        fmt = str(f.format)
    if not total:
        raise AudioError("the file holds no audio samples", EMPTY_AUDIO)
    mono = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if not np.isfinite(mono).all():
        raise AudioError("the file holds samples that are not finite numbers", INVALID_AUDIO)
    if rate != SAMPLE_RATE:
        import soxr

        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ").astype(np.float32, copy=False)
    np.clip(mono, -1.0, 1.0, out=mono)
    return Audio(samples=np.ascontiguousarray(mono), source_format=fmt, source_rate=rate, channels=channels)


def _too_long(seconds: float, limit: float) -> str:
    return f"the audio is {seconds:.1f}s long, more than the limit of {limit:g}s"


def _why(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    if text.startswith("Error opening") and ": " in text:  # "Error opening <_io.BytesIO object at 0x...>: why"
        text = text.split(": ", 1)[1]
    return text[:200] or type(exc).__name__
