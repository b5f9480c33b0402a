"""The checked-in CRD is generated from the pydantic model; fails on drift; structural-schema checks."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from ovserve_operator import crd
from ovserve_operator import spec as api
from pydantic import ValidationError


def _walk(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_checked_in_crd_matches_the_model():
    assert crd.CRD_FILE.exists(), "run: python -m ovserve_operator.crd"
    assert crd.CRD_FILE.read_text() == crd.render_yaml(), (
        "crds/ drifted from ovserve_operator/spec.py: run `python -m ovserve_operator.crd`"
    )


def test_check_flag():
    proc = subprocess.run([sys.executable, "-m", "ovserve_operator.crd", "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_structural_schema():
    doc = yaml.safe_load(crd.CRD_FILE.read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "title" not in node and "$defs" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        if "properties" in node and path.endswith(("spec", "status")):
            assert node["type"] == "object"
        assert node.get("additionalProperties") is not False, path
    spec = schema["properties"]["spec"]
    assert spec["properties"]["pipelineType"]["enum"] == ["AUTO", "LM", "LM_CB", "VLM", "VLM_CB"]
    assert spec["properties"]["pipelineType"]["default"] == "AUTO"
    assert spec["properties"]["device"] == {
        **spec["properties"]["device"],
        "enum": ["CPU", "GPU"],
        "default": "CPU",
    }
    assert spec["properties"]["replicas"]["default"] == 1
    model = spec["properties"]["model"]
    assert "exactly one of" in model["x-kubernetes-validations"][0]["message"]
    for path, node in _walk(spec):
        if node.get("type") and not path.endswith(("properties", "items")):
            assert (
                node.get("description")
                or path.count(".") > 8
                or "additionalProperties" in path
                or path.endswith(("requests", "limits"))
                or "anyOf" in path
            ), f"no description at {path}"
    conds = schema["properties"]["status"]["properties"]["conditions"]
    assert conds["x-kubernetes-list-type"] == "map" and conds["x-kubernetes-list-map-keys"] == ["type"]
    assert conds["items"]["properties"]["reason"]["pattern"] == api.REASON_PATTERN
    # no defaults in status (the apiserver would invent status fields)
    assert not [p for p, n in _walk(schema["properties"]["status"]) if "default" in n]


def test_names_subresources_columns():
    doc = yaml.safe_load(crd.CRD_FILE.read_text())
    assert doc["metadata"]["name"] == "llmservings.ovserve.dev"
    names = doc["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("LLMServing", "llmservings", ["llms"])
    assert doc["spec"]["scope"] == "Namespaced"
    v = doc["spec"]["versions"][0]
    assert v["name"] == "v1alpha1" and v["served"] and v["storage"]
    assert v["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    cols = [(c["name"], c["jsonPath"]) for c in v["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == [
        ("Requested", ".spec.pipelineType"),
        ("Resolved", ".status.pipeline.resolved"),
        ("Fallback", ".status.pipeline.fallbackReason"),
        ("Task", ".status.task.resolved"),
        ("Device", ".spec.device"),
        ("Ready", ".status.readyDisplay"),
        ("Phase", ".status.phase"),
        ("Age", ".metadata.creationTimestamp"),
    ]


@pytest.mark.parametrize(
    "spec,error",
    [
        (
            {"model": {}},
            None,
        ),  # the CRD's CEL rule refuses this; the model is lenient (rule lives in the CRD)
        ({"model": {"hostPath": {"path": "relative"}}}, "pattern"),
        ({"model": {"hostPath": {"path": "/m"}}, "pipelineType": "CB"}, "pipelineType"),
        ({"model": {"hostPath": {"path": "/m"}}, "device": "NPU"}, "device"),
        ({"model": {"hostPath": {"path": "/m"}}, "replicas": -1}, "replicas"),
        ({"model": {"hostPath": {"path": "/m"}}, "bogus": 1}, "bogus"),
        (
            {"model": {"hostPath": {"path": "/m"}}, "scheduler": {"kvCachePrecision": "f64"}},
            "kvCachePrecision",
        ),
    ],
)
def test_spec_model_validation(spec, error):
    if error is None:
        api.parse_spec(spec)
        return
    with pytest.raises(ValidationError) as e:
        api.parse_spec(spec)
    assert error in str(e.value)


def test_defaults_match_between_model_and_crd():
    s = api.parse_spec({"model": {"hostPath": {"path": "/m"}}})
    assert (s.pipelineType, s.device, s.replicas) == ("AUTO", "CPU", 1)
