"""Speculative decoding on the real runtime: greedy output equals the output without speculation token for
token (draft model and prompt lookup), an unusable draft serves without speculation and says why, `required`
refuses, and a request's num_assistant_tokens is honoured or refused by name."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request

import pytest
from ovserve_runtime.engine import GenRequest
from ovserve_runtime.loader import LoadOptions, load
from ovserve_runtime.report import RuntimeReport
from ovserve_runtime.speculative import SpeculativeConfig

from .conftest import Server, runtime_env

pytestmark = pytest.mark.runtime

# bf16 (this CPU's default) verifies several tokens in one pass with other rounding than one token per pass, and
# a random model's logits are nearly flat: greedy ties flip. In f32 the outputs are equal token for token.
PROPS = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
PROMPTS = ("hello world the quick brown fox", "one two three four five one two three four", "cat house tree")


def _generate(engine, prompt: str, n: int = 40, **fields) -> list[int]:
    async def main():
        cfg = engine.new_config()
        cfg.max_new_tokens, cfg.ignore_eos = n, True
        for k, v in fields.items():
            setattr(cfg, k, v)
        req = GenRequest(config=cfg, max_new_tokens=n, input_ids=engine.tokenizer.encode(prompt).input_ids)
        req.loop, req.events = asyncio.get_running_loop(), asyncio.Queue()
        engine.submit(req)
        ids = []
        while True:
            kind, value = await asyncio.wait_for(req.events.get(), 60)
            if kind != "tokens":
                assert (kind, value) == ("done", "length")
                return ids
            ids += value

    return asyncio.run(main())


def _outputs(tiny_models, spec: SpeculativeConfig, process: bool = True):
    eng, _, _ = load(
        LoadOptions(
            model_path=str(tiny_models / "tiny-llm"), properties=PROPS, speculative=spec, engine_process=process
        )
    )
    try:
        return [_generate(eng, p) for p in PROMPTS], eng.speculative, eng.speculation_counts()
    finally:
        eng.stop()


@pytest.fixture(scope="module")
def plain(tiny_models):
    return _outputs(tiny_models, SpeculativeConfig())[0]


@pytest.mark.parametrize(
    "spec,process",
    [
        (dict(mode="draft", num_assistant_tokens=3), True),
        (dict(mode="draft", num_assistant_tokens=3), False),
        (dict(mode="draft", assistant_confidence_threshold=0.3), True),
        (dict(mode="promptLookup", num_assistant_tokens=3, max_ngram_size=2), True),
    ],
    ids=["draft-process", "draft-thread", "draft-confidence", "prompt-lookup"],
)
def test_greedy_output_with_speculation_equals_without(draft_models, plain, spec, process):
    if spec["mode"] == "draft":
        spec = {**spec, "draft_path": str(draft_models / "tiny-llm-draft"), "draft_properties": tuple(PROPS.items())}
    outputs, report, (steps, proposed, accepted) = _outputs(draft_models, SpeculativeConfig(**spec), process)
    assert report.resolved == spec["mode"] and report.reason == "Speculating" and not report.fallback
    assert outputs == plain  # token for token
    assert steps > 0 and 0 <= accepted <= steps * 3
    if spec.get("num_assistant_tokens") and spec["mode"] == "draft":
        assert proposed > 0
    else:
        assert proposed == 0  # a varying number, not exposed: not guessed


# (id, draft dir under the models, reason)
UNUSABLE = [
    ("other-tokenizer", "tiny-llm-draft-othertok", "DraftModelIncompatible"),
    ("missing", "no-such-draft", "DraftModelNotFound"),
    ("not-pageable", "tiny-llm-nosdpa", "DraftModelIncompatible"),
    ("a-vlm", "tiny-vlm", "DraftModelIncompatible"),
]


@pytest.mark.parametrize("draft,reason", [u[1:] for u in UNUSABLE], ids=[u[0] for u in UNUSABLE])
def test_an_unusable_draft_serves_without_speculation(draft_models, plain, draft, reason):
    spec = SpeculativeConfig(mode="draft", draft_path=str(draft_models / draft), draft_properties=tuple(PROPS.items()))
    outputs, report, counts = _outputs(draft_models, spec)
    assert (report.requested, report.resolved, report.fallback, report.reason) == ("draft", "none", True, reason)
    assert report.message
    assert outputs == plain and counts == (0, 0, 0)


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_served_with_a_draft_reports_and_counts(draft_models, server_factory):
    s = server_factory(
        draft_models / "tiny-llm",
        "--draft-model-path",
        str(draft_models / "tiny-llm-draft"),
        "--num-assistant-tokens",
        "4",
        "--inference-precision",
        "f32",
    )
    rep = RuntimeReport.model_validate(s.status())
    assert rep.speculative.resolved == "draft" and rep.speculative.reason == "Speculating"
    assert rep.decisions.speculative.value == "draft" and rep.decisions.speculative.source == "requested"
    assert rep.decisions.inferencePrecision.value == "f32"
    body = {"model": "tiny-llm", "prompt": "hello world", "max_tokens": 16, "ignore_eos": True}
    code, out = _post(s.url + "/v3/completions", {**body, "num_assistant_tokens": 2})  # honoured
    assert code == 200 and out["usage"]["completion_tokens"] == 16
    assert s.metric("ovserve_speculative_steps_total") > 0
    assert s.metric("ovserve_speculative_draft_tokens_total") > 0
    assert 0 <= s.metric("ovserve_speculative_acceptance_rate") <= 1


def test_num_assistant_tokens_refused_by_name_without_speculation(cb_server):
    body = {"model": "tiny-llm", "prompt": "hello", "max_tokens": 4, "num_assistant_tokens": 3}
    code, out = _post(cb_server.url + "/v3/completions", body)
    assert code == 400 and out["error"]["param"] == "num_assistant_tokens"
    assert RuntimeReport.model_validate(cb_server.status()).speculative.requested == "none"


def test_an_unusable_draft_is_reported_by_the_server(draft_models, server_factory):
    s = server_factory(draft_models / "tiny-llm", "--draft-model-path", str(draft_models / "tiny-llm-draft-othertok"))
    rep = RuntimeReport.model_validate(s.status())
    assert rep.state == "ready" and rep.speculative.fallback and rep.speculative.reason == "DraftModelIncompatible"
    assert "vocabularies differ" in rep.speculative.message
    assert rep.decisions.speculative.value == "none" and "DraftModelIncompatible" in rep.decisions.speculative.detail
    code, out = _post(s.url + "/v3/completions", {"model": "tiny-llm", "prompt": "hi", "num_assistant_tokens": 2})
    assert code == 400 and out["error"]["param"] == "num_assistant_tokens"


@pytest.mark.parametrize(
    "model,args,reason",
    [
        ("tiny-llm", ["--draft-model-path", "{models}/tiny-llm-draft-othertok"], "DraftModelIncompatible"),
        ("tiny-llm-nosdpa", ["--prompt-lookup"], "SpeculativeNeedsContinuousBatching"),
    ],
    ids=["other-tokenizer", "legacy-pipeline"],
)
def test_required_speculation_refuses(draft_models, tmp_path, model, args, reason):
    args = [a.format(models=draft_models) for a in args]
    s = Server(draft_models / model, *args, "--speculative-required", tmp=tmp_path)
    try:
        assert s.proc.wait(timeout=120) == 3
    finally:
        s.stop()
    rep = RuntimeReport.from_text(s.termination_log.read_text())
    assert rep is not None and rep.state == "failed"
    assert rep.pipeline.reason == "SpeculativeDecodingUnavailable" and rep.pipeline.message.startswith(reason)
    assert rep.speculative.reason == reason and rep.speculative.required


def test_prompt_lookup_on_the_legacy_pipeline_serves_without(draft_models, server_factory):
    s = server_factory(draft_models / "tiny-llm-nosdpa", "--prompt-lookup")
    rep = RuntimeReport.model_validate(s.status())
    assert rep.pipeline.resolved == "LM" and rep.speculative.reason == "SpeculativeNeedsContinuousBatching"


def test_flags_refuse_contradictions():
    for args in (
        ["--draft-model-path", "/x", "--prompt-lookup"],
        ["--num-assistant-tokens", "3"],
        ["--prompt-lookup", "--assistant-confidence-threshold", "0.5"],
        ["--draft-model-path", "/x", "--num-assistant-tokens", "3", "--assistant-confidence-threshold", "0.5"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "ovserve_runtime", "--model-path", "/m", *args],
            capture_output=True,
            text=True,
            env=runtime_env(),
            timeout=60,
        )
        assert proc.returncode == 2, (args, proc.stderr)
