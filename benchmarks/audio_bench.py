"""Transcription over HTTP against the raw WhisperPipeline: ovserve-runtime's /v1/audio/transcriptions vs
openvino_genai.WhisperPipeline.generate on the same audio, at C concurrent clients, as real-time factors.

raw   WhisperPipeline in this process (built as the server builds it: word timestamps on), the files' 16 kHz
      samples (decoded once, up front) generated one after another: one pipeline takes one audio per call, so
      C clients of one pipeline cannot do better than this, whatever C
http  ovserve-runtime as a subprocess; C clients (threads, one connection each) send the files as WAV uploads
      (multipart, response_format json) until all are done: the server decodes, resamples, queues and answers
RTF = wall time / seconds of audio (lower is faster; 0.01: 100 x real time). Raw and HTTP runs alternate, `--reps`
paired runs per C; medians are printed, and HTTP/raw as the throughput ratio (raw RTF over HTTP RTF; 1.0: no cost).
CPU columns (user + system ms per second of audio): the benchmark process around a raw run; the server process (all
its threads, from /proc) and the client threads around an HTTP run. On a shared machine whose cores are busy,
wall-time ratios swing; CPU per audio second moves less, and raw/(server+client) CPU is the HTTP/raw throughput
such a machine allows. The audio is a synthetic 44.1 kHz stereo tone of --seconds (no hub); a random-weight model's
transcript is noise but the same for both (greedy), so both sides generate the same tokens.

usage: python benchmarks/audio_bench.py [--model DIR] [--clients 1,8] [--files 16] [--seconds 10] [--reps 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import io
import os
import resource
import socket
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wav(seconds: float, rate: int = 44_100) -> bytes:
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 2 * t)
    buf = io.BytesIO()
    sf.write(buf, np.stack([x, x], axis=1), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def raw_run(pipe, samples: list[np.ndarray]) -> float:
    t = time.perf_counter()
    for s in samples:
        pipe.generate(s, task="transcribe")
    return time.perf_counter() - t


def http_run(url: str, files: list[bytes], clients: int) -> float:
    import requests

    sessions = [requests.Session() for _ in range(clients)]
    todo = list(range(len(files)))

    def client(k: int) -> None:
        while True:
            try:
                i = todo.pop()
            except IndexError:
                return
            r = sessions[k].post(
                url + "/v1/audio/transcriptions",
                files={"file": ("a.wav", files[i])},
                data={"model": "bench"},
                timeout=600,
            )
            r.raise_for_status()

    t = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("OVSERVE_MODELS", "/var/cache/ovserve/models") + "/tiny-whisper")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="--inference-threads of both sides")
    a = ap.parse_args()
    import openvino_genai as g
    from ovserve_runtime import audio
    from runtime_bench import wait_ready

    clip = wav(a.seconds)
    files = [clip] * a.files
    limits = audio.Limits(max_seconds=3600, decode_timeout_s=60)
    samples = [audio.decode(f, limits).samples for f in files]
    total = sum(len(s) for s in samples) / audio.SAMPLE_RATE
    port = _free_port()
    cmd = [sys.executable, "-m", "ovserve_runtime", "--model-path", a.model, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--inference-threads", str(a.threads), "--served-name", "bench", "--max-queued-requests", "1024"]
    cmd += ["--termination-log", os.devnull, "--log-level", "WARNING"]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(server, url, 300)
        pipe = g.WhisperPipeline(a.model, "CPU", word_timestamps=True, INFERENCE_NUM_THREADS=a.threads)
        raw_run(pipe, samples[:1])  # warm-up of both
        http_run(url, files[:1], 1)
        print(
            f"load {os.getloadavg()[0]:.1f}; model {Path(a.model).name}: {a.files} files of {a.seconds:g} s "
            f"({total:.0f} s of audio), "
            f"{a.threads} inference threads, {os.cpu_count()} CPUs"
        )
        print(
            "| clients | raw RTF | HTTP RTF | HTTP/raw throughput (min-max) | CPU ms/audio s raw / server / client "
            "| raw/(server+client) CPU |"
        )
        print("|---|---|---|---|---|---|")
        for c in (int(x) for x in a.clients.split(",")):
            raws, https, cpu = [], [], {"raw": 0.0, "server": 0.0, "client": 0.0}
            for _ in range(a.reps):
                c0 = self_cpu()
                raws.append(raw_run(pipe, samples) / total)
                c1, s1 = self_cpu(), proc_cpu(server.pid)
                https.append(http_run(url, files, c) / total)
                cpu["raw"] += c1 - c0
                cpu["client"] += self_cpu() - c1
                cpu["server"] += proc_cpu(server.pid) - s1
            r, h = st.median(raws), st.median(https)
            ratios = sorted(x / y for x, y in zip(raws, https, strict=True))
            ms = {k: 1000 * v / (total * a.reps) for k, v in cpu.items()}
            print(
                f"| {c} | {r:.4f} | {h:.4f} | {r / h:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) | "
                f"{ms['raw']:.1f} / {ms['server']:.1f} / {ms['client']:.1f} | "
                f"{ms['raw'] / (ms['server'] + ms['client']):.2f} |",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
