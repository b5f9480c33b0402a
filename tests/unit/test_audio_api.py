"""The transcription task's pure parts: task resolution of a Whisper export, the multipart form and its refusals,
the answer formats, audio decoding and its bounds, and the generated field table of docs/audio.md."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from ovserve_runtime import audio
from ovserve_runtime.openai import audio as api
from ovserve_runtime.openai import audio_support
from ovserve_runtime.openai.request import RequestError
from ovserve_runtime.report import PipelineType, Reason, Task
from ovserve_runtime.tasks.facts import read_facts
from ovserve_runtime.tasks.resolve import ModelFacts, Resolved, TaskFailure, resolve_task

WHISPER = ModelFacts(speech="whisper encoder + decoder", architectures=("WhisperForConditionalGeneration",))
LLM = ModelFacts(has_ir=True, outputs={"logits": (None, None, 1000)}, inputs=("beam_idx", "input_ids"))


@pytest.mark.parametrize(
    ("requested", "pipeline", "facts", "want"),
    [
        (Task.AUTO, PipelineType.AUTO, WHISPER, Task.TRANSCRIPTION),
        (Task.TRANSCRIPTION, PipelineType.AUTO, WHISPER, Task.TRANSCRIPTION),
        (Task.EMBEDDINGS, PipelineType.AUTO, WHISPER, Reason.TASK_MISMATCH),
        (Task.TEXT_GENERATION, PipelineType.AUTO, WHISPER, Reason.TASK_MISMATCH),
        (Task.TRANSCRIPTION, PipelineType.AUTO, LLM, Reason.TASK_MISMATCH),
        (Task.TRANSCRIPTION, PipelineType.LM_CB, WHISPER, Reason.TASK_MISMATCH),
        (Task.AUTO, PipelineType.LM, WHISPER, Reason.TASK_MISMATCH),
    ],
)
def test_a_whisper_export_resolves_transcription(requested, pipeline, facts, want):
    got = resolve_task(requested, pipeline, facts)
    if isinstance(want, Task):
        assert isinstance(got, Resolved) and got.task == want
    else:
        assert isinstance(got, TaskFailure) and got.reason == want


@pytest.mark.parametrize(
    ("files", "model_type", "speech"),
    [
        (("openvino_encoder_model.xml", "openvino_decoder_model.xml"), "whisper", True),
        (("openvino_encoder_model.xml", "openvino_decoder_model.xml"), None, True),
        (("openvino_encoder_model.xml", "openvino_decoder_model.xml"), "t5", False),
        (("openvino_encoder_model.xml",), "whisper", False),
    ],
)
def test_speech_facts_read_from_the_directory(tmp_path: Path, files, model_type, speech):
    for name in files:
        (tmp_path / name).write_text("<net/>")
    if model_type:
        (tmp_path / "config.json").write_text(f'{{"model_type": "{model_type}"}}')
    assert (read_facts(str(tmp_path)).speech is not None) is speech


def form(*parts: tuple[str, str | bytes, str | None]) -> tuple[str, bytes]:
    """(content type, body) of a multipart form: (name, value, filename or None) parts."""
    boundary = "b0undary"
    out = io.BytesIO()
    for name, value, filename in parts:
        out.write(f"--{boundary}\r\n".encode())
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out.write(f"Content-Disposition: {disp}\r\n\r\n".encode())
        out.write(value if isinstance(value, bytes) else value.encode())
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", out.getvalue()


FILE = ("file", b"RIFF\x00\r\n--b0und", "a.wav")  # a boundary-like prefix inside the data is data


def parse(*parts, translate=False, words=True):
    return api.parse(*form(*parts), translate=translate, word_timestamps=words)


def test_form_fields_reach_the_request():
    req = parse(
        FILE,
        ("model", "m", None),
        ("language", "fr", None),
        ("temperature", "0.4", None),
        ("response_format", "verbose_json", None),
        ("timestamp_granularities[]", "word", None),
        ("timestamp_granularities[]", "segment", None),
    )
    assert req.file == FILE[1] and req.filename == "a.wav"
    assert req.form.language == "fr" and req.form.temperature == 0.4 and req.words and req.segments
    words_only = parse(FILE, ("response_format", "verbose_json", None), ("timestamp_granularities[]", "word", None))
    assert words_only.words and not words_only.segments
    assert parse(FILE, ("stream", "true", None)).form.stream is True


@pytest.mark.parametrize(
    ("parts", "kw", "param", "code"),
    [
        ((("model", "m", None),), {}, "file", api.MISSING_FILE),
        ((FILE, ("model", "a", None), ("model", "b", None)), {}, "model", api.INVALID_MULTIPART),
        ((FILE, ("extra", "1", None)), {}, "extra", "unknown_parameter"),
        ((FILE, ("temperature", "hot", None)), {}, "temperature", None),
        ((FILE, ("timestamp_granularities[]", "segment", None)), {}, "timestamp_granularities", api.UNSUPPORTED),
        (
            (FILE, ("response_format", "verbose_json", None), ("timestamp_granularities[]", "word", None)),
            {"words": False},
            "timestamp_granularities",
            api.UNSUPPORTED,
        ),
        ((FILE, ("stream", "true", None), ("response_format", "vtt", None)), {}, "response_format", api.UNSUPPORTED),
        ((FILE, ("language", "fr", None)), {"translate": True}, "language", "unknown_parameter"),
        ((FILE, ("include[]", "logprobs", None)), {}, "include", api.UNSUPPORTED),
        ((FILE, ("file2", b"x", "b.wav")), {}, "file2", "unknown_parameter"),
    ],
)
def test_form_refusals_name_the_field(parts, kw, param, code):
    with pytest.raises(RequestError) as err:
        parse(*parts, **kw)
    assert err.value.param == param
    if code:
        assert err.value.code == code


def test_a_body_that_is_not_multipart_is_refused():
    with pytest.raises(RequestError) as err:
        api.parse("application/json", b"{}", translate=False, word_timestamps=True)
    assert err.value.code == api.INVALID_MULTIPART
    with pytest.raises(RequestError):
        api.parse("multipart/form-data; boundary=x", b"--x\r\ngarbage", translate=False, word_timestamps=True)


def test_language_names_and_codes_map_to_the_models_tokens():
    tokens = {"<|en|>": 1, "<|fr|>": 2}
    assert api.language_token("fr", tokens) == "<|fr|>"
    assert api.language_token("French", tokens) == "<|fr|>"
    assert api.language_token("<|en|>", tokens) == "<|en|>"
    with pytest.raises(RequestError):
        api.language_token("de", tokens)


def test_srt_and_vtt_timestamps():
    segs = (api.Segment(0.0, 1.5, " hello"), api.Segment(3661.25, 3662.0, "world"))
    assert api.srt(segs) == "1\n00:00:00,000 --> 00:00:01,500\nhello\n\n2\n01:01:01,250 --> 01:01:02,000\nworld\n\n"
    assert api.vtt(segs).startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nhello\n\n01:01:01.250")


def wav(seconds: float, rate: int = 22_050, channels: int = 2, fmt: str = "WAV") -> bytes:
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    x = 0.5 * np.sin(2 * np.pi * 440 * t)
    buf = io.BytesIO()
    sf.write(buf, np.stack([x] * channels, axis=1), rate, format=fmt)
    return buf.getvalue()


LIMITS = audio.Limits(max_seconds=10, decode_timeout_s=10)


def test_decode_resamples_to_16khz_mono():
    got = audio.decode(wav(2.0), LIMITS)
    assert got.samples.dtype == np.float32 and got.samples.ndim == 1
    assert abs(len(got.samples) - 32_000) <= 16 and got.channels == 2 and got.source_rate == 22_050
    assert 0.4 < float(np.abs(got.samples).max()) <= 0.51


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", audio.EMPTY_AUDIO),
        (b"not audio at all" * 10, audio.INVALID_AUDIO),
        (b"\x00\x00\x00\x18ftypM4A " + b"\x00" * 40, audio.UNSUPPORTED_FORMAT),
        (b"\x1a\x45\xdf\xa3" + b"\x00" * 40, audio.UNSUPPORTED_FORMAT),
        (wav(11.0, 8000, 1), audio.AUDIO_TOO_LONG),
        (wav(0.5, 8000, 1)[:44], audio.EMPTY_AUDIO),  # a header and no samples
    ],
)
def test_decode_refusals(data, code):
    with pytest.raises(audio.AudioError) as err:
        audio.decode(data, LIMITS)
    assert err.value.code == code


def test_decode_time_is_bounded():
    with pytest.raises(audio.AudioError) as err:
        audio.decode(wav(5.0, 48_000, 1, "FLAC"), audio.Limits(max_seconds=10, decode_timeout_s=1e-6))
    assert err.value.code == audio.DECODE_TIMEOUT


def test_every_audio_field_is_in_the_support_table_and_the_docs_are_generated():
    assert audio_support.request_fields() - audio_support.covered() == set()
    assert audio_support.covered() - audio_support.request_fields() == set()
    doc = Path(__file__).resolve().parents[2] / "docs" / "audio.md"
    text = doc.read_text()
    assert audio_support.DOCS.render_into(text) == text, (
        "docs/audio.md drifted: python -m ovserve_runtime.openai.audio_support --write docs/audio.md"
    )
