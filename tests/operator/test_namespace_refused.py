"""A watched namespace the operator may not read degrades that namespace only (issue 38), on the real apiserver
with real RBAC: the operator runs as a ServiceAccount bound by RoleBindings, as the chart binds it with
`watchNamespaces`.

Three watched namespaces: `ok` (every right the operator needs), `refused` (no RoleBinding: a namespace deleted
with its RoleBinding refuses every LIST for ever), `partial` (the LLMServings readable and their status
writable, the children not). Before, the refused namespace's reflectors never completed a LIST and the start
gate held every LLMServing of every namespace for ever, while /healthz stayed green.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from ..conftest import make_namespace
from .conftest import service_account_kubeconfig
from .test_operator_e2e import NOWHERE, UNSTARTED, condition, has_event, llms, status

# what the chart's ClusterRole grants for LLMServings and their children, and its leader-election Role
FULL = [
    {"apiGroups": ["ovserve.dev"], "resources": ["llmservings"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["ovserve.dev"], "resources": ["llmservings/status"], "verbs": ["patch"]},
    {"apiGroups": ["ovserve.dev"], "resources": ["llmservings/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create", "patch"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "patch"]},
    {
        "apiGroups": ["policy"],
        "resources": ["poddisruptionbudgets"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update", "create"]},
]
# the LLMServings only: their children cannot be listed
PARTIAL = [*FULL[:2], {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def _role(name: str, rules: list[dict]) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _binding(namespace: str, role: str, sa_namespace: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": sa_namespace}],
    }


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _lease_events(cluster, namespace: str, lease: str) -> list[dict]:
    out = cluster.kubectl(
        "get", "events", "-n", namespace, "-o", "json", "--field-selector", f"involvedObject.name={lease}"
    ).stdout
    return [e for e in json.loads(out)["items"] if e["involvedObject"]["kind"] == "Lease"]


@pytest.fixture
def other_namespaces(cluster):
    names = [make_namespace(cluster, "t-refused"), make_namespace(cluster, "t-partial")]
    yield names
    for name in names:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_a_refused_namespace_degrades_that_namespace_only(
    cluster, crd, start_operator, namespace, other_namespaces, tmp_path
):
    ok, (refused, partial) = namespace, other_namespaces
    full, part = f"ovserve-nsref-full-{ok}"[:63], f"ovserve-nsref-partial-{ok}"[:63]
    cluster.apply([_role(full, FULL), _role(part, PARTIAL)])
    try:
        # the ServiceAccount's cluster-wide rights: none; a RoleBinding in `ok` and in `partial` only
        with service_account_kubeconfig(cluster, ok, [], tmp_path / "operator.kubeconfig") as path:
            cluster.apply(_binding(ok, full, ok))
            cluster.apply(_binding(partial, part, ok))
            op = start_operator("op-ns", KUBECONFIG=str(path), OVSERVE_WATCH_NAMESPACES=f"{ok},{refused},{partial}")
            cluster.wait_for(lambda: (op.health() or {}).get("role") == "leader", 60, "leader")
            spec = {"model": UNSTARTED, "nodeSelector": NOWHERE}
            cluster.apply(llms("served", spec), ok)
            cluster.apply(llms("blind", spec), partial)

            # the readable namespace goes on: its children applied, its status written
            cluster.wait_for(
                lambda: condition(status(cluster, ok, "served"), "Ready").get("reason") == "Unschedulable",
                90,
                f"the status of {ok}/served (held by the refused namespace's reflectors before)",
            )
            # the partly readable one says why it cannot say more, with the apiserver's message, and a Warning
            ready = cluster.wait_for(
                lambda: (
                    (c := condition(status(cluster, partial, "blind"), "Ready")).get("reason") == "NamespaceUnreadable"
                    and c
                ),
                60,
                f"{partial}/blind: NamespaceUnreadable",
            )
            assert ready["status"] == "Unknown" and "forbidden" in ready["message"], ready
            assert status(cluster, partial, "blind")["phase"] == "Degraded"
            assert cluster.get("deployment", "blind", partial) is None  # nothing applied blind
            cluster.wait_for(
                lambda: has_event(cluster, partial, "blind", "Warning", "NamespaceUnreadable"), 30, "its Warning"
            )
            # the operator says which namespaces it cannot read: metric, /healthz (still 200), log, an Event
            metrics = _metrics(op.port)
            for kind in ("Pod", "Deployment", "Service", "LLMServing"):
                assert f'ovserve_operator_reflector_refused{{kind="{kind}",namespace="{refused}"}} 1.0' in metrics
            assert f'ovserve_operator_reflector_refused{{kind="Pod",namespace="{partial}"}} 1.0' in metrics
            health = op.health() or {}
            assert health.get("ok") is True and f"Pod in {refused}" in health.get("unreadable", []), health
            assert f"Pod in {refused}: refused (HTTP 403" in op.logs()
            cluster.wait_for(
                lambda: any(
                    e["reason"] == "NamespaceUnreadable" and refused in e["message"]
                    for e in _lease_events(cluster, ok, op.lease)
                ),
                30,
                "a Warning on the operator's Lease naming the refused namespace",
            )

            # granted again: the namespace is read and served as usual
            cluster.apply(_binding(partial, full, ok))
            cluster.wait_for(
                lambda: condition(status(cluster, partial, "blind"), "Ready").get("reason") == "Unschedulable",
                120,
                f"{partial}/blind served once readable",
            )
            assert f'ovserve_operator_reflector_refused{{kind="Pod",namespace="{partial}"}} 0.0' in _metrics(op.port)
            assert any(e["reason"] == "NamespaceReadable" for e in _lease_events(cluster, ok, op.lease))
    finally:
        cluster.kubectl("delete", "clusterrole", full, part, "--ignore-not-found", check=False)
