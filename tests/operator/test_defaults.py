"""End-to-end: sane defaults for tenants and nodes (issue 26 §5, §6), on the real cluster.

- The CRD refuses a servedName that reads as a flag and rollout bounds that cannot progress.
- Rendered children carry the device-aware rollout strategy, default requests (reported in
  status.resourceDefaults, removed from it when the spec sets them) and a sizeLimit on the download emptyDir.
- spec.nodeSelector is PolicyDenied when scheduling pass-through is off.
"""

from __future__ import annotations

import json

import pytest

from .test_operator_e2e import NOWHERE, UNSTARTED, condition, llms, status

pytestmark = [pytest.mark.cluster]


@pytest.mark.parametrize(
    "spec,refusal",
    [
        ({"model": {**UNSTARTED, "servedName": "-x"}}, "spec.model.servedName"),
        ({"model": {**UNSTARTED, "servedName": "--help"}}, "spec.model.servedName"),
        ({"model": UNSTARTED, "rollout": {"maxSurge": 0, "maxUnavailable": "0%"}}, "must not both be 0"),
        ({"model": UNSTARTED, "rollout": {"maxSurge": -1}}, "must not be negative"),
        ({"model": UNSTARTED, "rollout": {"maxSurge": "1x"}}, "spec.rollout.maxSurge"),
        ({"model": UNSTARTED, "rollout": {"strategy": "Recreate", "maxSurge": 1}}, "RollingUpdate only"),
        ({"model": {"huggingFace": {"repo": "a/b", "sizeLimit": "lots"}}}, "sizeLimit"),
    ],
    ids=["dash", "flag", "both-zero", "negative", "not-a-percent", "recreate-bounds", "size-limit"],
)
def test_crd_refuses(cluster, crd, namespace, spec, refusal):
    proc = cluster.create(llms("bad", spec), namespace, check=False)
    assert proc.returncode != 0 and refusal in proc.stderr, proc.stderr
    assert cluster.get("llmserving", "bad", namespace) is None


def test_crd_admits_percent_and_int_bounds(cluster, crd, namespace):
    for i, rollout in enumerate(({"maxSurge": "25%", "maxUnavailable": 0}, {"maxSurge": 0, "maxUnavailable": 1})):
        proc = cluster.create(llms(f"ok{i}", {"model": UNSTARTED, "rollout": rollout}), namespace, check=False)
        assert proc.returncode == 0, proc.stderr


def deployment(cluster, namespace: str, name: str) -> dict:
    return cluster.wait_for(lambda: cluster.get("deployment", name, namespace), 60, f"deployment {name}")


def test_rendered_defaults_and_status(cluster, operator, namespace):
    cluster.apply(llms("gpu", {"model": UNSTARTED, "device": "GPU", "nodeSelector": NOWHERE}), namespace)
    spec = {"model": UNSTARTED, "nodeSelector": NOWHERE, "scheduler": {"cacheSizeGB": 2}}
    cluster.apply(llms("cpu", spec), namespace)

    gpu = deployment(cluster, namespace, "gpu")
    # a GPU pool sized to the replicas: no surge pod that could never get a device
    assert gpu["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    pod = gpu["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "100m", "memory": "1Gi"} and res["limits"] == {"gpu.intel.com/i915": "1"}
    assert {"name": "model", "emptyDir": {"sizeLimit": "20Gi"}} in pod["volumes"]

    cpu = deployment(cluster, namespace, "cpu")
    assert cpu["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # the KV cache the spec sizes is added to the floor
    assert cpu["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "3Gi"}
    }
    got = cluster.wait_for(
        lambda: status(cluster, namespace, "cpu").get("resourceDefaults"), 60, "status.resourceDefaults"
    )
    assert got["cpu"] == "100m" and got["memory"] == "3Gi"
    assert "OVSERVE_DEFAULT_MEMORY_REQUEST" in got["message"] and "cacheSizeGB" in got["message"]

    # the spec sizes memory itself: only cpu stays defaulted, and status says so (the old memory goes)
    patch = {"spec": {"resources": {"requests": {"memory": "2Gi"}}}}
    cluster.kubectl("patch", "llmserving", "cpu", "-n", namespace, "--type=merge", "-p", json.dumps(patch))
    got = cluster.wait_for(
        lambda: (d := status(cluster, namespace, "cpu").get("resourceDefaults") or {}).get("memory") is None and d,
        60,
        "status.resourceDefaults without memory",
    )
    assert got["cpu"] == "100m"
    cluster.wait_for(
        lambda: (
            deployment(cluster, namespace, "cpu")["spec"]["template"]["spec"]["containers"][0]["resources"]
            == {"requests": {"cpu": "100m", "memory": "2Gi"}}
        ),
        60,
        "the spec's memory request rendered",
    )


def test_node_selector_is_gated_by_scheduling_passthrough(cluster, start_operator, namespace):
    op = start_operator("op-nosched", OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH="false")
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    cluster.apply(llms("pinned", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    ready = cluster.wait_for(
        lambda: (c := condition(status(cluster, namespace, "pinned"), "Ready")).get("reason") == "PolicyDenied" and c,
        90,
        "PolicyDenied",
    )
    assert "spec.nodeSelector" in ready["message"] and "OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH" in ready["message"]
    assert cluster.get("deployment", "pinned", namespace) is None  # nothing rendered with the field dropped


def test_network_policy_follows_the_spec(cluster, start_operator, namespace):
    op = start_operator(
        "op-netpol",
        OVSERVE_NETWORK_POLICIES="true",
        POD_NAMESPACE="ovserve-system",
        OVSERVE_OPERATOR_POD_LABELS="app.kubernetes.io/component=operator",
    )
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    spec = {"model": UNSTARTED, "nodeSelector": NOWHERE, "networkPolicy": {"allowedNamespaces": ["monitoring"]}}
    cluster.apply(llms("fenced", spec), namespace)
    np = cluster.wait_for(lambda: cluster.get("networkpolicy", "fenced", namespace), 60, "the NetworkPolicy")
    llm = cluster.get("llmserving", "fenced", namespace)
    assert np["metadata"]["ownerReferences"][0]["uid"] == llm["metadata"]["uid"]
    assert np["spec"]["podSelector"]["matchLabels"] == {
        "ovserve.dev/llmserving": "fenced",
        "app.kubernetes.io/component": "runtime",
    }
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    name = "kubernetes.io/metadata.name"
    assert rule["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchExpressions": [{"key": name, "operator": "In", "values": ["monitoring"]}]}},
        {
            "namespaceSelector": {"matchLabels": {name: "ovserve-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
        },
    ]
    # turned off: the operator deletes the one it made
    patch = {"spec": {"networkPolicy": {"enabled": False}}}
    cluster.kubectl("patch", "llmserving", "fenced", "-n", namespace, "--type=merge", "-p", json.dumps(patch))
    cluster.wait_for(lambda: cluster.get("networkpolicy", "fenced", namespace) is None, 60, "the NetworkPolicy gone")
    assert cluster.get("deployment", "fenced", namespace) is not None
