"""End-to-end: the operator does not trust tenants (issue 16), on the real cluster.

- Tenant policy: with the secure defaults, a hostPath model and a foreign runtime image are PolicyDenied,
  naming the setting, and nothing is rendered.
- No takeover: a user's Service that carries an LLMServing's name is left alone (NameConflict).
- Hostile runtime answers: pods of a stand-in image (hack/standin, `hack/images.sh standin`) answer
  /v1/status with a redirect to the metadata address, an endless body and a trickle; the operator follows
  no redirect, stops reading, keeps its memory and health, and shows each as a readback error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HACK, make_namespace, run_on_host_network

from .conftest import OperatorProcess
from .test_operator_e2e import NOWHERE, UNSTARTED, condition, events, llms, row, status

pytestmark = [pytest.mark.cluster]

STANDIN = "localhost/ovserve-standin:1"
TINY = "/var/cache/ovserve/models/tiny-llm"


def ready(cluster, namespace: str, name: str) -> dict:
    return condition(status(cluster, namespace, name), "Ready")


def wait_ready_reason(cluster, namespace: str, name: str, reason: str, timeout: float = 90) -> dict:
    return cluster.wait_for(
        lambda: (c := ready(cluster, namespace, name)).get("reason") == reason and c,
        timeout,
        f"{name}: Ready reason {reason}",
    )


def started(cluster, op: OperatorProcess) -> OperatorProcess:
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    return op


def test_policy_denies_hostpath_and_foreign_images_by_default(cluster, start_operator, namespace):
    started(cluster, start_operator("op-policy", OVSERVE_ALLOW_HOSTPATH="false"))
    cluster.apply(llms("hp", {"model": {"hostPath": {"path": TINY}}}), namespace)
    cluster.apply(
        llms("img", {"model": UNSTARTED, "image": "evil.example/miner:1", "nodeSelector": NOWHERE}), namespace
    )

    hp = wait_ready_reason(cluster, namespace, "hp", "PolicyDenied")
    assert hp["status"] == "False" and "OVSERVE_ALLOW_HOSTPATH" in hp["message"]
    assert "policy.allowHostPath" in hp["message"]
    img = wait_ready_reason(cluster, namespace, "img", "PolicyDenied")
    assert "evil.example/miner:1" in img["message"] and "OVSERVE_ALLOWED_IMAGES" in img["message"]
    r = row(cluster, namespace, "hp")
    assert r["PHASE"] == "Failed" and r["READY"] == "0/1" and not r.get("RESOLVED")
    # denied = nothing rendered (not rendered with the field dropped)
    assert cluster.get("deployment", "hp", namespace) is None and cluster.get("deployment", "img", namespace) is None
    assert any(e["reason"] == "PolicyDenied" and e["type"] == "Warning" for e in events(cluster, namespace, "hp"))


def test_a_foreign_service_of_the_same_name_is_not_taken_over(cluster, start_operator, namespace):
    started(cluster, start_operator("op-owner"))
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "shop", "labels": {"app": "shop"}},
        "spec": {"selector": {"app": "shop"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    cluster.apply(theirs, namespace)
    cluster.apply(llms("shop", {"model": UNSTARTED, "nodeSelector": NOWHERE}), namespace)

    c = wait_ready_reason(cluster, namespace, "shop", "NameConflict")
    assert f"Service {namespace}/shop already exists and is not controlled by this LLMServing" in c["message"]
    svc = cluster.get("service", "shop", namespace)
    assert svc["spec"]["selector"] == {"app": "shop"} and not svc["metadata"].get("ownerReferences")
    assert cluster.get("deployment", "shop", namespace) is None  # checked before anything was written
    cluster.kubectl("delete", "llmserving", "shop", "-n", namespace, "--wait=true")
    assert cluster.get("service", "shop", namespace)["metadata"]["uid"] == svc["metadata"]["uid"]


# ------------------------------------------------------------------------------ hostile runtime answers


@pytest.fixture(scope="module")
def standin_image(cluster) -> str:
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "standin"], timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"hack/images.sh standin failed:\n{proc.stderr[-4000:]}", pytrace=False)
    return STANDIN


@pytest.fixture(scope="module")
def hostile_ns(cluster, crd):
    ns = make_namespace(cluster, "t-hostile", psa="privileged")  # hostPath model volume
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def vm_kib(pid: int, key: str) -> int:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith(key + ":"))
    return int(line.split()[1])


HOSTILE = {
    "redirect": "HTTP 302 (redirects are not followed)",
    "huge": "body larger than 65536 bytes",
    "trickle": "no answer in time",
}


def test_hostile_runtime_answers_are_readback_errors(cluster, hostile_ns, standin_image, tmp_path):
    op = started(
        cluster,
        OperatorProcess(
            hostile_ns,
            "op-hostile",
            "ovserve-operator-hostile",
            tmp_path,
            {
                "OVSERVE_ALLOWED_IMAGES": "localhost/ovserve-standin",
                "OVSERVE_READBACK_GRACE_SECONDS": "2",
            },
        ),
    )
    try:
        for mode in HOSTILE:
            spec = {"model": {"hostPath": {"path": TINY}, "servedName": f"standin-{mode}"}, "image": standin_image}
            cluster.apply(llms(mode, spec), hostile_ns)
        for mode, text in HOSTILE.items():
            c = wait_ready_reason(cluster, hostile_ns, mode, "ReadbackFailed", 180)
            assert c["status"] == "Unknown" and text in c["message"], (mode, c)
        health = op.health()
        assert op.alive() and health and health["ok"], health
        # the endless body was never buffered: the operator stays small (it holds ~100 MiB at rest)
        assert vm_kib(op.proc.pid, "VmHWM") < 300 * 1024, vm_kib(op.proc.pid, "VmHWM")
        assert "169.254.169.254" not in op.logs()
    finally:
        op.stop()
