"""End-to-end on the real cluster: an LLMServing on the tiny Whisper export (hack/models/whisper) resolves task
transcription (TASK column, status.task, pipeline Whisper), answers OpenAI's audio API through its Service, and
the same model pinned to another task is Failed with TaskMismatch."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import HACK, MODELS_DIR, run_on_host_network

from . import test_operator_e2e as e2e
from .test_operator_e2e import condition, llms, pvc_model, row, wait_phase
from .test_operator_vlm import service_url

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def whisper_runtime(cluster, project_image, namespace) -> Iterator[Path]:
    """tiny-whisper built (hack/models/whisper/build.sh) and on the PVC "models"."""
    proc = run_on_host_network(["bash", str(HACK / "models" / "whisper" / "build.sh")], timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"hack/models/whisper/build.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    with e2e.models_claim(cluster, namespace, MODELS_DIR) as root:
        yield root


def flac(seconds: float = 2.0, rate: int = 44_100) -> bytes:
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 440 * t), rate, format="FLAC")
    return buf.getvalue()


def test_a_whisper_serving_resolves_transcription_and_answers(cluster, operator, namespace, whisper_runtime):
    from openai import OpenAI

    cluster.apply(llms("whisper", {"model": pvc_model("tiny-whisper")}), namespace)
    cluster.apply(llms("whisper-wrong", {"model": pvc_model("tiny-whisper"), "task": "embeddings"}), namespace)
    st = wait_phase(cluster, namespace, "whisper", "Ready", 300)
    r = row(cluster, namespace, "whisper")
    assert (r["TASK"], r["RESOLVED"], r["READY"], r["PHASE"]) == ("transcription", "Whisper", "1/1", "Ready")
    assert st["task"]["requested"] == "AUTO" and "openvino_encoder_model.xml" in st["task"]["source"]
    assert condition(st, "PipelineResolved")["reason"] == "TaskPipeline"

    client = OpenAI(base_url=service_url(cluster, namespace, "whisper"), api_key="unused", max_retries=2)
    audio = flac()
    got = client.audio.transcriptions.create(model="whisper", file=("a.flac", audio))
    assert got.text and got.usage.seconds == 2
    events = list(client.audio.transcriptions.create(model="whisper", file=("a.flac", audio), stream=True))
    assert events[-1].type == "transcript.text.done" and events[-1].text == got.text
    srt = client.audio.transcriptions.create(model="whisper", file=("a.flac", audio), response_format="srt")
    assert srt.startswith("1\n00:00:")

    st = wait_phase(cluster, namespace, "whisper-wrong", "Failed", 300)
    ready = condition(st, "Ready")
    assert ready["reason"] == "TaskMismatch" and "transcription model" in ready["message"]
