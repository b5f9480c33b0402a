"""End-to-end: the status tells the truth through transitions (issue 13), on the real cluster.

One namespace and one operator (local process) are shared by the whole module: the checks use
distinct LLMServings and do not interfere. The namespace admits pod-level hostPath volumes (Pod
Security `privileged`, warning at `restricted`) so that a missing hostPath reaches the kubelet.
Everything is asserted through what a user reads: `kubectl get llmserving` columns, conditions, Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import make_namespace
from tests.fakehub import fake_hub

from .conftest import OperatorProcess, report_module_diagnostics
from .test_operator_e2e import NOWHERE, UNSTARTED, condition, events, llms, models_claim, pvc_model, row, status

pytestmark = [pytest.mark.cluster]

HF_REPO = "ovserve-test/tiny-llm"


def wide(cluster, namespace: str, name: str) -> dict[str, str]:
    return {r["NAME"]: r for r in cluster.table("llmservings", "-n", namespace, "-o", "wide")}.get(name, {})


def reasons(cluster, namespace: str, name: str, type_: str | None = None) -> list[str]:
    return [e["reason"] for e in events(cluster, namespace, name) if type_ is None or e["type"] == type_]


def ready_reason(cluster, namespace: str, name: str) -> str:
    return condition(status(cluster, namespace, name), "Ready").get("reason", "")


def generation(cluster, namespace: str, name: str) -> int:
    return cluster.get("llmserving", name, namespace)["metadata"]["generation"]


def wait_reason(cluster, namespace, name, reason, timeout=60, gen=None):
    """Until the Ready reason is `reason` (at generation `gen`, if given); returns the status."""

    def check():
        st = status(cluster, namespace, name)
        ok = condition(st, "Ready").get("reason") == reason
        if gen is not None:
            ok = ok and st.get("observedGeneration") == gen
        return ok and st

    return cluster.wait_for(check, timeout, f"{name}: Ready reason {reason} (generation {gen})")


def first_pod(cluster, namespace: str, name: str) -> dict:
    def pods():
        items = cluster.get("pods", namespace=namespace)["items"]
        return [p for p in items if p["metadata"]["labels"].get("ovserve.dev/llmserving") == name]

    return cluster.wait_for(pods, 60, f"a runtime pod of {name}")[0]


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def truth_ns(cluster, crd, request):
    ns = make_namespace(cluster, "t-truth", psa="privileged")
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def hub(tiny_models):
    """The fake Hub (reachable from pods via the node IP), answering 503 to its very first request."""
    root = tiny_models / "tiny-llm"
    files = {str(p.relative_to(root)): p.read_bytes for p in sorted(root.rglob("*")) if p.is_file()}
    token = "hf_e2e_" + os.urandom(8).hex()
    with fake_hub(HF_REPO, files, token, host="0.0.0.0", fail_first=1) as (port, seen):
        yield {"endpoint": f"http://10.245.0.1:{port}", "token": token, "seen": seen}


@pytest.fixture(scope="module")
def truth_operator(cluster, truth_ns, hub, tmp_path_factory):
    op = OperatorProcess(
        truth_ns,
        "op-truth",
        f"ovserve-operator-{uuid.uuid4().hex[:6]}",
        tmp_path_factory.mktemp("operator"),
        {"OVSERVE_HF_ENDPOINT": hub["endpoint"]},
    )
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def truth_models(cluster, truth_ns, project_image, tiny_models):
    with models_claim(cluster, truth_ns, tiny_models) as root:
        yield root


@pytest.fixture(autouse=True)
def _diagnostics(request, cluster):
    yield
    report_module_diagnostics(request, cluster, "truth_ns", "truth_operator")


# ------------------------------------------------------------------------------------------- refusals


def test_invalid_quantity_is_refused_by_the_crd(cluster, truth_ns):
    bad = llms("two-cpus", {"model": UNSTARTED, "resources": {"limits": {"cpu": "two"}}})
    proc = cluster.create(bad, truth_ns, check=False)
    assert proc.returncode != 0
    assert "spec.resources.limits.cpu" in proc.stderr and '"two"' in proc.stderr, proc.stderr
    assert cluster.get("llmserving", "two-cpus", truth_ns) is None


def test_refused_apply_shows_the_apiservers_message_at_its_generation(cluster, truth_ns, truth_operator):
    name = "refused"
    cluster.apply(llms(name, {"model": UNSTARTED, "nodeSelector": NOWHERE}), truth_ns)
    wait_reason(cluster, truth_ns, name, "Unschedulable", 90, gen=1)
    w = wide(cluster, truth_ns, name)
    assert w["CHANGED"] and w["CHANGED"] != "<none>", w  # the status says when it last changed
    # (a settled status is not rewritten, not even computedAt: test_status_writes.py)

    # requests above limits: valid quantities, so the CRD admits it, but the Deployment is refused (422)
    patch = {"spec": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}}
    cluster.kubectl("patch", "llmserving", name, "-n", truth_ns, "--type=merge", "-p", json.dumps(patch))
    st = wait_reason(cluster, truth_ns, name, "ApplyFailed", 60, gen=2)
    ready = condition(st, "Ready")
    assert ready["status"] == "False" and ready["observedGeneration"] == 2
    assert "Deployment/refused (HTTP 422)" in ready["message"], ready
    assert "must be less than or equal to cpu limit" in ready["message"], ready
    r = row(cluster, truth_ns, name)
    assert (r["PHASE"], r["READY"]) == ("Failed", "0/1"), r
    assert wide(cluster, truth_ns, name)["REASON"] == "ApplyFailed"
    cluster.wait_for(lambda: "ApplyFailed" in reasons(cluster, truth_ns, name, "Warning"), 30, "Warning ApplyFailed")

    # fixed: applied at once (not after the refused handler's retry delay), the refusal is gone
    patch = {"spec": {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}}
    cluster.kubectl("patch", "llmserving", name, "-n", truth_ns, "--type=merge", "-p", json.dumps(patch))
    wait_reason(cluster, truth_ns, name, "Unschedulable", 20, gen=3)
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


# ------------------------------------------------------------------------------------------- missing models


def test_missing_hostpath_is_model_not_found_within_30s(cluster, truth_ns, truth_operator, project_image):
    name = "no-dir"
    cluster.apply(llms(name, {"model": {"hostPath": {"path": "/no/such/dir"}}}), truth_ns)
    first_pod(cluster, truth_ns, name)
    st = wait_reason(cluster, truth_ns, name, "ModelNotFound", 30)
    msg = condition(st, "Ready")["message"]
    assert "hostPath /no/such/dir" in msg and "is not a directory" in msg, msg
    r = row(cluster, truth_ns, name)
    assert (r["PHASE"], r["RESOLVED"], r["FALLBACK"]) == ("Failed", "", ""), r
    cluster.wait_for(lambda: "ModelNotFound" in reasons(cluster, truth_ns, name, "Warning"), 30, "Warning event")
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


def test_missing_claim_is_model_not_found_within_30s(cluster, truth_ns, truth_operator):
    name = "no-claim"
    cluster.apply(llms(name, {"model": {"pvc": {"claimName": "nope", "path": "tiny-llm"}}}), truth_ns)
    first_pod(cluster, truth_ns, name)
    st = wait_reason(cluster, truth_ns, name, "ModelNotFound", 30)
    msg = condition(st, "Ready")["message"]
    assert 'claim "nope" not found' in msg, msg
    assert row(cluster, truth_ns, name)["PHASE"] == "Failed"
    cluster.wait_for(lambda: "ModelNotFound" in reasons(cluster, truth_ns, name, "Warning"), 30, "Warning event")
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


def test_missing_path_in_the_claim_is_model_not_found(cluster, truth_ns, truth_operator, project_image, tmp_path):
    """A claim whose subPath does not exist: the kubelet creates it empty, the runtime finds no IR; the
    status names the claim and the path (an empty volume of our own: never the shared models directory)."""
    name, root = "no-path", tmp_path / "empty-models"
    root.mkdir()
    root.chmod(0o755)
    with models_claim(cluster, truth_ns, root, claim="empty"):
        try:
            cluster.apply(llms(name, {"model": {"pvc": {"claimName": "empty", "path": "absent"}}}), truth_ns)
            first_pod(cluster, truth_ns, name)
            st = wait_reason(cluster, truth_ns, name, "ModelNotFound", 60)
            msg = condition(st, "Ready")["message"]
            assert "claim empty path absent" in msg and "no OpenVINO model" in msg, msg
            r = row(cluster, truth_ns, name)
            assert (r["PHASE"], r["RESOLVED"]) == ("Failed", ""), r
        finally:
            cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false", check=False)


def test_missing_token_secret_shows_the_kubelets_message(cluster, truth_ns, truth_operator, project_image):
    name = "no-secret"
    spec = {"model": {"huggingFace": {"repo": HF_REPO, "tokenSecretRef": {"name": "absent"}}}}
    cluster.apply(llms(name, spec), truth_ns)
    st = wait_reason(cluster, truth_ns, name, "CreateContainerConfigError", 60)
    msg = condition(st, "Ready")["message"]
    assert 'secret "absent" not found' in msg and "model-download" in msg, msg
    assert row(cluster, truth_ns, name)["PHASE"] == "Failed"
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


# ------------------------------------------------------------------------------------------- the runtime


def test_oom_killed_runtime_is_named_with_its_memory_limit(cluster, truth_ns, truth_operator, truth_models):
    """A memory limit the runtime cannot start in: the kernel kills it (the kubelet's OOMKilled), and the
    status says so with the limit, not a bare crash loop."""
    name = "oom"
    limit = "40Mi"  # the runtime's Python and OpenVINO imports alone take more
    spec = {"model": pvc_model("tiny-llm"), "resources": {"requests": {"memory": limit}, "limits": {"memory": limit}}}
    cluster.apply(llms(name, spec), truth_ns)
    try:
        st = wait_reason(cluster, truth_ns, name, "OOMKilled", 120)
        msg = condition(st, "Ready")["message"]
        assert "OOMKilled" in msg and f"memory limit {limit}" in msg, msg
        pod = first_pod(cluster, truth_ns, name)
        cs = pod["status"]["containerStatuses"][0]
        killed = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}
        assert killed.get("reason") == "OOMKilled", cs  # what the kubelet saw, not a guess of the operator's
        r = row(cluster, truth_ns, name)
        assert (r["PHASE"], r["READY"]) == ("Failed", "0/1"), r
        assert wide(cluster, truth_ns, name)["REASON"] == "OOMKilled"
        cluster.wait_for(lambda: "OOMKilled" in reasons(cluster, truth_ns, name, "Warning"), 30, "Warning OOMKilled")
    finally:
        cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false", check=False)


def _container_processes(cluster, namespace: str, pod: str) -> list[int]:
    """PIDs of the pod's runtime container on this node, now: its cgroup is named by the container ID, which
    changes with each restart."""
    st = (cluster.get("pod", pod, namespace) or {}).get("status") or {}
    ids = [c["containerID"].split("://")[-1] for c in st.get("containerStatuses") or [] if c.get("containerID")]
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cgroup = (d / "cgroup").read_text()
        except OSError:
            continue
        if any(i in cgroup for i in ids):
            found.append(int(d.name))
    return found


def test_one_crash_looping_replica_of_a_serving_is_degraded_not_failed(cluster, truth_ns, truth_operator, truth_models):
    """Two replicas Ready, then one pod's runtime is killed over and over (its container's processes, from the
    node): the kubelet's crash loop on one pod while the other serves reads Degraded, with counts, and recovers."""
    name = "degraded"
    cluster.apply(llms(name, {"model": pvc_model("tiny-llm"), "replicas": 2}), truth_ns)
    try:
        cluster.wait_for(lambda: row(cluster, truth_ns, name).get("READY") == "2/2", 300, f"{name} 2/2")
        victim = sorted(
            (
                p
                for p in cluster.get("pods", namespace=truth_ns)["items"]
                if p["metadata"]["labels"].get("ovserve.dev/llmserving") == name
            ),
            key=lambda p: p["metadata"]["name"],
        )[0]
        victim_name = victim["metadata"]["name"]
        assert _container_processes(cluster, truth_ns, victim_name), "the runtime's processes are on this node"

        def killed_and_degraded():
            for pid in _container_processes(cluster, truth_ns, victim_name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            st = status(cluster, truth_ns, name)
            return condition(st, "Ready").get("reason") == "Degraded" and st

        st = cluster.wait_for(killed_and_degraded, 120, f"{name}: Degraded")
        ready = condition(st, "Ready")
        assert ready["status"] == "False", ready  # not every replica serves (the phase says traffic flows)
        assert ready["message"].startswith("1/2 replicas ready; 1 failing") and victim_name in ready["message"], ready
        r = row(cluster, truth_ns, name)
        assert (r["PHASE"], r["READY"]) == ("Degraded", "1/2"), r
        cluster.wait_for(lambda: "Degraded" in reasons(cluster, truth_ns, name), 30, "a Degraded event")
        # left alone, the kubelet's restart brings it back: Ready again, 2/2
        cluster.wait_for(lambda: row(cluster, truth_ns, name).get("READY") == "2/2", 300, f"{name} 2/2 again")
        assert status(cluster, truth_ns, name)["phase"] == "Ready"
    finally:
        cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false", check=False)


def test_init_container_failing_once_then_succeeding_ends_ready(cluster, truth_ns, truth_operator, hub, project_image):
    name = "hf-once"
    cluster.kubectl("create", "secret", "generic", "hf", "-n", truth_ns, f"--from-literal=token={hub['token']}")
    spec = {"model": {"huggingFace": {"repo": HF_REPO, "tokenSecretRef": {"name": "hf"}}}}
    cluster.apply(llms(name, spec), truth_ns)
    # the Hub's 503 makes the first download fail: said so while it is true...
    cluster.wait_for(
        lambda: "ModelDownloadFailed" in reasons(cluster, truth_ns, name, "Warning"), 120, "ModelDownloadFailed"
    )
    # ...and no longer once the retry succeeded and the model serves
    st = cluster.wait_for(
        lambda: (s := status(cluster, truth_ns, name)).get("phase") == "Ready" and s, 300, f"{name} Ready"
    )
    assert condition(st, "Ready")["reason"] == "AllReplicasReady"
    r = row(cluster, truth_ns, name)
    assert (r["RESOLVED"], r["READY"], r["PHASE"]) == ("LM_CB", "1/1", "Ready"), r
    pod = first_pod(cluster, truth_ns, name)
    init = pod["status"]["initContainerStatuses"][0]
    assert init["restartCount"] >= 1, init  # it really failed once
    assert any(path.endswith("/revision/main") for path, _ in hub["seen"][:1])
    for _ in range(3):  # stays Ready: the old failure in lastState is history
        time.sleep(2)
        assert status(cluster, truth_ns, name)["phase"] == "Ready"
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


def service_models(cluster, namespace: str, name: str) -> list[str]:
    """GET /v3/models through the Service (ClusterIP): what the traffic reaches."""
    ip = cluster.get("service", name, namespace)["spec"]["clusterIP"]
    with urllib.request.urlopen(f"http://{ip}:8000/v3/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]


def test_repin_auto_to_lm_cb_and_back(cluster, truth_ns, truth_operator, truth_models):
    name = "repin"
    cluster.apply(llms(name, {"model": pvc_model("tiny-llm-nosdpa")}), truth_ns)
    cluster.wait_for(lambda: status(cluster, truth_ns, name).get("phase") == "Ready", 240, "AUTO Ready")
    r = row(cluster, truth_ns, name)
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"]) == ("AUTO", "LM", "PagedAttentionNotSupported"), r
    cluster.wait_for(lambda: "PipelineFallback" in reasons(cluster, truth_ns, name), 30, "PipelineFallback event")

    # re-pin: the new pod is refused; the old pod keeps serving LM and is reported apart
    cluster.kubectl(
        "patch", "llmserving", name, "-n", truth_ns, "--type=merge", "-p", '{"spec":{"pipelineType":"LM_CB"}}'
    )
    st = wait_reason(cluster, truth_ns, name, "PagedAttentionNotSupported", 240, gen=2)
    for _ in range(5):
        st = status(cluster, truth_ns, name)
        w = wide(cluster, truth_ns, name)
        assert (w["REQUESTED"], w["RESOLVED"], w["FALLBACK"], w["READY"], w["PHASE"]) == (
            "LM_CB",
            "",
            "",
            "0/1",
            "Failed",
        ), w
        assert w["PREVIOUS"] == "1/1 serving LM (fallback PagedAttentionNotSupported)", w
        fb = condition(st, "Fallback")
        assert (fb["status"], fb["reason"], fb["observedGeneration"]) == ("False", "PinnedPipeline", 2), fb
        assert st["pipeline"]["fallback"] is False and st["pipeline"].get("reason") != "PodsDisagree", st
        ready = condition(st, "Ready")
        assert "not downgraded" in ready["message"] and "earlier spec still serve" in ready["message"], ready
        assert st["previous"] == {**st["previous"], "replicas": 1, "readyReplicas": 1, "resolved": "LM"}
        # the traffic truth: the Service still reaches the old LM pod
        assert service_models(cluster, truth_ns, name) == [name]
        time.sleep(2)
    assert reasons(cluster, truth_ns, name).count("PipelineFallback") == 1  # none for the pinned generation
    assert "PagedAttentionNotSupported" in reasons(cluster, truth_ns, name, "Warning")

    # back to AUTO: the old template is current again, nothing is reported apart
    cluster.kubectl(
        "patch", "llmserving", name, "-n", truth_ns, "--type=merge", "-p", '{"spec":{"pipelineType":"AUTO"}}'
    )
    st = wait_reason(cluster, truth_ns, name, "AllReplicasReady", 120, gen=3)
    w = cluster.wait_for(lambda: (x := wide(cluster, truth_ns, name)) and not x["PREVIOUS"] and x, 90, "no PREVIOUS")
    assert (w["REQUESTED"], w["RESOLVED"], w["FALLBACK"], w["READY"], w["PHASE"]) == (
        "AUTO",
        "LM",
        "PagedAttentionNotSupported",
        "1/1",
        "Ready",
    ), w
    assert condition(status(cluster, truth_ns, name), "Fallback")["status"] == "True"
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")


# ------------------------------------------------------------------------------- admission and faults


def _runtime_pids(pod: str) -> list[tuple[int, bytes]]:
    """(pid, cmdline) of the processes of a runtime pod on this node (POD_NAME is in their environment)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"POD_NAME={pod}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                found.append((int(d), f.read()))
        except OSError:
            continue
    return found


def _maps_weights(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "openvino_model.bin" in f.read()
    except OSError:
        return False


async def _burst(url: str, n: int) -> list[tuple[int, str, str]]:
    """n concurrent streaming chat completions: (status, Retry-After, body or last SSE line)."""
    import aiohttp

    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 400, "stream": True, "ignore_eos": True}

    async def one(s):
        async with s.post(url + "/v3/chat/completions", json=body) as r:
            text = await r.text()
            last = [line for line in text.splitlines() if line.startswith("data: ")][-1:] or [text]
            return r.status, r.headers.get("Retry-After", ""), last[0]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        return list(await asyncio.gather(*(one(s) for _ in range(n))))


def test_admission_bound_and_fatal_exit_through_the_cluster(cluster, truth_ns, truth_operator, truth_models):
    """spec.serving.maxQueuedRequests reaches the runtime (429 + Retry-After through the Service), and so does
    streamIntervalMs (its flag); a broken engine makes the container exit 3 with its report as the termination
    message, and it recovers."""
    name = "bounded"
    spec = {
        "model": pvc_model("tiny-llm"),
        "scheduler": {"maxNumSeqs": 1},
        "serving": {"maxQueuedRequests": 0, "streamIntervalMs": 2.5},  # one request at a time per pod, no waiting room
    }
    cluster.apply(llms(name, spec), truth_ns)
    cluster.wait_for(lambda: status(cluster, truth_ns, name).get("phase") == "Ready", 240, "bounded Ready")
    ip = cluster.get("service", name, truth_ns)["spec"]["clusterIP"]
    results = asyncio.run(_burst(f"http://{ip}:8000", 6))
    ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 429]
    assert ok and refused and len(ok) + len(refused) == 6, results
    assert all(r[2] == "data: [DONE]" for r in ok)
    assert all(int(r[1]) >= 1 and json.loads(r[2])["error"]["code"] == "queue_full" for r in refused)

    pod = first_pod(cluster, truth_ns, name)["metadata"]["name"]
    assert any(b"\0--stream-interval-ms\x002.5\0" in cmd for _pid, cmd in _runtime_pids(pod)), _runtime_pids(pod)

    # the engine process dies: the container exits 3 and the kubelet keeps its report
    # the engine-core child maps the weights; the grammar worker is another spawn_main child
    engine = [pid for pid, cmd in _runtime_pids(pod) if b"spawn_main" in cmd and _maps_weights(pid)]
    assert len(engine) == 1, _runtime_pids(pod)
    os.kill(engine[0], signal.SIGKILL)

    def restarted():
        cs = (cluster.get("pod", pod, truth_ns) or {}).get("status", {}).get("containerStatuses") or [{}]
        last = cs[0].get("lastState", {}).get("terminated")
        return last if cs[0].get("restartCount", 0) >= 1 and last else None

    last = cluster.wait_for(restarted, 60, "the runtime container restarted")
    assert last["exitCode"] == 3
    report = json.loads(last["message"].strip().splitlines()[-1])
    assert report["state"] == "failed" and "engine process" in report["pipeline"]["message"], report
    assert report["pipeline"]["reason"] == "EngineFailed", report  # a failure while serving, not of the load
    cluster.wait_for(lambda: status(cluster, truth_ns, name).get("phase") == "Ready", 120, "Ready again")
    assert asyncio.run(_burst(f"http://{ip}:8000", 1))[0][0] == 200
    cluster.kubectl("delete", "llmserving", name, "-n", truth_ns, "--wait=false")
