"""Pure resolution rules (no openvino): table-driven."""

from __future__ import annotations

import pytest
from ovserve_runtime import resolve
from ovserve_runtime.report import PipelineType as P
from ovserve_runtime.report import Reason

pytestmark = pytest.mark.runtime

NO_SDPA = (
    "Check 'ov::op::util::has_op_with_type<ov::op::v13::ScaledDotProductAttention>(model)' failed at "
    "src/core/src/pass/sdpa_to_paged_attention.cpp:82:\nNo ScaledDotProductAttention operation observed "
    "in the graph, cannot perform the SDPAToPagedAttention transformation."
)
STATELESS = (
    "Check '!model->get_variables().empty()' failed at src/core/src/pass/sdpa_to_paged_attention.cpp:76:\n"
    "Model is supposed to be stateful, cannot perform the SDPAToPagedAttention transformation."
)
BEAM_IDX = "Exception from src/inference/src/cpp/infer_request.cpp:75:\nPort for tensor name beam_idx was not found."

LM = resolve.Layout(exists=True, has_lm=True, max_position=512)
VLM = resolve.Layout(exists=True, has_vlm=True, has_language_model=True)
EMPTY = resolve.Layout(exists=True)
MISSING = resolve.Layout(exists=False)
CPU = ["CPU"]


@pytest.mark.parametrize(
    ("requested", "layout", "device", "devices", "expect"),
    [
        # (kind, try_cb, allow_fallback) or a failure reason
        (P.AUTO, LM, "CPU", CPU, (P.LM, True, True)),
        (P.AUTO, VLM, "CPU", CPU, (P.VLM, True, True)),
        (P.LM, LM, "CPU", CPU, (P.LM, False, False)),
        (P.LM_CB, LM, "CPU", CPU, (P.LM, True, False)),
        (P.VLM, VLM, "CPU", CPU, (P.VLM, False, False)),
        (P.VLM_CB, VLM, "CPU", CPU, (P.VLM, True, False)),
        (P.VLM, LM, "CPU", CPU, Reason.PIPELINE_TYPE_MISMATCH),
        (P.VLM_CB, LM, "CPU", CPU, Reason.PIPELINE_TYPE_MISMATCH),
        (P.LM, VLM, "CPU", CPU, Reason.PIPELINE_TYPE_MISMATCH),
        (P.LM_CB, VLM, "CPU", CPU, Reason.PIPELINE_TYPE_MISMATCH),
        (P.AUTO, MISSING, "CPU", CPU, Reason.MODEL_NOT_FOUND),
        (P.LM_CB, EMPTY, "CPU", CPU, Reason.MODEL_NOT_FOUND),
        (P.AUTO, resolve.Layout(exists=True, has_vlm=True), "CPU", CPU, Reason.MODEL_NOT_FOUND),
        (P.AUTO, LM, "GPU", CPU, Reason.DEVICE_UNAVAILABLE),
        (P.AUTO, LM, "GPU", ["CPU", "GPU.0"], (P.LM, True, True)),
        (P.AUTO, LM, "GPU.1", ["CPU", "GPU.0"], Reason.DEVICE_UNAVAILABLE),
        (P.AUTO, LM, "NPU", ["CPU", "GPU"], Reason.DEVICE_UNAVAILABLE),
    ],
)
def test_plan(requested, layout, device, devices, expect):
    got = resolve.plan(requested, layout, device, devices)
    if isinstance(expect, Reason):
        assert isinstance(got, resolve.Failure)
        assert got.reason == expect
        assert got.message
    else:
        assert isinstance(got, resolve.Plan)
        assert (got.kind, got.try_cb, got.allow_fallback) == expect


@pytest.mark.parametrize(
    ("requested", "kind", "error", "outcome", "reason", "resolved"),
    [
        (P.AUTO, P.LM, NO_SDPA, "legacy", Reason.PAGED_ATTENTION_NOT_SUPPORTED, P.LM),
        (P.AUTO, P.VLM, NO_SDPA, "legacy", Reason.PAGED_ATTENTION_NOT_SUPPORTED, P.VLM),
        (P.LM_CB, P.LM, NO_SDPA, "refuse", Reason.PAGED_ATTENTION_NOT_SUPPORTED, None),
        (P.VLM_CB, P.VLM, NO_SDPA, "refuse", Reason.PAGED_ATTENTION_NOT_SUPPORTED, None),
        (P.AUTO, P.LM, STATELESS, "refuse", Reason.MODEL_LOAD_FAILED, None),
        (P.LM_CB, P.LM, STATELESS, "refuse", Reason.MODEL_LOAD_FAILED, None),
        (P.AUTO, P.LM, "some other failure", "refuse", Reason.MODEL_LOAD_FAILED, None),
        (P.LM_CB, P.LM, "out of memory", "refuse", Reason.MODEL_LOAD_FAILED, None),
    ],
)
def test_after_cb_failure(requested, kind, error, outcome, reason, resolved):
    plan = resolve.Plan(requested=requested, kind=kind, try_cb=True, allow_fallback=requested == P.AUTO)
    got = resolve.after_cb_failure(plan, error)
    assert isinstance(got, resolve.Legacy if outcome == "legacy" else resolve.Refuse)
    rep = got.report
    assert (rep.requested, rep.resolved, rep.reason) == (requested, resolved, reason)
    assert rep.continuousBatching is False
    assert rep.fallback is (outcome == "legacy")
    if reason == Reason.PAGED_ATTENTION_NOT_SUPPORTED:
        assert rep.message == error  # the original error, verbatim
    else:
        assert error in rep.message


@pytest.mark.parametrize("error", [STATELESS, BEAM_IDX])
def test_stateless_message_says_how_to_reexport(error):
    msg = resolve.load_failed_message(error)
    assert "--task text-generation-with-past" in msg
    assert error in msg


def test_cb_and_legacy_reports():
    plan = resolve.Plan(requested=P.AUTO, kind=P.VLM, try_cb=True, allow_fallback=True)
    rep = resolve.cb_report(plan)
    assert (rep.resolved, rep.continuousBatching, rep.fallback, rep.reason) == (
        P.VLM_CB,
        True,
        False,
        Reason.CONTINUOUS_BATCHING,
    )
    plan = resolve.Plan(requested=P.LM, kind=P.LM, try_cb=False, allow_fallback=False)
    rep = resolve.legacy_report(plan)
    assert (rep.resolved, rep.continuousBatching, rep.fallback, rep.reason) == (
        P.LM,
        False,
        False,
        Reason.LEGACY_REQUESTED,
    )


@pytest.mark.parametrize(
    ("structure", "reason"),
    [
        (resolve.Structure(has_sdpa=True, stateful=True, has_beam_idx=True), None),
        (
            resolve.Structure(has_sdpa=False, stateful=True, has_beam_idx=True, pa_error=NO_SDPA),
            Reason.PAGED_ATTENTION_NOT_SUPPORTED,
        ),
        (
            resolve.Structure(has_sdpa=False, stateful=True, has_beam_idx=True),
            Reason.PAGED_ATTENTION_NOT_SUPPORTED,
        ),
        (
            resolve.Structure(has_sdpa=True, stateful=False, has_beam_idx=False, pa_error=STATELESS),
            Reason.MODEL_LOAD_FAILED,
        ),
    ],
)
def test_structural_reason(structure, reason):
    assert resolve.structural_reason(structure) == reason
    assert structure.pa_supported is (reason is None)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (NO_SDPA, Reason.PAGED_ATTENTION_NOT_SUPPORTED),
        (STATELESS, Reason.MODEL_LOAD_FAILED),
        (BEAM_IDX, Reason.MODEL_LOAD_FAILED),
        ("", Reason.MODEL_LOAD_FAILED),
    ],
)
def test_classify_error(error, reason):
    assert resolve.classify_error(error) == reason


def test_inspect_dir(tmp_path):
    assert resolve.inspect_dir(tmp_path / "nope") == resolve.Layout(exists=False)
    assert resolve.inspect_dir(tmp_path).kind is None
    (tmp_path / "openvino_model.xml").write_text("<net/>")
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    lay = resolve.inspect_dir(tmp_path)
    assert (lay.kind, lay.max_position, lay.language_xml) == (P.LM, 2048, "openvino_model.xml")
    for f in (
        "openvino_text_embeddings_model.xml",
        "openvino_vision_embeddings_model.bin",
        "openvino_language_model.xml",
    ):
        (tmp_path / f).write_text("x")
    (tmp_path / "config.json").write_text('{"text_config": {"max_position_embeddings": 4096}}')
    lay = resolve.inspect_dir(tmp_path)
    assert (lay.kind, lay.max_position, lay.language_xml) == (P.VLM, 4096, "openvino_language_model.xml")
