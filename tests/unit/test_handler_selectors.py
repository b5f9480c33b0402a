"""Every kopf handler names its resource's API group and version.

A bare resource name ("pods") makes kopf scan every API group at start; one unavailable aggregated API (a
stopped metrics adapter whose APIService is still registered) then crash-looped the operator (seen in
`make demo` on a cluster that had run KEDA). With group and version given, kopf reads only that group.
"""

from __future__ import annotations

import kopf
import ovserve_operator.handlers  # noqa: F401  (registers the handlers)
import pytest
from ovserve_operator import spec as api

REGISTRIES = ("_indexing", "_watching", "_changing", "_spawning")


def handlers():
    reg = kopf.get_default_registry()
    return [h for attr in REGISTRIES for h in getattr(reg, attr).get_all_handlers()]


def test_the_operator_registers_its_handlers():
    ids = {h.id for h in handlers()}
    assert {"llmservings", "reconcile"} <= ids


def test_kopf_does_not_watch_the_children():
    """Pods, Deployments and Services come from the operator's own reflectors (reflector.py): a kopf handler on
    them would make kopf list and keep a memory record of every one again."""
    assert {h.selector.any_name for h in handlers()} == {api.PLURAL}


@pytest.mark.parametrize("handler", handlers(), ids=lambda h: f"{h.id}-{h.selector.any_name}")
def test_handler_names_group_and_version(handler):
    assert handler.selector.group is not None and handler.selector.version, handler.selector
