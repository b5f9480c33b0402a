"""Every refusal visible (issue 37): a bounded metric label per refused field and a rate-limited log line."""

from __future__ import annotations

import logging

import pytest
from ovserve_runtime.metrics import Metrics
from ovserve_runtime.refusals import LOG_BURST, LOG_WINDOW_S, MAX_LABEL_SETS, Refusals, param_label


@pytest.mark.parametrize(
    ("param", "code", "label"),
    [
        ("messages[3].content[12].image_url", "invalid_value", "messages[].content[].image_url"),
        ("max_token", "unknown_parameter", "(unknown field)"),  # the client's own name: never a label
        (None, "invalid_json", ""),
        ("x" * 500, "invalid_value", "x" * 64),
        ("reasoning.effort", "unsupported_value", "reasoning.effort"),
    ],
)
def test_labels_are_bounded_whatever_the_client_sent(param, code, label):
    assert param_label(param, code) == label


def _count(m: Metrics, **labels) -> float:
    return m.registry.get_sample_value("ovserve_refusals_total", labels) or 0.0


def test_counted_by_status_code_and_param_with_a_bounded_number_of_label_sets():
    m = Metrics()
    r = Refusals(m.refusals)
    r.record("POST", "/v1/chat/completions", 400, "unknown_parameter", "max_token")
    r.record("POST", "/v1/chat/completions", 400, "unknown_parameter", "another_field")
    assert _count(m, status="400", code="unknown_parameter", param="(unknown field)") == 2
    for i in range(MAX_LABEL_SETS + 10):
        r.record("POST", "/v1/x", 400, f"code{i}", "p")
    assert _count(m, status="400", code="(other)", param="(other)") == 11  # one set was already taken


def test_the_log_is_rate_limited_and_says_what_it_held_back(caplog):
    now = [0.0]
    r = Refusals(Metrics().refusals, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="ovserve.refusals"):
        for _ in range(LOG_BURST + 5):
            r.record("POST", "/v1/responses", 400, "invalid_value", "text.format")
        assert len(caplog.records) == LOG_BURST
        line = caplog.records[0].getMessage()
        assert line == "refused POST /v1/responses: 400 code=invalid_value param=text.format"
        now[0] = LOG_WINDOW_S
        r.record("GET", "/v1/responses/x", 404, "not_found", None)
    assert caplog.records[-1].getMessage().endswith("(5 more refusals not logged before this one)")
