"""kopf runs the operator's lifecycle only (startup and cleanup, while the process holds the Lease): it watches
no resource.

The LLMServings and their pods, Deployments and Services come from the operator's own reflectors
(reflector.py), and one sync pass per LLMServing applies and computes its status (handlers.refresh). A kopf
resource handler would make kopf list, queue as raw events and keep a memory record of every object again: a
bulk create of 1,000 LLMServings held ~1,900 raw events in kopf's queues for 100 s (docs/operator.md, Scale).
"""

from __future__ import annotations

import kopf
import ovserve_operator.handlers  # noqa: F401  (registers the handlers)
from ovserve_operator.settings import Settings, configure_kopf

RESOURCE_REGISTRIES = ("_indexing", "_watching", "_changing", "_spawning", "_webhooks")


def test_kopf_watches_no_resource():
    reg = kopf.get_default_registry()
    assert not [h.id for attr in RESOURCE_REGISTRIES for h in getattr(reg, attr).get_all_handlers()]


def test_kopf_runs_the_startup_and_cleanup():
    activities = {h.activity.value for h in kopf.get_default_registry()._activities.get_all_handlers()}
    assert {"startup", "cleanup"} <= activities


def test_configure_kopf():
    """What the settings do: no peering objects, no cluster scanning (least-privilege RBAC)."""
    ks = kopf.OperatorSettings()
    configure_kopf(ks, Settings(identity="op-1", watch_namespaces=("a",)))
    assert ks.peering.standalone is True and ks.peering.clusterwide is False and ks.scanning.disabled is True
