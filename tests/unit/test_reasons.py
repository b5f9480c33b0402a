"""The reason registry: docs/operator.md is generated from it, and every rule speaks in its constants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ovserve_operator import reasons as R
from ovserve_operator import rules
from ovserve_operator import spec as api
from ovserve_runtime.report import Reason as RuntimeReason

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_docs_table_is_generated_from_the_registry():
    text = DOC.read_text()
    assert R.render_into(text) == text, (
        "docs/operator.md drifted: python -m ovserve_operator.reasons --write docs/operator.md"
    )


def test_docs_list_the_ready_chain_in_order():
    text = DOC.read_text()
    listed = text[text.index("The Ready chain, in order:") : text.index("While Ready is not True")]
    names = re.findall(r"`([a-z_]+)`", listed)
    assert names == [rule.__name__ for _, rule in rules.READY_CHAIN]


def test_every_reason_is_a_valid_condition_reason_with_a_doc():
    pattern = re.compile(api.REASON_PATTERN)
    for name, doc in R.REGISTRY.items():
        assert pattern.match(name) and doc.doc and "\n" not in doc.doc, name
    assert {r.value for r in RuntimeReason} <= set(R.REGISTRY)


@pytest.mark.parametrize(
    "status,reason,phase",
    [
        ("True", "AllReplicasReady", "Ready"),
        ("False", "ModelNotFound", "Failed"),
        ("False", "ApplyFailed", "Failed"),
        ("False", "ModelDownloading", "Pending"),
        ("False", "PodInitializing", "Pending"),
        ("False", "CreateContainerConfigError", "Failed"),
        ("Unknown", "ReadbackFailed", "Loading"),
        ("False", "SomeNewKubeletReason", "Loading"),
    ],
)
def test_phase_of(status, reason, phase):
    assert R.phase_of(status, reason).value == phase


def test_chains_end_with_a_rule_that_always_answers():
    empty = rules.Facts(
        name="x", namespace="ns", generation=1, spec=api.parse_spec({"model": {"hostPath": {"path": "/m"}}})
    )
    for chain in rules.CHAINS.values():
        assert chain[-1][1](empty) is not None
