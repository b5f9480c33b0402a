"""The serving benchmark's tooling: runtime_bench's --runtime choice and device_table's docs table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # pydantic resolves the module's annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


bench = _load("runtime_bench", ROOT / "benchmarks" / "runtime_bench.py")
table = _load("device_table", ROOT / "hack" / "bench" / "device_table.py")


def test_runtime_source_dir_goes_first_on_pythonpath(tmp_path, monkeypatch):
    (tmp_path / "ovserve_runtime").mkdir()
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    rt = bench.Runtime.parse(f"old={tmp_path}")
    argv, env = rt.argv_env()
    assert rt.label == "old"
    assert argv == [sys.executable, "-m", "ovserve_runtime"]
    assert env["PYTHONPATH"] == f"{tmp_path}:/elsewhere"


def test_runtime_executable_runs_as_is(tmp_path):
    exe = tmp_path / "ovserve-runtime"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert bench.Runtime.parse(f"new={exe}").argv_env() == ([str(exe)], None)


def test_default_runtime_is_this_pythons():
    assert bench.Runtime().argv_env() == ([sys.executable, "-m", "ovserve_runtime"], None)


@pytest.mark.parametrize("spec", ["old", "=src", "old=", "old=/nonexistent/src"])
def test_runtime_refused(spec):
    with pytest.raises(SystemExit, match="--runtime"):
        bench.Runtime.parse(spec)


def _pair(ratio: float, ttft: float) -> dict:
    cpu = {"http": 20.0, "engine": 100.0, "client": 10.0}
    return {
        "raw": {"tok_s": 1000.0, "cpu_us_per_token": {"raw": 90.0}},
        "http": {"tok_s": 1000.0 * ratio, "cpu_us_per_token": cpu},
        "ratio_median": ratio,
        "ratio_min": ratio - 0.05,
        "ratio_max": ratio + 0.05,
        "ttft_ratio_median": ttft,
    }


@pytest.mark.parametrize(
    ("model", "ratio", "ttft", "streams", "missed"),
    [
        ("bench-qwen-small", 0.96, 1.2, "64", []),
        ("bench-qwen-small", 0.94, 1.2, "64", ["HTTP/raw 0.940 < 0.95"]),
        ("tiny-llm", 0.85, 1.2, "64", []),  # the overhead-bound model's target is 0.8
        ("tiny-llm", 0.85, 1.3, "64", ["TTFT 1.30x > 1.25x"]),
        ("tiny-llm", 0.85, 1.3, "256", []),  # the TTFT target holds at 16 and 64 streams
    ],
)
def test_table_rows_and_targets(model, ratio, ttft, streams, missed):
    doc = {
        "meta": {"cpus": 16, "python": "3.12.3", "argv": ["--reps", "3"]},
        "models": [
            {
                "model": f"models/{model}",
                "runtimes": {"old": {"cb": {streams: _pair(0.5, 3.0)}}, "new": {"cb": {streams: _pair(ratio, ttft)}}},
            }
        ],
    }
    lines = table.table(doc, "t")
    row = next(x for x in lines if x.startswith(f"| {model} | {streams} | 1000 |"))
    assert f"| 0.50 (0.45-0.55) | 3.00x | {ratio:.2f} ({ratio - 0.05:.2f}-{ratio + 0.05:.2f}) | {ttft:.2f}x |" in row
    assert f"| {model} | {streams} | 90 | 20 / 100 / 10 | 20 / 100 / 10 |" in lines
    new_misses = [m for m in lines[-1].removeprefix("Targets missed: ").split("; ") if m.startswith("new ")]
    assert [m.split(": ", 1)[1] for m in new_misses] == missed


def test_table_of_a_plain_run_and_a_failed_runtime():
    plain = {"models": [{"model": "tiny-llm", "cb": {"16": _pair(0.9, 1.1)}}]}
    assert "| tiny-llm | 16 | 1000 | 0.90 (0.85-0.95) | 1.10x |" in table.table(plain, "t")
    failed = {
        "models": [{"model": "m", "runtimes": {"old": {"cb": {}, "error": "x"}, "new": {"cb": {"16": _pair(1, 1)}}}}]
    }
    assert "| m | 16 | 1000 | failed | - | 1.00 (0.95-1.05) | 1.00x |" in table.table(failed, "t")
