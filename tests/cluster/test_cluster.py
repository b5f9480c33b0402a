"""The local cluster is a real Kubernetes: real containers, real networking, real RBAC and GC."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import HACK, run_on_host_network, wait_for

pytestmark = pytest.mark.cluster

BASE_IMAGE = "localhost/ovserve-base:1"

RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

HELLO_SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from " + os.environ["HOSTNAME"] + " uid=" + str(os.getuid())).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""


@pytest.fixture(scope="module")
def base_image(cluster) -> str:
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "base"], timeout=1800)  # debootstrap downloads
    assert proc.returncode == 0, proc.stderr
    return BASE_IMAGE


def pod_spec(command: list[str], **extra) -> dict:
    return {
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "main",
                "image": BASE_IMAGE,
                "imagePullPolicy": "Never",
                "command": command,
                "securityContext": RESTRICTED,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        **extra,
    }


def pod(name: str, command: list[str], **extra) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec(command, **extra)}


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_restricted_deployment_is_ready_and_reachable(cluster, namespace, base_image):
    labels = {"app": "hello"}
    cluster.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "hello"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            **pod_spec(["python3", "-c", HELLO_SERVER]),
                            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                        },
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "hello"},
                "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        ],
        namespace,
    )
    cluster.kubectl("rollout", "status", "deployment/hello", "-n", namespace, "--timeout=120s", timeout=150)
    pods = cluster.get("pods", namespace=namespace)["items"]
    assert len(pods) == 1
    pod_ip = pods[0]["status"]["podIP"]
    assert pods[0]["status"]["containerStatuses"][0]["ready"] is True
    # no readiness probe: "ready" means started, and python3 may not listen yet on a busy node
    body = wait_for(lambda: http_get(f"http://{pod_ip}:8080/"), 30, f"pod {pod_ip}:8080")
    assert body == f"hello from {pods[0]['metadata']['name']} uid=10001"
    cluster_ip = cluster.get("service", "hello", namespace)["spec"]["clusterIP"]
    # kube-proxy programs the Service asynchronously after the endpoints appear
    body = wait_for(lambda: http_get(f"http://{cluster_ip}/"), 30, f"Service hello at {cluster_ip}")
    assert body.startswith("hello from hello-")


def test_restricted_namespace_refuses_a_privileged_pod(cluster, namespace, base_image):
    bad = pod("root", ["sleep", "1"])
    bad["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    proc = cluster.create(bad, namespace, check=False)
    assert proc.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in proc.stderr
    assert "allowPrivilegeEscalation != false" in proc.stderr and "runAsUser=0" in proc.stderr


def test_crashing_container_reports_its_last_stderr_line(cluster, namespace, base_image):
    script = 'echo starting >&2; echo "some detail" >&2; echo "fatal: model went away" >&2; exit 3'
    cluster.apply(pod("crash", ["sh", "-c", script]), namespace)

    def crashed_twice():
        st = cluster.get("pod", "crash", namespace)["status"].get("containerStatuses", [{}])[0]
        return st if st.get("restartCount", 0) >= 2 and "terminated" in st.get("lastState", {}) else None

    st = wait_for(crashed_twice, 120, "pod crash to restart twice")
    term = st["lastState"]["terminated"]
    assert term["exitCode"] == 3
    assert term["message"].strip().splitlines()[-1] == "fatal: model went away"
    # kubectl logs goes apiserver -> kubelet -> the container's log file
    assert "fatal: model went away" in cluster.kubectl("logs", "crash", "-n", namespace).stdout


def test_deleting_the_owner_garbage_collects_children(cluster, namespace):
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}, namespace)
    uid = cluster.get("configmap", "owner", namespace)["metadata"]["uid"]
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "child",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}],
            },
        },
        namespace,
    )
    assert cluster.get("configmap", "child", namespace) is not None
    cluster.delete("configmap", "owner", namespace)
    wait_for(lambda: cluster.get("configmap", "child", namespace) is None, 60, "the garbage collector to delete child")


SA_PROBE = """
import json, os, ssl, urllib.request, urllib.error
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ns = open(sa + "/namespace").read()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
for path in ("/version", "/api/v1/namespaces/%s/secrets" % ns):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            print(json.dumps({"path": path, "code": r.status, "body": json.load(r)}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"path": path, "code": e.code, "body": json.load(e)}))
"""


def test_service_account_token_reaches_apiserver_and_rbac_denies(cluster, namespace, base_image):
    p = pod("sa-probe", ["python3", "-c", SA_PROBE], restartPolicy="Never")
    p["spec"]["automountServiceAccountToken"] = True
    cluster.apply(p, namespace)
    wait_for(
        lambda: cluster.get("pod", "sa-probe", namespace)["status"].get("phase") == "Succeeded",
        120,
        "pod sa-probe to finish",
    )
    lines = [json.loads(line) for line in cluster.kubectl("logs", "sa-probe", "-n", namespace).stdout.splitlines()]
    version, secrets = lines
    assert version["code"] == 200 and version["body"]["gitVersion"].startswith("v1.")
    assert secrets["code"] == 403
    assert secrets["body"]["reason"] == "Forbidden"
    assert f"system:serviceaccount:{namespace}:default" in secrets["body"]["message"]


def gpu_pod(name: str) -> dict:
    p = pod(
        name,
        [
            "python3",
            "-c",
            "import os, time; print('devices', os.environ.get('OVSERVE_FAKE_GPU_IDS'), flush=True); time.sleep(3600)",
        ],
    )
    p["spec"]["nodeSelector"] = {"intel.feature.node.kubernetes.io/gpu": "true"}
    p["spec"]["containers"][0]["resources"] = {"limits": {"gpu.intel.com/i915": "1"}}
    return p


def test_gpu_pod_schedules_only_while_the_device_plugin_runs(cluster, namespace, base_image, device_plugin):
    device_plugin.start(2)
    assert device_plugin.allocatable() == 2
    cluster.apply(gpu_pod("gpu-on"), namespace)
    wait_for(
        lambda: cluster.get("pod", "gpu-on", namespace)["status"].get("phase") == "Running", 120, "pod gpu-on Running"
    )
    logs = wait_for(lambda: cluster.logs("gpu-on", namespace), 30, "gpu-on logs")
    assert logs.startswith("devices fake-gpu-")
    cluster.delete("pod", "gpu-on", namespace, "--grace-period=0", "--force")

    device_plugin.stop()
    assert device_plugin.allocatable() == 0
    cluster.apply(gpu_pod("gpu-off"), namespace)

    def unschedulable():
        conds = cluster.get("pod", "gpu-off", namespace)["status"].get("conditions", [])
        return next((c for c in conds if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"), None)

    cond = wait_for(unschedulable, 60, "pod gpu-off Unschedulable")
    assert cluster.get("pod", "gpu-off", namespace)["status"]["phase"] == "Pending"
    assert "0/1 nodes are available" in cond["message"]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                found.append(f"{d.name}: {cmd}")
    return found


def _netns_without_process() -> set[str]:
    live = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                live.add(os.stat(d / "ns" / "net").st_ino)
            except OSError:
                pass
    out = set()
    for f in Path("/var/run/netns").glob("cni-*"):
        try:
            if os.stat(f).st_ino not in live:
                out.add(f.name)
        except OSError:
            pass
    return out


@pytest.mark.slow
def test_down_leaves_nothing_behind_and_up_works_again(cluster, tmp_path_factory):
    """A second, throwaway cluster (own state dir and namespace) so the shared one keeps running."""
    tag = uuid.uuid4().hex[:6]
    st = f"/tmp/ovserve-lifecycle-{tag}"
    env = {**os.environ, "OVSERVE_CLUSTER_DIR": st, "OVSERVE_NETNS": f"ovlife-{tag}", "OVSERVE_FAKE_GPUS": "0"}
    script = ["bash", str(HACK / "cluster.sh")]

    def sh(*args, check=True):
        proc = subprocess.run([*script, *args], capture_output=True, text=True, env=env, timeout=300)
        if check:
            assert proc.returncode == 0, f"cluster.sh {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    try:
        sh("up")
        sh("up")  # idempotent: a healthy cluster is left alone
        pause = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "p", "image": "localhost/pause:1", "imagePullPolicy": "Never"}]},
        }
        subprocess.run(
            [*script, "kubectl", "apply", "-f", "-"],
            input=json.dumps(pause),
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )

        def phase():
            out = sh("kubectl", "get", "pod", "p", "-o", "jsonpath={.status.phase}", check=False).stdout
            return out == "Running"

        wait_for(phase, 120, "pod p Running in the lifecycle cluster")
        assert sh("status").returncode == 0
        sh("down")
        assert sh("status", check=False).returncode != 0
        assert _processes_mentioning(st) == []
        assert [m for m in Path("/proc/mounts").read_text().splitlines() if st in m] == []
        assert not Path(f"/var/run/netns/ovlife-{tag}").exists()
        assert _netns_without_process() == set()
        sh("up")  # etcd state survived: the pod comes back
        wait_for(phase, 120, "pod p Running again after down/up")
    finally:
        sh("reset", check=False)
    assert _processes_mentioning(st) == []
