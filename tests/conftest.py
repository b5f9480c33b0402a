"""Fixtures shared by every test tier.

The `cluster` fixture brings up (or reuses) the real one-node cluster of hack/cluster.sh and moves this
test process into the cluster's private network namespace, so that pod IPs, ClusterIPs and the
apiserver are reachable directly from tests and from every subprocess they start (the operator, curl,
the openai client).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
HACK = ROOT / "hack"
T = TypeVar("T")


def _versions_env() -> dict[str, str]:
    """The variables of hack/versions.env as bash resolves them (one source for paths and versions)."""
    out = subprocess.run(
        ["bash", "-c", f"set -a && . {HACK / 'versions.env'} && env -0"], capture_output=True, text=True, check=True
    ).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


ENV = _versions_env()
BIN_DIR = Path(ENV["BIN_DIR"])
STATE_DIR = Path(os.environ.get("OVSERVE_CLUSTER_DIR", "/tmp/ovserve-cluster"))
NETNS = os.environ.get("OVSERVE_NETNS", "ovserve")
MODELS_DIR = Path(ENV.get("OVSERVE_MODELS") or "/var/cache/ovserve/models")
PROJECT_IMAGE = os.environ.get("OVSERVE_IMAGE", "localhost/ovserve:dev")

_CLONE_NEWNET = 0x40000000
# The host's network namespace, kept open before the session moves into the cluster's: builds that need
# the package registries (pip inside buildah, the exporter venv) run there.
HOST_NETNS_FD = os.open("/proc/self/ns/net", os.O_RDONLY)


def enter_netns(name: str) -> None:
    """setns(2) into /var/run/netns/NAME; later threads and subprocesses inherit it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into netns {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_on_host_network(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run argv in the host's network namespace (this process may have entered the cluster's)."""

    def to_host() -> None:
        if ctypes.CDLL(None, use_errno=True).setns(HOST_NETNS_FD, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the host network namespace")

    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, preexec_fn=to_host, pass_fds=(HOST_NETNS_FD,)
    )


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll until predicate() is truthy and return it; fail the test with the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except Exception as exc:  # a transient API error is a value to report, not a crash
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}: last value {last!r}", pytrace=False)
        time.sleep(interval)


def _manifest_text(manifest: str | dict | list[dict]) -> str:
    if isinstance(manifest, str):
        return manifest
    if isinstance(manifest, list):
        manifest = {"apiVersion": "v1", "kind": "List", "items": manifest}
    return json.dumps(manifest)


class Cluster:
    """Thin helpers over kubectl and helm for the running cluster (cluster-admin)."""

    def __init__(self, state_dir: Path, netns: str) -> None:
        self.state_dir = state_dir
        self.netns = netns
        self.bin_dir = BIN_DIR
        self.kubeconfig = state_dir / "pki" / "admin.kubeconfig"
        self.script = HACK / "cluster.sh"

    def run(self, argv: list[str], *, input: str | None = None, check: bool = True, timeout: float = 120):
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        if check and proc.returncode != 0:
            pytest.fail(f"`{shlex.join(argv)}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120):
        return self.run([str(self.bin_dir / "kubectl"), *args], input=input, check=check, timeout=timeout)

    def helm(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300):
        return self.run([str(self.bin_dir / "helm"), *args], input=input, check=check, timeout=timeout)

    def apply(self, manifest: str | dict | list[dict], namespace: str | None = None, *extra: str):
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", *ns, *extra, "-f", "-", input=_manifest_text(manifest))

    def create(self, manifest: str | dict | list[dict], namespace: str | None = None, check: bool = True):
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("create", *ns, "-f", "-", input=_manifest_text(manifest), check=check)

    def delete(self, kind: str, name: str, namespace: str | None = None, *extra: str):
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("delete", kind, name, *ns, "--ignore-not-found", *extra)

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> Any:
        """The object (or list) as a dict; None when it does not exist."""
        ns = ["-n", namespace] if namespace else []
        proc = self.kubectl("get", kind, *([name] if name else []), *ns, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            pytest.fail(f"kubectl get {kind} {name}: {proc.stderr}", pytrace=False)
        return json.loads(proc.stdout)

    def logs(self, pod: str, namespace: str, container: str | None = None, previous: bool = False) -> str:
        args = ["logs", pod, "-n", namespace, *(["-c", container] if container else [])]
        return self.kubectl(*args, *(["--previous"] if previous else []), check=False).stdout

    wait_for = staticmethod(wait_for)

    def table(self, *args: str) -> list[dict[str, str]]:
        """`kubectl get ...` as printed, parsed into rows keyed by column header (what users see)."""
        out = self.kubectl("get", *args).stdout
        return parse_table(out)

    def diagnostics(self, namespace: str) -> str:
        """What a human would look at when a test in `namespace` failed."""
        parts = []
        for args in (
            ["get", "all,events,llmservings", "-n", namespace, "-o", "wide"],
            ["describe", "pods", "-n", namespace],
        ):
            proc = self.kubectl(*args, check=False)
            parts.append(f"$ kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
        pods = self.get("pods", namespace=namespace) or {"items": []}
        for pod in pods["items"]:
            name = pod["metadata"]["name"]
            for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                for prev in (False, True):
                    text = self.logs(name, namespace, c["name"], previous=prev)
                    if text:
                        parts.append(f"--- logs {name}/{c['name']}{' (previous)' if prev else ''}\n{text[-4000:]}")
        return "\n".join(parts)


def parse_table(out: str) -> list[dict[str, str]]:
    """Parse kubectl's column output; a column starts where its header starts."""
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = []
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else len(line)
            cells.append(line[s:e].strip())
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _cluster_script(*args: str, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        ["bash", str(HACK / "cluster.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def cluster() -> Iterable[Cluster]:
    if os.geteuid() != 0:
        pytest.fail("the cluster tests need root (network namespaces, containerd, kubelet)", pytrace=False)
    missing = [b for b in ("kube-apiserver", "kubelet", "kubectl", "etcd") if not (BIN_DIR / b).exists()]
    if missing:
        pytest.fail(f"missing {missing} in {BIN_DIR}: run `make binaries` (hack/build-binaries.sh)", pytrace=False)
    status = _cluster_script("status")
    started = status.returncode != 0
    if started:
        proc = _cluster_script("up")
        if proc.returncode != 0:
            pytest.fail(f"hack/cluster.sh up failed:\n{proc.stderr[-6000:]}", pytrace=False)
    enter_netns(NETNS)
    c = Cluster(STATE_DIR, NETNS)
    os.environ["KUBECONFIG"] = str(c.kubeconfig)
    os.environ["PATH"] = f"{BIN_DIR}:{os.environ['PATH']}"
    yield c
    # A cluster is left running for the next session (`make down` stops it) unless asked otherwise.
    if started and os.environ.get("OVSERVE_CLUSTER_DOWN_AFTER") == "1":
        _cluster_script("down")


def _dns_label(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@contextlib.contextmanager
def node_cache_root(prefix: str) -> Iterator[Path]:
    """A root for spec.cache mode node (the operator's OVSERVE_CACHE_HOST_ROOT) on this one-node cluster's host,
    provisioned writable for the runtime's UID as an admin would; removed afterwards."""
    root = Path("/var/tmp") / f"{prefix}-{uuid.uuid4().hex[:6]}"
    root.mkdir()
    os.chmod(root, 0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def make_namespace(cluster: Any, prefix: str, psa: str = "restricted") -> str:
    """A namespace enforcing Pod Security `psa` (restricted as in the `namespace` fixture; `privileged`
    only where a pod-level hostPath model volume must be admitted: restricted, and even baseline, refuse
    hostPath volumes). It always warns at restricted, so what would not pass is visible."""
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": psa,
                    "pod-security.kubernetes.io/enforce-version": "latest",
                    "pod-security.kubernetes.io/warn": "restricted",
                    "ovserve.dev/test": "true",
                },
            },
        }
    )
    cluster.wait_for(lambda: cluster.get("serviceaccount", "default", name), 60, f"ServiceAccount default in {name}")
    return name


@pytest.fixture
def namespace(cluster: Cluster, request) -> Iterable[str]:
    """A fresh namespace that enforces the restricted Pod Security Standard; diagnostics on failure."""
    name = make_namespace(cluster, f"t-{_dns_label(request.node.name, 40)}")
    yield name
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        request.node.add_report_section("teardown", "cluster diagnostics", cluster.diagnostics(name))
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def tiny_models() -> Path:
    """The tiny test models of hack/models/build.sh (built once, cached outside git)."""
    proc = run_on_host_network(["bash", str(HACK / "models" / "build.sh")], timeout=3000)
    if proc.returncode != 0:
        pytest.fail(f"hack/models/build.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return MODELS_DIR


@pytest.fixture(scope="session")
def project_image(cluster: Cluster) -> str:
    """localhost/ovserve:dev built from the Dockerfile and imported into the node (cached by input hash)."""
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "project"], timeout=2400)
    if proc.returncode != 0:
        pytest.fail(f"hack/images.sh project failed:\n{proc.stderr[-6000:]}", pytrace=False)
    return PROJECT_IMAGE


class DevicePlugin:
    """The fake Intel GPU device plugin of hack/deviceplugin, run by hack/cluster.sh gpu."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def start(self, count: int = 2) -> None:
        proc = _cluster_script("gpu", "on", str(count))
        if proc.returncode != 0:
            pytest.fail(f"starting the fake GPU plugin failed:\n{proc.stderr}", pytrace=False)

    def stop(self) -> None:
        proc = _cluster_script("gpu", "off")
        if proc.returncode != 0:
            pytest.fail(f"stopping the fake GPU plugin failed:\n{proc.stderr}", pytrace=False)

    def allocatable(self) -> int:
        node = self.cluster.get("node", "node1")
        return int(node["status"].get("allocatable", {}).get("gpu.intel.com/i915", "0"))


@pytest.fixture
def device_plugin(cluster: Cluster) -> Iterable[DevicePlugin]:
    """Control of the fake GPU plugin; the cluster's default (2 devices) is restored afterwards."""
    plugin = DevicePlugin(cluster)
    yield plugin
    plugin.start(int(os.environ.get("OVSERVE_FAKE_GPUS", "2")))


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
