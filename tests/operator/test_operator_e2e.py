"""End-to-end: the operator (local process) against the real one-node cluster, runtime pods on the node.

Runtime cases use the project image and the tiny models; the control-plane cases (CEL, scale, GC,
GPU scheduling, rollout, leader election) use pods that never start (nothing matches their node
selector), so they need neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakehub import fake_hub

from .conftest import service_account_kubeconfig

pytestmark = [pytest.mark.cluster]

NOWHERE = {"ovserve.dev/test-nowhere": "true"}  # no node has it: pods stay Pending


def llms(name: str, spec: dict) -> dict:
    return {
        "apiVersion": "ovserve.dev/v1alpha1",
        "kind": "LLMServing",
        "metadata": {"name": name},
        "spec": spec,
    }


def pvc_model(name: str) -> dict:
    return {"pvc": {"claimName": "models", "path": name}}


# Admitted by the restricted PSA (emptyDir + init container), never downloaded: pods do not start.
UNSTARTED = {"huggingFace": {"repo": "ovserve-test/never-downloaded"}}


def row(cluster, namespace: str, name: str) -> dict[str, str]:
    rows = {r["NAME"]: r for r in cluster.table("llmservings", "-n", namespace)}
    return rows.get(name, {})


def status(cluster, namespace: str, name: str) -> dict:
    obj = cluster.get("llmserving", name, namespace) or {}
    return obj.get("status") or {}


def condition(st: dict, ctype: str) -> dict:
    return next((c for c in st.get("conditions") or [] if c["type"] == ctype), {})


def events(cluster, namespace: str, name: str) -> list[dict]:
    out = cluster.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "-o",
        "json",
        "--field-selector",
        f"involvedObject.kind=LLMServing,involvedObject.name={name}",
    ).stdout
    return json.loads(out)["items"]


def has_event(cluster, namespace, name, type_, reason) -> bool:
    return any(e["type"] == type_ and e["reason"] == reason for e in events(cluster, namespace, name))


def wait_phase(cluster, namespace, name, phase, timeout=240):
    return cluster.wait_for(
        lambda: (s := status(cluster, namespace, name)).get("phase") == phase and s,
        timeout,
        f"llmserving {name} phase {phase}",
    )


# --------------------------------------------------------------------------- apiserver validation


def test_crd_explain_and_validation(cluster, crd, namespace):
    explain = cluster.kubectl("explain", "llmserving.spec").stdout
    assert "pipelineType" in explain and "continuous batching" in explain
    model = cluster.kubectl("explain", "llmserving.spec.model").stdout
    assert "hostPath" in model and "huggingFace" in model and "PersistentVolumeClaim" in model

    bad = llms("two-sources", {"model": {"hostPath": {"path": "/m"}, "pvc": {"claimName": "models"}}})
    proc = cluster.create(bad, namespace, check=False)
    assert proc.returncode != 0
    assert "exactly one of model.pvc, model.hostPath, model.huggingFace must be set" in proc.stderr

    proc = cluster.create(
        llms("bad-type", {"model": {"hostPath": {"path": "/m"}}, "pipelineType": "CB"}),
        namespace,
        check=False,
    )
    assert proc.returncode != 0 and 'Unsupported value: "CB"' in proc.stderr

    proc = cluster.create(llms("dotted.name", {"model": {"hostPath": {"path": "/m"}}}), namespace, check=False)
    assert proc.returncode != 0 and "DNS-1035" in proc.stderr

    # defaults are applied by the apiserver
    cluster.create(llms("defaults", {"model": {"hostPath": {"path": "/m"}}}), namespace)
    spec = cluster.get("llmserving", "defaults", namespace)["spec"]
    assert (spec["pipelineType"], spec["device"], spec["replicas"]) == ("AUTO", "CPU", 1)


# --------------------------------------------------------------------------- control-plane behaviour


def test_pods_refused_by_admission_show_a_clear_reason(cluster, operator, namespace):
    # hostPath is a dev-only source: the restricted Pod Security Standard refuses the pods
    cluster.apply(llms("hp", {"model": {"hostPath": {"path": "/var/cache/ovserve/models/tiny-llm"}}}), namespace)
    st = wait_phase(cluster, namespace, "hp", "Failed", 90)
    ready = condition(st, "Ready")
    assert ready["reason"] == "FailedCreate"
    assert "violates PodSecurity" in ready["message"] and "hostPath" in ready["message"]
    cluster.wait_for(
        lambda: has_event(cluster, namespace, "hp", "Warning", "FailedCreate"),
        30,
        "Warning FailedCreate event",
    )


def test_children_scale_rollout_and_gc(cluster, operator, namespace):
    cluster.apply(llms("ctl", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    dep = cluster.wait_for(lambda: cluster.get("deployment", "ctl", namespace), 60, "Deployment ctl")
    svc = cluster.wait_for(lambda: cluster.get("service", "ctl", namespace), 30, "Service ctl")
    owner = cluster.get("llmserving", "ctl", namespace)
    for obj in (dep, svc):
        ref = obj["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "LLMServing",
            "ctl",
            owner["metadata"]["uid"],
            True,
        )
    pod_spec = dep["spec"]["template"]["spec"]
    c = pod_spec["containers"][0]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod_spec["automountServiceAccountToken"] is False
    # the restricted PSA namespace admitted the pod: the security context is right
    pods = cluster.wait_for(lambda: cluster.get("pods", namespace=namespace)["items"], 60, "a runtime pod")
    assert pods[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ovserve-operator"

    st = wait_phase(cluster, namespace, "ctl", "Pending", 60)
    cluster.wait_for(
        lambda: condition(status(cluster, namespace, "ctl"), "Ready").get("reason") == "Unschedulable",
        60,
        "Ready reason Unschedulable",
    )
    assert st["endpoint"] == f"http://ctl.{namespace}.svc:8000/v3"
    assert row(cluster, namespace, "ctl")["READY"] == "0/1"

    # scale subresource
    cluster.kubectl("scale", "llmserving/ctl", "-n", namespace, "--replicas=2")
    cluster.wait_for(
        lambda: cluster.get("deployment", "ctl", namespace)["spec"]["replicas"] == 2,
        60,
        "Deployment scaled to 2",
    )
    cluster.wait_for(lambda: status(cluster, namespace, "ctl").get("replicas") == 2, 60, "status.replicas 2")
    scale = json.loads(
        cluster.kubectl(
            "get", "--raw", f"/apis/ovserve.dev/v1alpha1/namespaces/{namespace}/llmservings/ctl/scale"
        ).stdout
    )
    assert scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 2
    assert "ovserve.dev/llmserving=ctl" in scale["status"]["selector"]
    cluster.wait_for(lambda: row(cluster, namespace, "ctl").get("READY") == "0/2", 30, "READY 0/2")

    # a spec change rolls out a new template
    old_hash = cluster.get("deployment", "ctl", namespace)["spec"]["template"]["metadata"]["annotations"][
        "ovserve.dev/template-hash"
    ]
    cluster.kubectl(
        "patch",
        "llmserving",
        "ctl",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"pipelineType": "LM"}}',
    )

    def rolled():
        d = cluster.get("deployment", "ctl", namespace)
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        return (
            d["spec"]["template"]["metadata"]["annotations"]["ovserve.dev/template-hash"] != old_hash
            and args[args.index("--pipeline-type") + 1] == "LM"
        )

    cluster.wait_for(rolled, 60, "Deployment template with --pipeline-type LM")
    cluster.wait_for(
        lambda: (
            status(cluster, namespace, "ctl").get("observedGeneration")
            == cluster.get("llmserving", "ctl", namespace)["metadata"]["generation"]
        ),
        60,
        "observedGeneration to follow",
    )
    assert row(cluster, namespace, "ctl")["REQUESTED"] == "LM"

    # the operator wrote nothing on the LLMServing but its status: no kopf progress, no annotation, no finalizer
    obj = cluster.get("llmserving", "ctl", namespace)
    assert "kopf" not in obj.get("status", {})
    assert not [k for k in obj["metadata"].get("annotations", {}) if k.startswith(("ovserve.dev/", "kopf."))]
    assert not obj["metadata"].get("finalizers")  # deletion never waits for the operator
    shown = cluster.kubectl("get", "llmserving", "ctl", "-n", namespace, "-o", "json", "--show-managed-fields")
    ours = [m for m in json.loads(shown.stdout)["metadata"]["managedFields"] if m["manager"] == "ovserve-operator"]
    assert ours and all(m.get("subresource") == "status" for m in ours), ours

    # deleting the CR garbage-collects the children
    cluster.kubectl("delete", "llmserving", "ctl", "-n", namespace, "--wait=true", timeout=60)
    cluster.wait_for(
        lambda: (
            cluster.get("deployment", "ctl", namespace) is None and cluster.get("service", "ctl", namespace) is None
        ),
        90,
        "children garbage-collected",
    )


def test_gpu_without_gpu_node_is_pending_unschedulable(cluster, operator, namespace, device_plugin):
    device_plugin.stop()
    cluster.wait_for(lambda: device_plugin.allocatable() == 0, 60, "no allocatable GPUs")
    cluster.apply(llms("gpu", {"model": UNSTARTED, "device": "GPU"}), namespace)
    st = wait_phase(cluster, namespace, "gpu", "Pending", 90)
    ready = condition(st, "Ready")
    cluster.wait_for(
        lambda: condition(status(cluster, namespace, "gpu"), "Ready").get("reason") == "Unschedulable",
        60,
        "Ready reason Unschedulable",
    )
    ready = condition(status(cluster, namespace, "gpu"), "Ready")
    assert ready["status"] == "False"
    assert "gpu.intel.com/i915" in ready["message"]
    r = row(cluster, namespace, "gpu")
    assert (r["DEVICE"], r["PHASE"], r["READY"], r["RESOLVED"]) == ("GPU", "Pending", "0/1", "")
    wide = {x["NAME"]: x for x in cluster.table("llmservings", "-n", namespace, "-o", "wide")}
    assert wide["gpu"]["REASON"] == "Unschedulable"
    cluster.wait_for(
        lambda: has_event(cluster, namespace, "gpu", "Warning", "Unschedulable"),
        30,
        "Warning event Unschedulable",
    )
    pod = cluster.get("pods", namespace=namespace)["items"][0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["gpu.intel.com/i915"] == "1"


def test_leader_election_two_replicas_failover(cluster, start_operator, namespace):
    a = start_operator("op-a")
    cluster.wait_for(lambda: (a.health() or {}).get("role") == "leader", 60, "op-a leader")
    b = start_operator("op-b")
    cluster.wait_for(lambda: (b.health() or {}).get("role") == "standby", 60, "op-b standby")

    cluster.apply(llms("one", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    cluster.wait_for(lambda: status(cluster, namespace, "one").get("phase"), 60, "status from the leader")
    time.sleep(3)
    assert (b.health() or {}).get("role") == "standby"
    assert "starting kopf" not in b.logs() and "applied" not in b.logs()
    assert "applied Service/one, Deployment/one" in a.logs()

    a.kill()  # SIGKILL: no release, the standby must wait for the lease to expire (6 s here)
    t0 = time.monotonic()
    cluster.wait_for(lambda: (b.health() or {}).get("role") == "leader", 60, "op-b to take over")
    took = time.monotonic() - t0
    assert took < 30, took
    lease = cluster.get("lease", b.lease, namespace)
    assert lease["spec"]["holderIdentity"] == "op-b"

    cluster.apply(llms("two", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    cluster.wait_for(lambda: cluster.get("deployment", "two", namespace), 60, "the new leader to act")
    cluster.wait_for(lambda: status(cluster, namespace, "two").get("phase") == "Pending", 60, "status of two")

    # a clean stop releases the lease at once
    c = start_operator("op-c")
    cluster.wait_for(lambda: (c.health() or {}).get("role") == "standby", 60, "op-c standby")
    assert b.stop() == 0
    t0 = time.monotonic()
    cluster.wait_for(lambda: (c.health() or {}).get("role") == "leader", 30, "op-c to take over after release")
    assert time.monotonic() - t0 < 6  # faster than the lease duration: it was released


# --------------------------------------------------------------------------- the real runtime


@pytest.fixture
def runtime(cluster, project_image, tiny_models, namespace):
    """The tiny models on a PVC "models" in the test namespace (restricted PSA refuses hostPath volumes):
    a hostPath PersistentVolume over the models directory, bound to the claim by name."""
    with models_claim(cluster, namespace, tiny_models) as root:
        yield root


@contextlib.contextmanager
def models_claim(cluster, namespace: str, root: Path, claim: str = "models") -> Iterator[Path]:
    """A claim `claim` over the host directory `root` (a hostPath PV bound by name); removed afterwards."""
    pv = f"{claim}-{namespace}"[:63]
    storage_class = f"ovserve-test-{claim}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {"ovserve.dev/test": "true"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": storage_class,
                "hostPath": {"path": str(root), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": storage_class,
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        namespace,
    )
    try:
        cluster.wait_for(
            lambda: (cluster.get("pvc", claim, namespace) or {}).get("status", {}).get("phase") == "Bound",
            60,
            f"PVC {claim} bound",
        )
        yield root
    finally:
        cluster.kubectl("delete", "pvc", claim, "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_auto_on_sdpa_model_resolves_cb(cluster, operator, namespace, runtime):
    cluster.apply(llms("cb", {"model": pvc_model("tiny-llm")}), namespace)
    st = wait_phase(cluster, namespace, "cb", "Ready")
    r = row(cluster, namespace, "cb")
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"], r["DEVICE"], r["READY"], r["PHASE"]) == (
        "AUTO",
        "LM_CB",
        "",
        "CPU",
        "1/1",
        "Ready",
    )
    assert st["pipeline"]["continuousBatching"] is True and st["pipeline"]["fallback"] is False
    assert condition(st, "Ready")["status"] == "True"
    assert condition(st, "PipelineResolved")["reason"] == "ContinuousBatching"
    assert condition(st, "Fallback")["status"] == "False"
    assert st["observedGeneration"] == cluster.get("llmserving", "cb", namespace)["metadata"]["generation"]
    cluster.wait_for(lambda: has_event(cluster, namespace, "cb", "Normal", "Ready"), 30, "Normal Ready event")
    assert not has_event(cluster, namespace, "cb", "Warning", "PipelineFallback")
    # what the pod can serve, read back from its runtime (continuous batching: logprobs too)
    caps = st["capabilities"]
    assert (caps["structuredOutput"], caps["logprobs"], caps["images"], caps["task"]) == (
        True,
        True,
        False,
        "text-generation",
    )
    assert caps["maxContext"] > 0 and caps.get("toolParser") is None
    described = cluster.kubectl("describe", "llmserving", "cb", "-n", namespace).stdout
    assert "Capabilities:" in described and re.search(r"Structured Output:\s+true", described), described


def test_auto_on_sdpa_free_model_falls_back_visibly(cluster, operator, namespace, runtime):
    cluster.apply(llms("fb", {"model": pvc_model("tiny-llm-nosdpa")}), namespace)
    st = wait_phase(cluster, namespace, "fb", "Ready")
    r = row(cluster, namespace, "fb")
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"], r["READY"], r["PHASE"]) == (
        "AUTO",
        "LM",
        "PagedAttentionNotSupported",
        "1/1",
        "Ready",
    )
    fb = condition(st, "Fallback")
    assert fb["status"] == "True" and fb["reason"] == "PagedAttentionNotSupported"
    assert "ScaledDotProductAttention" in st["pipeline"]["message"]
    cluster.wait_for(
        lambda: has_event(cluster, namespace, "fb", "Warning", "PipelineFallback"),
        30,
        "Warning PipelineFallback event",
    )


def assert_refused_and_never_downgraded(cluster, namespace, name, pinned, checks, timeout=240):
    """A pinned *_CB on an SDPA-free model: Failed with the reason and a Warning event, and for
    `checks` x 2 s it stays so: nothing resolved, the spec and the Deployment args still say `pinned`."""
    st = wait_phase(cluster, namespace, name, "Failed", timeout)
    ready = condition(st, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PagedAttentionNotSupported"
    assert "not downgraded" in ready["message"]
    cluster.wait_for(
        lambda: has_event(cluster, namespace, name, "Warning", "PagedAttentionNotSupported"),
        30,
        "Warning event",
    )
    for _ in range(checks):
        obj = cluster.get("llmserving", name, namespace)
        assert obj["spec"]["pipelineType"] == pinned
        assert obj["status"]["pipeline"].get("resolved") in (None, "")
        assert obj["status"]["phase"] == "Failed"
        r = row(cluster, namespace, name)
        assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"], r["PHASE"]) == (pinned, "", "", "Failed")
        time.sleep(2)
    dep = cluster.get("deployment", name, namespace)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pipeline-type") + 1] == pinned


def test_pinned_cb_on_sdpa_free_model_fails_and_is_never_downgraded(cluster, operator, namespace, runtime):
    cluster.apply(llms("pin", {"model": pvc_model("tiny-llm-nosdpa"), "pipelineType": "LM_CB"}), namespace)
    assert_refused_and_never_downgraded(cluster, namespace, "pin", "LM_CB", checks=10)


def test_lm_pinned_runs_legacy(cluster, operator, namespace, runtime):
    cluster.apply(llms("lm", {"model": pvc_model("tiny-llm"), "pipelineType": "LM"}), namespace)
    st = wait_phase(cluster, namespace, "lm", "Ready")
    r = row(cluster, namespace, "lm")
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"]) == ("LM", "LM", "")
    assert st["pipeline"]["continuousBatching"] is False and st["pipeline"]["fallback"] is False
    caps = st["capabilities"]  # the legacy pipeline: structured output yes, logprobs refused
    assert (caps["structuredOutput"], caps["logprobs"]) == (True, False)


# --------------------------------------------------------------------------- RBAC (what the chart must grant)

CHART_LEASE = "ovserve-operator"  # the chart's default leaderElection.leaseName


def chart_rbac(namespace: str, tmp_path: Path, values: dict | None = None) -> tuple[list[dict], list[dict]]:
    """(the rules the chart grants the operator, rendered by helm for a release in `namespace`: its ClusterRole
    and its leader-election Role, the chart's own objects the operator relies on: the Lease)."""
    from tests.chart.helpers import by_kind, one, render

    docs = render(values or {}, tmp_path, namespace=namespace)
    rules = [*one(docs, "ClusterRole")["rules"], *(r for role in by_kind(docs, "Role") for r in role["rules"])]
    return rules, by_kind(docs, "Lease")


def test_operator_works_with_exactly_the_charts_rbac(cluster, crd, start_operator, namespace, tmp_path):
    """Exactly what the chart grants (rendered by helm, not a copy): no 403 through create, status, events,
    scale, and healing a deleted Service and an edited Deployment."""
    rules, chart_objects = chart_rbac(namespace, tmp_path)
    assert not any("*" in r["verbs"] for r in rules)
    cluster.apply(chart_objects, namespace)  # the Lease: the chart creates it, the operator may not
    with service_account_kubeconfig(cluster, namespace, rules, tmp_path / "operator.kubeconfig") as path:
        op = start_operator("op-rbac", KUBECONFIG=str(path), OVSERVE_LEASE_NAME=CHART_LEASE)
        cluster.wait_for(lambda: (op.health() or {}).get("role") == "leader", 60, "leader with the SA's rights")
        cluster.apply(llms("rbac", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
        cluster.wait_for(lambda: cluster.get("deployment", "rbac", namespace), 60, "Deployment created")
        cluster.wait_for(
            lambda: condition(status(cluster, namespace, "rbac"), "Ready").get("reason") == "Unschedulable",
            90,
            "status written",
        )
        cluster.wait_for(lambda: has_event(cluster, namespace, "rbac", "Warning", "Unschedulable"), 30, "event posted")
        svc_uid = cluster.get("service", "rbac", namespace)["metadata"]["uid"]
        cluster.kubectl("delete", "service", "rbac", "-n", namespace)
        cluster.wait_for(
            lambda: (s := cluster.get("service", "rbac", namespace)) and s["metadata"]["uid"] != svc_uid,
            30,
            "the Service re-created",
        )
        cluster.kubectl("set", "env", "deployment/rbac", "-n", namespace, "INJECTED=1")
        cluster.wait_for(
            lambda: "INJECTED" not in json.dumps(cluster.get("deployment", "rbac", namespace)), 60, "revert"
        )
        cluster.kubectl("scale", "llmserving/rbac", "-n", namespace, "--replicas=0")
        cluster.wait_for(lambda: cluster.get("deployment", "rbac", namespace)["spec"]["replicas"] == 0, 60, "scaled")
        logs = op.logs()
        assert "403" not in logs and "Forbidden" not in logs, logs[-4000:]


# --------------------------------------------------------------------------- Hugging Face source (fake hub)


@pytest.fixture
def hf_hub(tiny_models):
    """A Hub stand-in in the test process (inside the cluster netns, reachable from pods via the node IP):
    serves tiny-llm as repo ovserve-test/tiny-llm, only with the right bearer token."""
    root = tiny_models / "tiny-llm"
    files = {str(p.relative_to(root)): p.read_bytes for p in sorted(root.rglob("*")) if p.is_file()}
    token = "hf_e2e_" + os.urandom(8).hex()
    with fake_hub("ovserve-test/tiny-llm", files, token, host="0.0.0.0") as (port, seen):
        yield {"endpoint": f"http://10.245.0.1:{port}", "token": token, "seen": seen}


def test_huggingface_source_downloads_with_the_token_secret(cluster, start_operator, namespace, project_image, hf_hub):
    cluster.kubectl("create", "secret", "generic", "hf", "-n", namespace, f"--from-literal=token={hf_hub['token']}")
    op = start_operator("op-hf", OVSERVE_HF_ENDPOINT=hf_hub["endpoint"], OVSERVE_HF_ALLOW_HTTP="true")
    cluster.wait_for(lambda: (op.health() or {}).get("role") == "leader", 60, "leader")
    cluster.apply(
        llms("hf", {"model": {"huggingFace": {"repo": "ovserve-test/tiny-llm", "tokenSecretRef": {"name": "hf"}}}}),
        namespace,
    )
    st = wait_phase(cluster, namespace, "hf", "Ready", 300)
    assert st["pipeline"]["resolved"] == "LM_CB"
    assert all(ok for _, ok in hf_hub["seen"]) and hf_hub["seen"]
    pod = cluster.get("pods", namespace=namespace)["items"][0]
    init = pod["spec"]["initContainers"][0]
    assert hf_hub["token"] not in json.dumps(pod["spec"])  # only a secretKeyRef, never the value
    assert hf_hub["token"] not in cluster.logs(pod["metadata"]["name"], namespace, init["name"])


def _env_names(dep: dict) -> list[str]:
    return [e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])]


def test_children_deleted_by_hand_come_back(cluster, operator, namespace):
    """A deleted Service or Deployment is back within 30 s; meanwhile the status says which is missing."""
    cluster.apply(llms("drift", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    uid = cluster.wait_for(lambda: cluster.get("deployment", "drift", namespace), 60, "Deployment")["metadata"]["uid"]
    svc_uid = cluster.wait_for(lambda: cluster.get("service", "drift", namespace), 60, "Service")["metadata"]["uid"]
    cluster.wait_for(
        lambda: condition(status(cluster, namespace, "drift"), "Ready").get("reason") == "Unschedulable", 60, "status"
    )

    t0 = time.monotonic()
    cluster.kubectl("delete", "service", "drift", "-n", namespace)
    back = cluster.wait_for(
        lambda: (s := cluster.get("service", "drift", namespace)) and s["metadata"]["uid"] != svc_uid and s,
        30,
        "the Service re-applied",
    )
    print(f"Service back after {time.monotonic() - t0:.1f} s")
    assert back["metadata"]["ownerReferences"][0]["name"] == "drift"
    assert back["spec"]["selector"] == {"ovserve.dev/llmserving": "drift", "app.kubernetes.io/component": "runtime"}
    # while it was gone the status said so (Ready=False ChildMissing: a Warning Event marks the transition)
    cluster.wait_for(lambda: has_event(cluster, namespace, "drift", "Warning", "ChildMissing"), 30, "ChildMissing")
    missing = next(e for e in events(cluster, namespace, "drift") if e["reason"] == "ChildMissing")
    assert "Service drift" in missing["message"]
    st = cluster.wait_for(
        lambda: (
            (s := status(cluster, namespace, "drift")) and condition(s, "Ready").get("reason") == "Unschedulable" and s
        ),
        30,
        "status back to the pods' truth",
    )
    assert st["endpoint"] == f"http://drift.{namespace}.svc:8000/v3"

    t0 = time.monotonic()
    cluster.kubectl("delete", "deployment", "drift", "-n", namespace)
    back = cluster.wait_for(
        lambda: (d := cluster.get("deployment", "drift", namespace)) and d["metadata"]["uid"] != uid and d,
        30,
        "the Deployment re-applied",
    )
    print(f"Deployment back after {time.monotonic() - t0:.1f} s")
    assert back["metadata"]["ownerReferences"][0]["name"] == "drift"
    cluster.wait_for(lambda: row(cluster, namespace, "drift").get("PHASE") == "Pending", 60, "Pending again")

    # the PodDisruptionBudget (issue 44: with more than one replica) is a child like the others, and goes with
    # the second replica
    cluster.kubectl("patch", "llmserving", "drift", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":2}}')
    pdb_uid = cluster.wait_for(lambda: cluster.get("pdb", "drift", namespace), 30, "PDB")["metadata"]["uid"]
    cluster.kubectl("delete", "pdb", "drift", "-n", namespace)
    back = cluster.wait_for(
        lambda: (d := cluster.get("pdb", "drift", namespace)) and d["metadata"]["uid"] != pdb_uid and d,
        30,
        "the PodDisruptionBudget re-applied",
    )
    assert back["spec"]["maxUnavailable"] == 1 and back["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert back["spec"]["selector"]["matchLabels"] == back_selector(cluster, namespace, "drift")
    cluster.kubectl("patch", "llmserving", "drift", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":1}}')
    cluster.wait_for(lambda: cluster.get("pdb", "drift", namespace) is None, 30, "the PDB deleted at 1 replica")


def back_selector(cluster, namespace: str, name: str) -> dict:
    return cluster.get("deployment", name, namespace)["spec"]["selector"]["matchLabels"]


def test_hand_edits_of_children_are_reverted(cluster, operator, namespace):
    """kubectl set env / set image on the Deployment and a Service selector edit are undone within 60 s; a
    label and an annotation added by hand (maps: not rendered keys) stay."""
    cluster.apply(llms("edit", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)
    dep = cluster.wait_for(lambda: cluster.get("deployment", "edit", namespace), 60, "Deployment")
    cluster.wait_for(lambda: cluster.get("service", "edit", namespace), 60, "Service")
    want_env = _env_names(dep)
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]

    t0 = time.monotonic()
    cluster.kubectl("set", "env", "deployment/edit", "-n", namespace, "INJECTED=1")
    cluster.wait_for(
        lambda: _env_names(cluster.get("deployment", "edit", namespace)) == want_env, 60, "INJECTED removed"
    )
    print(f"env edit reverted after {time.monotonic() - t0:.1f} s")
    # kubectl set env edits every container, the init container too: both reverted
    reverted = next(line for line in operator.logs().splitlines() if "reverted what another field manager" in line)
    assert "spec.template.spec.containers.0.env" in reverted and "initContainers.0.env" in reverted

    cluster.kubectl("set", "image", "deployment/edit", "-n", namespace, "runtime=example.invalid/other:1")
    cluster.kubectl("annotate", "deployment/edit", "-n", namespace, "team.example/owner=me")
    cluster.wait_for(
        lambda: (
            cluster.get("deployment", "edit", namespace)["spec"]["template"]["spec"]["containers"][0]["image"] == image
        ),
        60,
        "image edit reverted",
    )
    assert cluster.get("deployment", "edit", namespace)["metadata"]["annotations"]["team.example/owner"] == "me"

    cluster.kubectl(
        "patch", "service", "edit", "-n", namespace, "--type=merge", "-p", '{"spec": {"selector": {"extra": "x"}}}'
    )
    cluster.wait_for(
        lambda: "extra" not in cluster.get("service", "edit", namespace)["spec"]["selector"], 60, "selector reverted"
    )
