"""The runtime's import layers: no circle between its packages and modules (an import inside a function counts
too), the serving layer below the HTTP app and the task loaders, and importable on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import ovserve_runtime

ROOT = Path(ovserve_runtime.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Top-level part of ovserve_runtime (a subpackage or a module) -> the parts it imports, read from the
    source of every module (imports in function bodies included)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("").parts
        package = list(rel[:-1])  # what a relative import starts from
        part = rel[1] if len(rel) > 1 else rel[0]
        if path.name == "__init__.py" and len(rel) == 2:
            continue  # ovserve_runtime/__init__.py
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                names = [module] + [f"{module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                bits = name.split(".")
                if bits[0] == "ovserve_runtime" and len(bits) > 1 and bits[1] != part:
                    edges[part].add(bits[1].removesuffix(".py"))
    return edges


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_runtime_packages_import_each_other_in_no_circle():
    edges = _imports()
    assert "serving" in edges and "http" in edges  # the scan reads the tree
    assert _circle(edges) is None, " -> ".join(_circle(edges) or [])


def test_the_serving_layer_sits_below_the_http_app_and_the_task_loaders():
    edges = _imports()
    assert not edges["serving"] & {"http", "tasks", "cli"}, edges["serving"]
    assert not edges["tasks"] & {"http", "cli"}, edges["tasks"]
    assert {"serving", "tasks"} <= edges["http"]


def _fresh(code: str) -> str:
    """What `code` prints in a fresh interpreter (it must succeed)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_serving_layer_imports_first_in_a_fresh_interpreter():
    code = (
        "import sys, ovserve_runtime.serving as s; "
        "assert s.ChatServing and s.TaskServing and s.ServingState; "
        "print(sorted(m for m in sys.modules if m.startswith(('ovserve_runtime.http', 'ovserve_runtime.tasks'))))"
    )
    assert _fresh(code) == "[]"


def test_the_operator_loads_the_runtimes_contract_not_its_serving_machinery():
    """The operator shares the runtime's typed contract (flags, report, endpoints, metric names) and nothing that
    serves: importing the runtime's metrics module for four names once loaded prometheus_client into every
    operator (4 MiB of its RSS, ~40 modules)."""
    code = (
        "import sys, ovserve_operator.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prometheus_client', 'openvino', "
        "'openvino_genai', 'fastapi', 'starlette', 'uvicorn') or m.startswith(('ovserve_runtime.metrics', "
        "'ovserve_runtime.http', 'ovserve_runtime.serving', 'ovserve_runtime.engine'))))"
    )
    assert _fresh(code) == "[]"
