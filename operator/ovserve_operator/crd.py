"""Generate the LLMServing CustomResourceDefinition from the pydantic models in `spec`.

    python -m ovserve_operator.crd            # writes crds/ovserve.dev_llmservings.yaml
    python -m ovserve_operator.crd --check    # exit 1 when the checked-in file drifted
    python -m ovserve_operator.crd --stdout

The pydantic JSON schema is turned into a Kubernetes *structural* schema: $refs inlined, Optional
(anyOf [X, null]) collapsed to X, titles / null defaults / additionalProperties:false dropped,
descriptions kept (for `kubectl explain`), enums, defaults and x-kubernetes-* extensions kept.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from . import spec as api

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / f"{api.GROUP}_{api.PLURAL}.yaml"

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Requested",
        "type": "string",
        "jsonPath": ".spec.pipelineType",
        "description": "Requested pipeline (spec.pipelineType).",
    },
    {
        "name": "Resolved",
        "type": "string",
        "jsonPath": ".status.pipeline.resolved",
        "description": "Pipeline the runtime pods report they run.",
    },
    {
        "name": "Fallback",
        "type": "string",
        "jsonPath": ".status.pipeline.fallbackReason",
        "description": "Why AUTO fell back to the legacy pipeline; empty when it did not.",
    },
    {
        "name": "Task",
        "type": "string",
        "jsonPath": ".status.task.resolved",
        "description": "The task the runtime pods resolved: text-generation, embeddings, rerank or transcription.",
    },
    {"name": "Device", "type": "string", "jsonPath": ".spec.device", "description": "CPU or GPU."},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.readyDisplay",
        "description": "Ready replicas / desired replicas.",
    },
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Pending, Loading, Ready, Degraded or Failed.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Reason",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "Reason of the Ready condition.",
    },
    {
        "name": "Previous",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.previous.summary",
        "description": "Pods of an earlier spec still running: ready/count and their pipeline.",
    },
    {
        "name": "Autoscaling",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.autoscaling.display",
        "description": "minReplicas-maxReplicas and the autoscaler's last reason; empty without spec.autoscaling.",
    },
    {
        "name": "Routing",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.routing.display",
        "description": "The InferencePool's Ready endpoints, or why there is no pool; empty without spec.routing.",
    },
    {
        "name": "Speculative",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.speculative.display",
        "description": "Speculative decoding that runs (draft, promptLookup), or none (reason) when it fell back; "
        "empty without spec.speculative.",
    },
    {
        "name": "Endpoint",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.endpoint",
        "description": "Cluster URL of the OpenAI-compatible API.",
    },
    {
        "name": "Changed",
        "type": "date",
        "priority": 1,
        "jsonPath": ".status.computedAt",
        "description": "When the status last changed (it is written only on change; the operator's Lease tells "
        "whether one runs).",
    },
]

_DROP = {"title", "$defs", "definitions"}


def _structural(node: Any, defs: dict[str, Any], *, keep_defaults: bool) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs, keep_defaults=keep_defaults) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    base: dict[str, Any] = {}
    if "$ref" in node:
        ref = node.pop("$ref").split("/")[-1]
        base = _structural(defs[ref], defs, keep_defaults=keep_defaults)
    elif "anyOf" in node and any(alt == {"type": "null"} for alt in node["anyOf"]):
        alts = [alt for alt in node.pop("anyOf") if alt != {"type": "null"}]
        if len(alts) != 1:
            raise ValueError(f"cannot make a structural schema of a union: {alts}")
        base = _structural(alts[0], defs, keep_defaults=keep_defaults)
    out: dict[str, Any] = dict(base)
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and (value is None or not keep_defaults):
            continue
        if key == "additionalProperties" and isinstance(value, bool):
            continue  # false is the pydantic default for closed models; true is spelled preserve-unknown
        if key == "properties":
            out[key] = {k: _structural(v, defs, keep_defaults=keep_defaults) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs, keep_defaults=keep_defaults)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema's numeric bound (pydantic gt/lt) is OpenAPI v3.0's bound + boolean flag
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = copy.deepcopy(value)
    if out.get("x-kubernetes-int-or-string"):
        # structural: int-or-string carries the canonical anyOf and no type; a pattern applies to strings
        out.pop("type", None)
    if out.get("additionalProperties") is not None and "properties" in out and not out["properties"]:
        out.pop("properties")
    return out


def model_schema(model: type, *, keep_defaults: bool = True) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation", ref_template="#/$defs/{model}")
    return _structural(raw, raw.get("$defs", {}), keep_defaults=keep_defaults)


def openapi_schema() -> dict[str, Any]:
    spec_schema = model_schema(api.LLMServingSpec)
    status_schema = model_schema(api.LLMServingStatus, keep_defaults=False)
    return {
        "type": "object",
        "description": (api.LLMServing.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion of this object (ovserve.dev/v1alpha1).",
            },
            "kind": {"type": "string", "description": "Kind of this object (LLMServing)."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "message": "metadata.name must be a DNS-1035 label (lower case, starts with a letter, "
                "at most 63 characters): it names the runtime Service",
            }
        ],
    }


def crd_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "ovserve", "app.kubernetes.io/part-of": "ovserve"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": ["ovserve"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                }
            ],
        },
    }


HEADER = (
    "# GENERATED by `python -m ovserve_operator.crd` from operator/ovserve_operator/spec.py: do not edit.\n"
    "# tests/unit/test_crd.py fails when this file drifts from the model.\n"
)


def render_yaml() -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(str, _str)
    return HEADER + yaml.dump(crd_manifest(), Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ovserve_operator.crd", description=__doc__.splitlines()[0])
    parser.add_argument("--output", "-o", type=Path, default=CRD_FILE, help=f"default: {CRD_FILE}")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the model")
    parser.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    text = render_yaml()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} drifted from ovserve_operator.spec; run python -m ovserve_operator.crd",
                file=sys.stderr,
            )
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
