"""End-to-end: sane defaults for tenants and nodes (issue 26 §5, §6), on the real cluster.

- The CRD refuses a servedName that reads as a flag and rollout bounds that cannot progress.
- Rendered children carry the device-aware rollout strategy, default requests (reported in
  status.resourceDefaults, removed from it when the spec sets them) and a sizeLimit on the download emptyDir.
- spec.nodeSelector is PolicyDenied when scheduling pass-through is off.
- A GPU pool sized to the replicas: the device-aware default rolls; the CPU default (maxSurge 1) would not.
- An optional NetworkPolicy; an operator upgrade rolls within the rollout budget.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import HACK, run_on_host_network

from .test_operator_e2e import NOWHERE, UNSTARTED, condition, llms, models_claim, pvc_model, status
from .test_security import STANDIN

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


def template_hash(cluster, namespace: str, name: str) -> str | None:
    dep = cluster.get("deployment", name, namespace) or {}
    return ((dep.get("spec") or {}).get("template", {}).get("metadata", {}).get("annotations") or {}).get(
        "ovserve.dev/template-hash"
    )


def test_an_operator_upgrade_rolls_within_the_budget(cluster, start_operator, namespace):
    """Three LLMServings; the operator restarts with a setting that changes every pod template (as an
    upgrade does) and a budget of 1: one rolls, the others are held (status.rollout) on their template
    until a slot frees; a spec change of a held one applies at once. replicas 0: a rollout finishes at once."""
    names = ["u1", "u2", "u3"]
    old = start_operator("op-old")
    cluster.wait_for(lambda: (old.health() or {}).get("kopf") or not old.alive(), 60, "operator leader")
    for n in names:
        cluster.apply(llms(n, {"model": UNSTARTED, "nodeSelector": NOWHERE, "replicas": 0}), namespace)
    before = {n: cluster.wait_for(lambda n=n: template_hash(cluster, namespace, n), 60, f"{n} rendered") for n in names}
    old.stop()

    new = start_operator("op-new", OVSERVE_RUNTIME_PRESTOP_SECONDS="7", OVSERVE_ROLLOUT_BUDGET="1")
    cluster.wait_for(lambda: (new.health() or {}).get("kopf") or not new.alive(), 60, "new operator leader")

    def held() -> list[str]:
        return [n for n in names if (status(cluster, namespace, n).get("rollout") or {}).get("held")]

    waiting = cluster.wait_for(lambda: len(h := held()) == 2 and h, 60, "two LLMServings held")
    rolled = [n for n in names if template_hash(cluster, namespace, n) != before[n]]
    assert len(rolled) == 1 and rolled[0] not in waiting, rolled
    for n in waiting:
        st = status(cluster, namespace, n)
        assert "OVSERVE_ROLLOUT_BUDGET" in st["rollout"]["message"], st
        assert template_hash(cluster, namespace, n) == before[n]
    # the spec of a held one changes: applied at once, no slot needed
    cluster.kubectl("patch", "llmserving", waiting[0], "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":1}}')
    cluster.wait_for(
        lambda: template_hash(cluster, namespace, waiting[0]) != before[waiting[0]], 30, "the spec change applied"
    )
    # the slots free as rollouts finish: every one reaches the new template, none held any more
    cluster.wait_for(
        lambda: all(template_hash(cluster, namespace, n) != before[n] for n in names) and not held(),
        120,
        "every LLMServing on the new template",
    )


def test_a_held_llmserving_counts_its_pods_as_current(cluster, start_operator, namespace):
    """Held by the budget, an LLMServing's pods (of the template the operator no longer renders) are its
    current pods: no status.previous; the one that rolls shows its old pod as previous."""
    names = ["h1", "h2"]
    old = start_operator("op-old")
    cluster.wait_for(lambda: (old.health() or {}).get("kopf") or not old.alive(), 60, "operator leader")
    for n in names:
        cluster.apply(llms(n, {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    for n in names:
        cluster.wait_for(lambda n=n: status(cluster, namespace, n).get("replicas") == 1, 60, f"{n}: a pod")
    old.stop()
    new = start_operator("op-new", OVSERVE_RUNTIME_PRESTOP_SECONDS="7", OVSERVE_ROLLOUT_BUDGET="1")
    cluster.wait_for(lambda: (new.health() or {}).get("kopf") or not new.alive(), 60, "new operator leader")

    def split():
        sts = {n: status(cluster, namespace, n) for n in names}
        held = [n for n, st in sts.items() if (st.get("rollout") or {}).get("held")]
        rolling = [n for n, st in sts.items() if st.get("rollout") and not st["rollout"]["held"]]
        return (
            (held, rolling, sts) if len(held) == 1 and len(rolling) == 1 and sts[rolling[0]].get("previous") else None
        )

    (held,), (rolling,), sts = cluster.wait_for(split, 60, "one held, one rolling with its old pod as previous")
    assert sts[held].get("previous") is None and sts[held]["replicas"] == 1, sts[held]
    assert sts[rolling]["previous"]["replicas"] == 1, sts[rolling]


@pytest.fixture(scope="module")
def standin(cluster) -> str:
    """The stand-in runtime image (hack/standin): ready at once, on any device."""
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "standin"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return STANDIN


def test_gpu_rollout_fits_a_pool_sized_to_the_replicas(
    cluster, start_operator, namespace, device_plugin, tiny_models, standin
):
    """Two ready GPU pods on a node with two (fake) GPUs, runtime pods of the stand-in image (ready at once).
    A spec change rolls with the GPU default (maxSurge 0, maxUnavailable 1): one old pod goes, its device
    serves the new one. With maxSurge 1 / maxUnavailable 0 (the old hard-coded strategy) the surge pod never
    gets a device and the rollout never moves: the deadlock the default avoids."""
    device_plugin.start(2)
    cluster.wait_for(lambda: device_plugin.allocatable() == 2, 60, "two allocatable GPUs")
    with models_claim(cluster, namespace, tiny_models):
        op = start_operator("op-gpu", OVSERVE_ALLOWED_IMAGES="localhost/ovserve-standin")
        cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
        spec = {"model": pvc_model("tiny-llm"), "device": "GPU", "replicas": 2, "image": standin}
        cluster.apply(llms("pool", spec), namespace)

        def settled(generation: int):
            obj = cluster.get("llmserving", "pool", namespace) or {}
            st = obj.get("status") or {}
            done = st.get("observedGeneration") == generation and st.get("readyReplicas") == 2
            return done and not st.get("previous") and st

        cluster.wait_for(lambda: settled(1), 180, "2 ready GPU pods")
        patch = {"spec": {"serving": {"maxQueuedRequests": 8}}}
        cluster.kubectl("patch", "llmserving", "pool", "-n", namespace, "--type=merge", "-p", json.dumps(patch))
        cluster.wait_for(lambda: settled(2), 180, "the rollout done on the same two GPUs")

        # the old strategy on the full pool: the surge pod stays Pending, the old pods keep serving
        patch = {"spec": {"serving": {"maxQueuedRequests": 9}, "rollout": {"maxSurge": 1, "maxUnavailable": 0}}}
        cluster.kubectl("patch", "llmserving", "pool", "-n", namespace, "--type=merge", "-p", json.dumps(patch))

        def stuck():
            pods = cluster.get("pods", namespace=namespace)["items"]
            pending = [
                c.get("message", "")
                for p in pods
                for c in p["status"].get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ]
            return pending and "gpu.intel.com/i915" in pending[0] and pending

        cluster.wait_for(stuck, 90, "the surge pod unschedulable (no free GPU)")

        def old_pods_serve():  # the status follows the pods on its next refresh, not at once
            st = status(cluster, namespace, "pool")
            return (st.get("previous") or {}).get("readyReplicas") == 2 and st.get("readyReplicas") == 0 and st

        cluster.wait_for(old_pods_serve, 60, "status: the 2 old pods serving apart, none of the new spec ready")
