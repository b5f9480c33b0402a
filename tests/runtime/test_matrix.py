"""The whole resolution matrix with the real openvino-genai: model variant x requested pipeline type."""

from __future__ import annotations

import pytest
from ovserve_runtime import resolve
from ovserve_runtime.engine import SchedulerOptions, construct_cb
from ovserve_runtime.loader import LoadFailure, LoadOptions, load
from ovserve_runtime.report import PipelineType as P
from ovserve_runtime.report import Reason as R

pytestmark = pytest.mark.runtime

MISMATCH = ("fail", None, False, False, R.PIPELINE_TYPE_MISMATCH)
PA_REFUSED = ("fail", None, False, False, R.PAGED_ATTENTION_NOT_SUPPORTED)
LOAD_FAILED = ("fail", None, False, False, R.MODEL_LOAD_FAILED)
# model -> requested -> (outcome, resolved, continuousBatching, fallback, reason)
MATRIX = {
    "tiny-llm": {
        P.AUTO: ("ok", P.LM_CB, True, False, R.CONTINUOUS_BATCHING),
        P.LM: ("ok", P.LM, False, False, R.LEGACY_REQUESTED),
        P.LM_CB: ("ok", P.LM_CB, True, False, R.CONTINUOUS_BATCHING),
        P.VLM: MISMATCH,
        P.VLM_CB: MISMATCH,
    },
    "tiny-llm-nosdpa": {
        P.AUTO: ("ok", P.LM, False, True, R.PAGED_ATTENTION_NOT_SUPPORTED),
        P.LM: ("ok", P.LM, False, False, R.LEGACY_REQUESTED),
        P.LM_CB: PA_REFUSED,
        P.VLM: MISMATCH,
        P.VLM_CB: MISMATCH,
    },
    "tiny-llm-stateless": {
        P.AUTO: LOAD_FAILED,
        P.LM: LOAD_FAILED,  # constructs, fails at the smoke generation
        P.LM_CB: LOAD_FAILED,
        P.VLM: MISMATCH,
        P.VLM_CB: MISMATCH,
    },
    "tiny-vlm": {
        P.AUTO: ("ok", P.VLM_CB, True, False, R.CONTINUOUS_BATCHING),
        P.LM: MISMATCH,
        P.LM_CB: MISMATCH,
        P.VLM: ("ok", P.VLM, False, False, R.LEGACY_REQUESTED),
        P.VLM_CB: ("ok", P.VLM_CB, True, False, R.CONTINUOUS_BATCHING),
    },
    "tiny-vlm-nosdpa": {
        P.AUTO: ("ok", P.VLM, False, True, R.PAGED_ATTENTION_NOT_SUPPORTED),
        P.LM: MISMATCH,
        P.LM_CB: MISMATCH,
        P.VLM: ("ok", P.VLM, False, False, R.LEGACY_REQUESTED),
        P.VLM_CB: PA_REFUSED,
    },
}
CASES = [(m, t, exp) for m, row in MATRIX.items() for t, exp in row.items()]


@pytest.mark.parametrize(("model", "requested", "expect"), CASES, ids=[f"{m}-{t}" for m, t, _ in CASES])
def test_resolution_matrix(tiny_models, model, requested, expect):
    outcome, resolved, cb, fallback, reason = expect
    opts = LoadOptions(
        model_path=str(tiny_models / model), pipeline_type=requested, properties={"INFERENCE_NUM_THREADS": 1}
    )
    if outcome == "fail":
        with pytest.raises(LoadFailure) as ei:
            load(opts)
        rep = ei.value.report
    else:
        engine, rep, _ = load(opts)
        try:
            assert engine.continuous_batching is cb
            assert engine.kind == resolved
            assert engine.fatal is None
        finally:
            engine.stop()
    assert (rep.requested, rep.resolved, rep.continuousBatching, rep.fallback, rep.reason) == (
        requested,
        resolved,
        cb,
        fallback,
        reason,
    )
    if reason == R.PAGED_ATTENTION_NOT_SUPPORTED:
        assert resolve.NO_SDPA_TEXT in rep.message  # the original openvino error text
    if model == "tiny-llm-stateless" and reason == R.MODEL_LOAD_FAILED:
        assert "--task text-generation-with-past" in rep.message
    if outcome == "ok" and not fallback:
        assert rep.message == ""


@pytest.mark.parametrize(
    ("model", "xml"),
    [
        ("tiny-llm", "openvino_model.xml"),
        ("tiny-llm-nosdpa", "openvino_model.xml"),
        ("tiny-llm-stateless", "openvino_model.xml"),
        ("tiny-vlm", "openvino_language_model.xml"),
        ("tiny-vlm-nosdpa", "openvino_language_model.xml"),
    ],
)
def test_structural_check_agrees_with_construction(tiny_models, model, xml):
    """openvino's paged_attention_transformation on a clone predicts exactly what CB construction raises."""
    from ovserve_runtime.structure import check

    s = check(tiny_models / model / xml)
    predicted = resolve.structural_reason(s)
    try:
        pipe = construct_cb(str(tiny_models / model), "CPU", SchedulerOptions(), {"INFERENCE_NUM_THREADS": 1})
    except RuntimeError as exc:
        actual = resolve.classify_error(str(exc))
        assert predicted == actual
        # the same openvino pass: the same text
        assert s.pa_error is not None
        assert s.pa_error.splitlines()[-1] in str(exc)
    else:
        del pipe
        assert predicted is None
        assert s.has_sdpa and s.stateful and s.has_beam_idx
    assert s.has_sdpa is ("nosdpa" not in model)
    assert s.stateful is ("stateless" not in model)


def test_model_not_found(tmp_path):
    with pytest.raises(LoadFailure) as ei:
        load(LoadOptions(model_path=str(tmp_path / "missing")))
    assert ei.value.report.reason == R.MODEL_NOT_FOUND
    with pytest.raises(LoadFailure) as ei:
        load(LoadOptions(model_path=str(tmp_path)))
    assert ei.value.report.reason == R.MODEL_NOT_FOUND


def test_gpu_unavailable(tiny_models):
    import openvino as ov

    if any(d.startswith("GPU") for d in ov.Core().available_devices):
        pytest.skip("this machine has an Intel GPU")
    with pytest.raises(LoadFailure) as ei:
        load(LoadOptions(model_path=str(tiny_models / "tiny-llm"), device="GPU"))
    rep = ei.value.report
    assert rep.reason == R.DEVICE_UNAVAILABLE
    assert "GPU" in rep.message and "CPU" in rep.message
