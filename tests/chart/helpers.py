"""Rendering the chart with the real helm binary (no cluster needed) and reading what it renders."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN_DIR, ROOT

CHART = ROOT / "charts" / "ovserve"
EXAMPLES = ROOT / "examples"
HELM = BIN_DIR / "helm"


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: build it with hack/build-binaries.sh (make binaries)", pytrace=False)
    proc = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return proc


def values_file(tmp_path: Path, values: dict[str, Any], name: str = "values.json") -> Path:
    """Values as a file: exact JSON types (unlike --set, which guesses)."""
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def template_args(
    values: dict[str, Any] | None,
    tmp_path: Path | None,
    *,
    release: str = "ovs",
    namespace: str = "ovserve-system",
    extra: tuple[str, ...] = (),
) -> list[str]:
    args = ["template", release, str(CHART), "--namespace", namespace, *extra]
    if values:
        assert tmp_path is not None
        args += ["-f", str(values_file(tmp_path, values))]
    return args


def render(values: dict[str, Any] | None = None, tmp_path: Path | None = None, **kw: Any) -> list[dict]:
    """`helm template` -> the list of rendered objects."""
    out = helm(*template_args(values, tmp_path, **kw)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def container_env(deployment: dict) -> dict[str, Any]:
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def rbac_table(docs: list[dict]) -> dict[tuple[str, str, str], set[str]]:
    """{(scope, apiGroup, resource[/resourceName]): verbs} over every Role/ClusterRole of the release."""
    table: dict[tuple[str, str, str], set[str]] = {}
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        scope = "cluster" if d["kind"] == "ClusterRole" else "release-namespace"
        for rule in d.get("rules", []):
            names = rule.get("resourceNames") or [None]
            for group in rule.get("apiGroups", []):
                for res in rule.get("resources", []):
                    for n in names:
                        key = (scope, group or "core", res + (f"/{n}" if n else ""))
                        table.setdefault(key, set()).update(rule["verbs"])
    return table


# ------------------------------------------------------------------------------------ on the cluster


def can_i(cluster: Any, sa: str, namespace: str | None, verb: str, resource: str, *extra: str) -> bool:
    """`kubectl auth can-i` as the ServiceAccount (system:serviceaccount:NS:NAME), against the real RBAC."""
    ns = ["--all-namespaces"] if namespace is None else ["-n", namespace]
    proc = cluster.kubectl("auth", "can-i", verb, resource, "--as", sa, *ns, *extra, check=False)
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert answer in ("yes", "no"), f"can-i {verb} {resource}: {proc.stdout} {proc.stderr}"
    return answer == "yes"


def example_docs(name: str, models_dir: Path | str | None = None, **replace: str) -> list[dict]:
    """An example's objects, the model directory optionally moved to the models fixture's directory."""
    text = (EXAMPLES / name).read_text()
    if models_dir is not None:
        text = text.replace("/var/cache/ovserve/models", str(models_dir))
    for old, new in replace.items():
        text = text.replace(old, new)
    return [d for d in yaml.safe_load_all(text) if d]


def llms_phase(cluster: Any, name: str, namespace: str) -> str | None:
    obj = cluster.get("llmserving", name, namespace)
    return ((obj or {}).get("status") or {}).get("phase")
