"""Fixtures of the routing tests: the LLMServing CRD fixture of the operator tests."""

from tests.operator.conftest import crd  # noqa: F401 (a fixture, used by name)
