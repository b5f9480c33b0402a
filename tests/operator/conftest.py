"""Fixtures of the operator end-to-end tests: the CRD installed, and operators run as local processes.

The operator runs as `python -m ovserve_operator` (the test process is inside the cluster's network
namespace, so the operator reaches pod IPs as it would in-cluster), each one watching only the test's
namespace and electing its leader on a Lease of its own, so tests never see each other's operators.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "ovserve.dev_llmservings.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OperatorProcess:
    def __init__(self, namespace: str, identity: str, lease: str, log_dir: Path, env: dict[str, str]) -> None:
        self.identity = identity
        self.lease = lease
        self.port = free_port()
        self.log_path = log_dir / f"operator-{identity}.log"
        self._log = self.log_path.open("w")
        full_env = {
            **os.environ,
            "OVSERVE_WATCH_NAMESPACES": namespace,
            "OVSERVE_LEASE_NAMESPACE": namespace,
            "OVSERVE_LEASE_NAME": lease,
            "POD_NAME": identity,
            "OVSERVE_HEALTH_PORT": str(self.port),
            "OVSERVE_LEASE_DURATION_SECONDS": "6",
            "OVSERVE_LEASE_RENEW_DEADLINE_SECONDS": "4",
            "OVSERVE_LEASE_RETRY_PERIOD_SECONDS": "1",
            "OVSERVE_STATUS_INTERVAL_SECONDS": "2",
            "OVSERVE_GPU_NODE_SELECTOR": "",
            # The tests' fake hubs are plain http, and their models are host directories (tenant policy).
            "OVSERVE_HF_ALLOW_HTTP": "true",
            "OVSERVE_ALLOW_HOSTPATH": "true",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ovserve_operator"],
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def logs(self) -> str:
        if not self._log.closed:  # after stop(): read what was written (teardown attaches it on failure)
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def crd(cluster) -> str:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.kubectl("wait", "--for", "condition=Established", "crd/llmservings.ovserve.dev", "--timeout=60s")
    # right after creation the apiserver may answer 429 for a moment
    cluster.wait_for(
        lambda: cluster.kubectl("get", "llmservings", "-A", check=False).returncode == 0,
        30,
        "llmservings to be served",
    )
    return "llmservings.ovserve.dev"


@pytest.fixture
def start_operator(cluster, crd, namespace, tmp_path, request):
    """start_operator(identity=None, **env) -> OperatorProcess watching `namespace` (stopped afterwards)."""
    lease = f"ovserve-operator-{uuid.uuid4().hex[:6]}"
    procs: list[OperatorProcess] = []

    def start(identity: str | None = None, **env: str) -> OperatorProcess:
        p = OperatorProcess(namespace, identity or f"op-{len(procs)}", lease, tmp_path, env)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for p in procs:
            request.node.add_report_section("teardown", f"operator {p.identity} log", p.logs()[-15000:])


@pytest.fixture
def operator(start_operator) -> Iterable[OperatorProcess]:
    """One operator (leader election on, as in production), ready to act."""
    p = start_operator("op-main")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        h = p.health()
        if h and h.get("role") == "leader" and h.get("kopf"):
            break
        if not p.alive():
            pytest.fail(f"operator exited {p.proc.returncode}:\n{p.logs()}", pytrace=False)
        time.sleep(0.3)
    else:
        pytest.fail(f"operator did not become leader:\n{p.logs()}", pytrace=False)
    yield p


@contextlib.contextmanager
def service_account_kubeconfig(cluster, namespace: str, rules: list[dict], path: Path) -> Iterator[Path]:
    """A ServiceAccount bound to a ClusterRole of exactly `rules`, and a kubeconfig with its token at `path`
    (for running an operator with nothing but those rights). The ClusterRole and binding go afterwards."""
    import yaml

    role = f"ovserve-rbac-test-{namespace}"[:63]
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator", "namespace": namespace}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
            },
        ]
    )
    try:
        token = cluster.kubectl("create", "token", "operator", "-n", namespace, "--duration=1h").stdout.strip()
        admin = yaml.safe_load(cluster.kubeconfig.read_text())
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": admin["clusters"],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [{"name": "op", "context": {"cluster": admin["clusters"][0]["name"], "user": "operator"}}],
            "current-context": "op",
        }
        path.write_text(yaml.safe_dump(kc))
        yield path
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found", check=False)


def report_module_diagnostics(request, cluster, ns_fixture: str, operator_fixture: str) -> None:
    """After a failed test of a module with its own namespace and operator: the cluster's view of the
    namespace and the operator's log, as report sections."""
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed or ns_fixture not in request.fixturenames:
        return
    ns = request.getfixturevalue(ns_fixture)
    request.node.add_report_section("teardown", "cluster diagnostics", cluster.diagnostics(ns))
    logs = request.getfixturevalue(operator_fixture).logs()
    request.node.add_report_section("teardown", "operator log", logs[-15000:])
