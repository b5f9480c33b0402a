"""The project image as the node runs it: both entry points as containers, the runtime serving a tiny
model from a hostPath volume with a read-only root filesystem, a numeric non-root user, no torch, pins."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ROOT, make_namespace

pytestmark = pytest.mark.cluster

RESTRICTED = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(name: str, image: str, command: list[str], *, restart: str = "Never", **spec) -> dict:
    """No runAsUser: the image's numeric USER must satisfy runAsNonRoot by itself."""
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "securityContext": RESTRICTED,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": restart,
            "enableServiceLinks": False,
            "containers": [container],
            **spec,
        },
    }


def run_to_completion(cluster, ns: str, manifest: dict, timeout: float = 180) -> tuple[str, str]:
    """(phase, logs) of a run-once pod."""
    cluster.apply(manifest, ns)
    name = manifest["metadata"]["name"]
    phase = cluster.wait_for(
        lambda: (
            (p := cluster.get("pod", name, ns))
            and p["status"].get("phase") in ("Succeeded", "Failed")
            and p["status"]["phase"]
        ),
        timeout,
        f"pod {name} to finish",
    )
    return phase, cluster.logs(name, ns)


@pytest.mark.parametrize("entry", ["ovserve-operator", "ovserve-runtime"])
def test_entry_point_help_runs_as_a_container(cluster, project_image, namespace, entry):
    phase, logs = run_to_completion(cluster, namespace, pod(entry, project_image, [entry, "--help"]))
    assert phase == "Succeeded", logs
    assert re.search(r"usage", logs, re.I), logs


def test_image_user_python_and_pins(cluster, project_image, namespace):
    """uid 10001 (numeric, no passwd entry needed), no torch, no pip, every constraints.txt pin honoured."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip()] = version.strip()
    script = (
        "import getpass, importlib.metadata as md, importlib.util as u, json, os, sys\n"
        "pins = json.loads(sys.argv[1])\n"
        "got = {}\n"
        "for n in pins:\n"
        "    try: got[n] = md.version(n)\n"
        "    except md.PackageNotFoundError: got[n] = None\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'torch': u.find_spec('torch') is not None,"
        " 'user': getpass.getuser(), 'pip': u.find_spec('pip') is not None, 'versions': got,"
        " 'ovserve': md.version('ovserve'), 'ovc': u.find_spec('openvino.tools') is not None,"
        " 'forks': (__import__('openvino'), len(__import__('multiprocessing').active_children()))[1]}))\n"
    )
    phase, logs = run_to_completion(
        cluster, namespace, pod("facts", project_image, ["python", "-c", script, json.dumps(pins)])
    )
    assert phase == "Succeeded", logs
    facts = json.loads(logs.strip().splitlines()[-1])
    # The image's numeric USER gives the uid; its group is dropped by the kubelet (kubernetes#61967: only
    # the uid reaches the runtime), so pods set runAsGroup (the chart and the operator do).
    assert facts["uid"] == 10001, facts
    assert facts["user"] == "ovserve", "the uid has a passwd entry (kopf calls getpass.getuser())"
    assert facts["torch"] is False and facts["pip"] is False
    assert facts["ovc"] is False and facts["forks"] == 0, "import openvino must not fork a telemetry sender"
    runtime_pins = {
        "openvino",
        "openvino-genai",
        "openvino-tokenizers",
        "numpy",
        "kopf",
        "kubernetes",
        "pydantic",
        "aiohttp",
        "prometheus-client",
        "pillow",
        "opentelemetry-sdk",  # tracing (issue 41): imported only when on, but shipped
        "opentelemetry-exporter-otlp-proto-http",
    }
    for name in runtime_pins:
        assert facts["versions"][name] == pins[name], (name, facts["versions"][name], pins[name])
    # test-only pins must not be in the image
    for name in ("pytest", "openai", "ruff"):
        assert facts["versions"][name] is None, name


def test_image_config(project_image):
    """What `docker inspect` shows: numeric USER, exec-form CMD, the venv on PATH, port 8000."""
    proc = subprocess.run(["buildah", "inspect", "--type", "image", project_image], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(proc.stderr, pytrace=False)
    cfg = json.loads(proc.stdout)["OCIv1"]["config"]
    assert cfg["User"] == "10001:10001"
    assert cfg.get("Entrypoint") in (None, [])
    assert cfg["Cmd"] == ["ovserve-runtime", "--help"]
    assert "8000/tcp" in cfg.get("ExposedPorts", {})
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["PATH"].startswith("/opt/ovserve/app/bin:/opt/ovserve/bin:")
    size = json.loads(proc.stdout).get("Size") or 0
    print(f"image {project_image}: {size / 1e6:.0f} MB")


def test_runtime_serves_tiny_model_from_hostpath_with_read_only_root(cluster, project_image, tiny_models):
    """The runtime alone (no operator): hostPath model, read-only root fs, no writable volume at all."""
    model = tiny_models / "tiny-llm"
    assert model.is_dir(), f"{model} missing"
    # Pod Security restricted (even baseline) refuses hostPath volumes: this namespace admits them and
    # warns at restricted; everything else about the pod is restricted.
    ns = make_namespace(cluster, "ovs-img", psa="privileged")
    try:
        manifest = pod(
            "runtime",
            project_image,
            ["ovserve-runtime", "--model-path", str(model), "--served-name", "tiny", "--port", "8000"],
            restart="Always",
            container={
                "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {
                    "httpGet": {"path": "/v2/health/ready", "port": "http"},
                    "periodSeconds": 2,
                },
                "volumeMounts": [{"name": "model", "mountPath": str(model), "readOnly": True}],
            },
            volumes=[{"name": "model", "hostPath": {"path": str(model), "type": "Directory"}}],
        )
        cluster.apply(manifest, ns)
        p = cluster.wait_for(
            lambda: (
                (x := cluster.get("pod", "runtime", ns))
                and any(c["type"] == "Ready" and c["status"] == "True" for c in x["status"].get("conditions", []))
                and x
            ),
            300,
            "the runtime pod Ready",
        )
        ip = p["status"]["podIP"]
        with urllib.request.urlopen(f"http://{ip}:8000/v2/health/ready", timeout=5) as r:
            assert r.status == 200
        body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(f"http://{ip}:8000/v3/completions", body, {"Content-Type": "application/json"})
        out = json.loads(urllib.request.urlopen(req, timeout=60).read())
        assert out["choices"] and isinstance(out["choices"][0]["text"], str), out
        status = json.loads(urllib.request.urlopen(f"http://{ip}:8000/v1/status", timeout=5).read())
        assert status["state"] == "ready" and status["pipeline"]["resolved"] == "LM_CB", status
        # still serving a while later, never restarted (a forked telemetry sender's SIGTERM once reached
        # the runtime's asyncio loop ~2 s after Ready: the image drops openvino/tools, see Dockerfile)
        time.sleep(10)
        with urllib.request.urlopen(f"http://{ip}:8000/v2/health/ready", timeout=5) as r:
            assert r.status == 200
        p = cluster.get("pod", "runtime", ns)
        assert p["status"]["containerStatuses"][0]["restartCount"] == 0, cluster.logs("runtime", ns)
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
