"""The ovserve-runtime CLI as a subprocess: refusals, the failure report contract, flags and env twins."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from ovserve_runtime.report import RuntimeReport

from .conftest import free_port, runtime_cmd, runtime_env

pytestmark = pytest.mark.runtime


def run_runtime(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        runtime_cmd("--host", "127.0.0.1", "--port", str(free_port()), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or runtime_env(),
    )


@pytest.mark.parametrize(
    ("model", "ptype", "device", "reason"),
    [
        ("tiny-llm-nosdpa", "LM_CB", "CPU", "PagedAttentionNotSupported"),
        ("tiny-vlm-nosdpa", "VLM_CB", "CPU", "PagedAttentionNotSupported"),
        ("tiny-llm", "VLM", "CPU", "PipelineTypeMismatch"),
        ("tiny-vlm", "LM_CB", "CPU", "PipelineTypeMismatch"),
        ("tiny-llm-stateless", "LM", "CPU", "ModelLoadFailed"),
        ("does-not-exist", "AUTO", "CPU", "ModelNotFound"),
    ],
)
def test_failure_report_is_last_stderr_line_and_termination_log(tiny_models, tmp_path, model, ptype, device, reason):
    tlog = tmp_path / "termination-log"
    proc = run_runtime(
        "--model-path",
        str(tiny_models / model),
        "--pipeline-type",
        ptype,
        "--device",
        device,
        "--termination-log",
        str(tlog),
    )
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.rstrip("\n").splitlines()[-1]
    report = RuntimeReport.model_validate_json(last)
    assert tlog.read_text().strip() == last
    assert RuntimeReport.from_text(proc.stderr) == report
    assert report.state == "failed"
    assert report.pipeline.requested == ptype
    assert report.pipeline.resolved is None  # nothing runs, nothing was downgraded
    assert report.pipeline.continuousBatching is False and report.pipeline.fallback is False
    assert report.pipeline.reason == reason
    assert report.pipeline.message
    assert report.model == model
    assert report.versions.openvinoGenai
    if reason == "PagedAttentionNotSupported":
        assert "No ScaledDotProductAttention operation observed in the graph" in report.pipeline.message
    if model == "tiny-llm-stateless":
        assert "optimum-cli export openvino" in report.pipeline.message
        assert "--task text-generation-with-past" in report.pipeline.message


def test_gpu_without_intel_gpu_is_device_unavailable(tiny_models, tmp_path):
    import openvino as ov

    if any(d.startswith("GPU") for d in ov.Core().available_devices):
        pytest.skip("this machine has an Intel GPU")
    proc = run_runtime(
        "--model-path",
        str(tiny_models / "tiny-llm"),
        "--device",
        "GPU",
        "--termination-log",
        str(tmp_path / "t"),
    )
    assert proc.returncode == 3
    report = RuntimeReport.model_validate_json(proc.stderr.splitlines()[-1])
    assert (report.device, report.pipeline.reason) == ("GPU", "DeviceUnavailable")


def test_env_twins(tiny_models, tmp_path):
    """OVSERVE_* configure the runtime like flags; a flag wins."""
    env = runtime_env(
        OVSERVE_MODEL_PATH=str(tiny_models / "tiny-llm-nosdpa"),
        OVSERVE_PIPELINE_TYPE="LM_CB",
        OVSERVE_TERMINATION_LOG=str(tmp_path / "t"),
        OVSERVE_SERVED_NAME="from-env",
    )
    proc = run_runtime(env=env)
    assert proc.returncode == 3
    rep = json.loads((tmp_path / "t").read_text())
    assert (rep["model"], rep["pipeline"]["requested"], rep["pipeline"]["reason"]) == (
        "from-env",
        "LM_CB",
        "PagedAttentionNotSupported",
    )
    proc = run_runtime("--pipeline-type", "VLM", env=env)
    rep = json.loads(proc.stderr.splitlines()[-1])
    assert (rep["pipeline"]["requested"], rep["pipeline"]["reason"]) == ("VLM", "PipelineTypeMismatch")


@pytest.mark.parametrize(
    "args,env,message",
    [
        (
            ("--max-queued-requests", "-1"),
            {},
            "argument --max-queued-requests: input should be greater than or equal to 0",
        ),
        ((), {"OVSERVE_PORT": "eighty"}, "OVSERVE_PORT='eighty': input should be a valid integer"),
    ],
)
def test_bad_flag_values_are_usage_errors(args, env, message):
    proc = subprocess.run(
        runtime_cmd("--model-path", "/nonexistent", *args), capture_output=True, text=True, env=runtime_env(**env)
    )
    assert proc.returncode == 2
    assert message in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr


def test_scheduler_flags_reach_the_pipeline(tiny_models, server_factory):
    s = server_factory(
        tiny_models / "tiny-llm",
        "--pipeline-type",
        "LM_CB",
        "--cache-size-gb",
        "1",
        "--max-num-seqs",
        "4",
        "--max-num-batched-tokens",
        "128",
        "--enable-prefix-caching",
        "--no-dynamic-split-fuse",
        "--kv-cache-precision",
        "u8",
        "--served-name",
        "sched",
    )
    assert s.status()["pipeline"]["resolved"] == "LM_CB"
    log = s.log.read_text()
    assert "max_num_seqs=4" in log and "max_num_batched_tokens=128" in log
    assert "enable_prefix_caching=True" in log and "dynamic_split_fuse=False" in log


def test_help_explains_every_option():
    """The installed entry point's --help (the table of cases is in tests/unit/test_flags.py)."""
    from ovserve_runtime.flags import RuntimeFlags, env_name, flag_name

    out = subprocess.run(runtime_cmd("--help"), capture_output=True, text=True, env=runtime_env()).stdout
    for name in RuntimeFlags.model_fields:
        assert flag_name(name) in out and env_name(name) in out, name
    assert "--no-dynamic-split-fuse" in out and "never downgraded" in out


def test_not_ready_until_loaded(tiny_models, tmp_path):
    """The port opens before the model loads: 503 + state loading until the smoke generation passed."""
    from .conftest import Server, http_get

    s = Server(tiny_models / "tiny-llm", tmp=tmp_path)
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and s.proc.poll() is None:
            try:
                code, _ = http_get(s.url + "/v2/health/ready", timeout=2)
                state = json.loads(http_get(s.url + "/v1/status", timeout=2)[1])["state"]
            except OSError:
                time.sleep(0.01)
                continue
            seen.append((code, state))
            if code == 200:
                break
        assert seen and seen[-1] == (200, "ready"), seen
        # every earlier answer was "not ready, loading" (a 200 never came before ready)
        assert all(c == 503 for c, _ in seen[:-1]), seen
        assert all(st in ("loading", "ready") for _, st in seen), seen
        assert any(st == "loading" for _, st in seen), seen
    finally:
        s.stop()
