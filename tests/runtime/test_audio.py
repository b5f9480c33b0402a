"""The transcription task on the tiny Whisper export (hack/models/whisper/build.sh): resolved from the model, OpenAI's
audio API through the openai SDK (each response format, streamed, translations) against the same file run through
the raw openvino_genai.WhisperPipeline, the audio formats decoded, and every refusal named.

One runtime serves every test here (started once, ~3 s); the raw pipeline is built once in this process.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import openai
import pytest
import requests
from ovserve_runtime import audio

from .conftest import ROOT, _models_dir

pytestmark = [pytest.mark.runtime]

MODEL = "tiny-whisper"
RATE = 22_050  # not 16 kHz: every upload is resampled


@pytest.fixture(scope="session")
def whisper_model() -> Path:
    build = ROOT / "hack" / "models" / "whisper" / "build.sh"
    proc = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"{build} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return _models_dir() / MODEL


@pytest.fixture(scope="module")
def server(whisper_model, server_factory):
    return server_factory(whisper_model, "--max-audio-seconds", "120")


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def raw(whisper_model):
    import openvino_genai as g

    return g.WhisperPipeline(str(whisper_model), "CPU", word_timestamps=True)


def tone(seconds: float, rate: int = RATE, channels: int = 2) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    return np.stack([x] * channels, axis=1)


def encode(samples: np.ndarray, fmt: str, subtype: str | None = None, rate: int = RATE) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, samples, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


WAV = encode(tone(2.5), "WAV", "PCM_16")
LIMITS = audio.Limits(max_seconds=120, decode_timeout_s=30)


def pcm(data: bytes) -> np.ndarray:
    return audio.decode(data, LIMITS).samples


def test_task_resolved_from_the_whisper_export(server):
    s = server.status()
    assert s["task"]["resolved"] == "transcription" and s["task"]["requested"] == "AUTO"
    assert "openvino_encoder_model.xml" in s["task"]["source"]
    assert s["pipeline"]["resolved"] == "Whisper" and s["pipeline"]["reason"] == "TaskPipeline"
    assert "word timestamps: on" in s["pipeline"]["message"]
    assert server.metric("ovserve_task_info", 'task="transcription"') == 1


def test_json_and_text_equal_the_raw_pipeline(client, raw):
    want = raw.generate(pcm(WAV), task="transcribe").texts[0]
    got = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV))
    assert got.text == want and want
    assert got.usage.type == "duration" and got.usage.seconds == 3
    text = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), response_format="text")
    assert text == want + "\n"


def test_srt_vtt_and_verbose_json_carry_the_raw_segments(client, raw):
    samples = pcm(WAV)
    chunks = raw.generate(samples, task="transcribe", return_timestamps=True).chunks
    duration = len(samples) / audio.SAMPLE_RATE
    assert chunks
    verbose = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), response_format="verbose_json")
    assert verbose.task == "transcribe" and verbose.duration == pytest.approx(2.5)
    assert [s.text for s in verbose.segments] == [c.text for c in chunks]
    for seg, c in zip(verbose.segments, chunks, strict=True):
        assert seg.start == pytest.approx(min(c.start_ts, duration), abs=1e-3)
        assert seg.end == pytest.approx(min(c.end_ts, duration), abs=1e-3)
        assert 0 <= seg.start <= seg.end <= duration
    srt = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), response_format="srt")
    blocks = [b for b in srt.split("\n\n") if b]
    assert len(blocks) == len(chunks)
    assert blocks[0].split("\n")[0] == "1" and " --> " in blocks[0].split("\n")[1]
    assert blocks[0].split("\n")[1].startswith("00:00:0") and "," in blocks[0].split("\n")[1]
    vtt = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n") and vtt.count(" --> ") == len(chunks)


def test_word_timestamps_are_the_pipelines(client, raw):
    samples = pcm(WAV)
    words = raw.generate(samples, task="transcribe", word_timestamps=True).words
    got = client.audio.transcriptions.create(
        model=MODEL, file=("a.wav", WAV), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert [w.word for w in got.words] == [w.word for w in words] and got.words
    assert all(0 <= w.start <= w.end <= got.duration for w in got.words)
    assert got.segments is None  # only words were asked for


def test_streamed_deltas_add_up_to_the_done_text(client, raw):
    want = raw.generate(pcm(WAV), task="transcribe").texts[0]
    events = list(client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), stream=True))
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    assert len(deltas) > 1 and events[-1].type == "transcript.text.done"
    assert "".join(d.delta for d in deltas) == events[-1].text == want


# LlamaIndex's WhisperReader against the server's base URL, in its own venv (hack/build-llamaindex.sh: it needs
# openai<3): a file path and raw bytes, each read into a Document whose text is the raw pipeline's.
LLAMAINDEX_READ = """
import json, sys
from llama_index.readers.whisper import WhisperReader
url, model, path = sys.argv[1:4]
reader = WhisperReader(model=model, api_key="unused", client_kwargs={"base_url": url, "max_retries": 0})
docs = reader.load_data(path) + reader.load_data(open(path, "rb").read())
print(json.dumps([d.text for d in docs]))
"""


@pytest.fixture(scope="module")
def llamaindex_python() -> str:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-llamaindex.sh")], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/build-llamaindex.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc.stdout.strip().splitlines()[-1]


def test_llamaindex_whisper_reader_reads_the_transcript(server, raw, llamaindex_python, tmp_path):
    path = tmp_path / "a.wav"
    path.write_bytes(WAV)
    # the reader asks for language "en" and response_format "text"
    want = raw.generate(pcm(WAV), task="transcribe", language="<|en|>").texts[0]
    proc = subprocess.run(
        [llamaindex_python, "-c", LLAMAINDEX_READ, server.url + "/v1", MODEL, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [want + "\n"] * 2 and want


def test_translation_language_prompt_and_temperature_reach_the_pipeline(client, raw):
    samples = pcm(WAV)
    translated = client.audio.translations.create(model=MODEL, file=("a.wav", WAV))
    assert translated.text == raw.generate(samples, task="translate").texts[0]
    french = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), language="fr")
    assert french.text == raw.generate(samples, task="transcribe", language="<|fr|>").texts[0]
    prompted = client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), prompt="hello world")
    assert prompted.text == raw.generate(samples, task="transcribe", initial_prompt="hello world").texts[0]
    verbose = client.audio.transcriptions.create(
        model=MODEL, file=("a.wav", WAV), language="french", response_format="verbose_json", temperature=0.8
    )
    assert verbose.language == "french" and verbose.segments[0].temperature == 0.8


@pytest.mark.parametrize(
    ("fmt", "subtype"), [("FLAC", None), ("OGG", "VORBIS"), ("OGG", "OPUS"), ("MP3", None), ("WAV", "FLOAT")]
)
def test_audio_formats_decode_to_16khz_mono(client, fmt, subtype):
    rate = 48_000 if subtype == "OPUS" else RATE
    data = encode(tone(2.0, rate), fmt, subtype, rate)
    samples = pcm(data)
    assert samples.dtype == np.float32 and abs(len(samples) / audio.SAMPLE_RATE - 2.0) < 0.1
    got = client.audio.transcriptions.create(model=MODEL, file=(f"a.{fmt.lower()}", data))
    assert got.text


def test_long_audio_is_transcribed_in_30s_windows(client):
    long = encode(tone(75.0, 16_000, 1), "WAV", "PCM_16", 16_000)
    got = client.audio.transcriptions.create(model=MODEL, file=("long.wav", long), response_format="verbose_json")
    assert got.duration == pytest.approx(75.0)
    assert max(s.end for s in got.segments) > 30  # the windows after the first were transcribed


def form_post(server, files=None, data=None, path="/v1/audio/transcriptions", **kw):
    r = requests.post(server.url + path, files=files, data=data, timeout=60, **kw)
    return r.status_code, r.json() if r.headers.get("Content-Type", "").startswith("application/json") else r.text


M4A = b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00" + b"\x00" * 64
WAV_FILE = {"file": ("a.wav", WAV)}


@pytest.mark.parametrize(
    ("files", "data", "status", "param", "code"),
    [
        ({"file": ("a.wav", b"RIFF" + b"\x00" * 200)}, {}, 400, "file", "invalid_audio"),
        ({"file": ("a.wav", WAV[: len(WAV) // 3] + b"\xff" * 100)}, {}, 200, None, None),  # truncated: what's there
        ({"file": ("a.m4a", M4A)}, {}, 400, "file", "unsupported_audio_format"),
        ({"file": ("a.wav", b"")}, {}, 400, "file", "empty_audio"),
        ({"file": ("long.wav", encode(tone(121, 8000, 1), "WAV", "PCM_16", 8000))}, {}, 400, "file", "audio_too_long"),
        ({"model": (None, MODEL)}, {}, 400, "file", "missing_file"),  # a multipart form without the file
        (WAV_FILE, {"language": "xx"}, 400, "language", "unsupported_value"),
        (WAV_FILE, {"temperature": "2"}, 400, "temperature", None),
        (WAV_FILE, {"response_format": "mp3"}, 400, "response_format", None),
        (WAV_FILE, {"timestamp_granularities[]": "word"}, 400, "timestamp_granularities", "unsupported_value"),
        (WAV_FILE, {"stream": "true", "response_format": "srt"}, 400, "response_format", "unsupported_value"),
        (WAV_FILE, {"include[]": "logprobs"}, 400, "include", "unsupported_value"),
        (WAV_FILE, {"chunking_strategy": '{"type": "server_vad"}'}, 400, "chunking_strategy", "unsupported_value"),
        (WAV_FILE, {"known_speaker_names[]": "ann"}, 400, "known_speaker_names", "unsupported_value"),
        (WAV_FILE, {"frobnicate": "1"}, 400, "frobnicate", "unknown_parameter"),
        (WAV_FILE, {"model": "whisper-1"}, 404, "model", "model_not_found"),
        (WAV_FILE, {"chunking_strategy": "auto"}, 200, None, None),
    ],
)
def test_fields_are_honoured_or_refused_by_name(server, files, data, status, param, code):
    got, body = form_post(server, files=files, data=data)
    assert got == status, body
    if status != 200:
        assert body["error"]["param"] == param
        if code:
            assert body["error"]["code"] == code


def test_translations_refuse_transcription_only_fields(server):
    got, body = form_post(server, files=WAV_FILE, data={"language": "fr"}, path="/v1/audio/translations")
    assert got == 400 and body["error"]["param"] == "language"


def test_a_json_body_is_refused_and_other_tasks_paths_are_not_served(server):
    r = requests.post(server.url + "/v1/audio/transcriptions", json={"model": MODEL}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_multipart"
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": []}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "task_not_served"


def test_hostile_file_hurts_no_other_request_and_metrics_count_audio(server, client):
    before = server.metric("ovserve_audio_seconds_total")
    got, _ = form_post(server, files={"file": ("x.wav", b"RIFF\xff\xff\xff\xffWAVEfmt " + bytes(range(256)) * 40)})
    assert got == 400
    assert client.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV)).text
    assert server.metric("ovserve_audio_seconds_total") >= before + 2.5
    assert server.metric("ovserve_audio_real_time_factor_count") >= 1
    assert server.status()["state"] == "ready"


@pytest.mark.parametrize(
    ("model", "args"),
    [("tiny-whisper", ("--task", "embeddings")), ("tiny-whisper", ("--task", "text-generation"))],
)
def test_task_mismatch_on_the_whisper_export(whisper_model, server_factory, model, args):
    s = server_factory(whisper_model, *args, ready=False)
    assert s.proc.wait(timeout=60) == 3
    report = json.loads(s.termination_log.read_text())
    assert report["pipeline"]["reason"] == "TaskMismatch" and "transcription" in report["pipeline"]["message"]


LONG = encode(tone(60.0, 16_000, 1), "WAV", "PCM_16", 16_000)  # ~1 s of the tiny pipeline's time


def test_admission_bound_and_sigterm_drain(whisper_model, server_factory):
    """Beyond one running and one queued file: 429 with Retry-After; SIGTERM then finishes what was admitted."""
    import concurrent.futures as cf
    import signal

    from .conftest import wait_until

    s = server_factory(whisper_model, "--max-queued-requests", "1")
    files = {"file": ("long.wav", LONG)}
    with cf.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(form_post, s, files) for _ in range(6)]
        codes = sorted(f.result()[0] for f in futures)
        assert 200 in codes and 429 in codes, codes
        futures = [pool.submit(form_post, s, files) for _ in range(2)]
        assert wait_until(lambda: s.metric("ovserve_requests_running") >= 1, 20)
        s.proc.send_signal(signal.SIGTERM)
        in_flight = sum(not f.done() for f in futures)
        drained = [f.result()[0] for f in futures]
    assert in_flight >= 1 and drained == [200, 200], drained
    assert s.proc.wait(timeout=60) == 0
