"""A bounded run of the API fuzzer (benchmarks/fuzz_api.py) against a real ovserve-runtime on a tiny chat model:
a few hundred hostile requests (the issue's reproductions always among them, hypothesis bodies from the
runtime's own OpenAPI document) while steady streaming clients run. The worst a client may get is its own
4xx: no 5xx, no hang, no restart, no failure of the steady clients. The full run (10,000 requests) is the
benchmark of docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _load_fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_api", ROOT / "benchmarks" / "fuzz_api.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_api"] = mod  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


# Guards the fuzzer's findings (docs/benchmarks.md, "The API under a fuzzer"), fixed since: enum and const values
# reaching the output regex unescaped (`{"enum": [{"{J": null}]}`: XGrammar failed the engine step and the runtime
# exited), property names with a quote or a newline written raw, an empty enum giving "[,]" or "".
def test_hostile_requests_get_their_own_4xx_only(chat_models, server_factory):
    fuzz_api = _load_fuzzer()
    server = server_factory(chat_models / "tiny-qwen25", "--served-name", "fuzzed")
    cfg = fuzz_api.Config(
        requests=300,
        duration=60,
        concurrency=3,
        steady=2,
        baseline=4,
        request_timeout=20,
        corpus_fields=0.1,
        corpus_max=180,
        seed=38,
    )
    fig = fuzz_api.fuzz(fuzz_api.Target(server.url, server.proc.pid), cfg)
    summary = fuzz_api.report(fig, cfg)
    print(summary)
    assert fig.sent >= 250, summary
    assert fig.server_errors == 0, summary
    assert fig.hangs == 0 and fig.connection_errors == 0, summary
    assert fig.not_json_4xx == 0, summary
    assert fig.invalid_structured == 0, summary  # response_format: a finished answer is valid JSON
    assert fig.restarts == 0 and fig.engine_changes == 0, summary
    assert fig.baseline.failures == [] and fig.under_fuzz.failures == [], summary
    assert fig.under_fuzz.requests > 0, summary
