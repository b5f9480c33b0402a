"""Tenant policy (pure): hostPath, runtime image overrides, scheduling pass-through (nodeSelector,
tolerations, affinity)."""

from __future__ import annotations

import pytest
from ovserve_operator import policy
from ovserve_operator import spec as api
from ovserve_operator.settings import Settings

PVC = {"pvc": {"claimName": "models", "path": "m"}}
HOST = {"hostPath": {"path": "/models/m"}}


def spec(**kw) -> api.LLMServingSpec:
    return api.LLMServingSpec.model_validate({"model": PVC, **kw})


@pytest.mark.parametrize(
    "image,allowed,ok",
    [
        ("registry.example/ovserve:1.2", ("registry.example/ovserve",), True),
        ("registry.example/ovserve@sha256:abc", ("registry.example/ovserve",), True),
        ("registry.example/ovserve/runtime:1", ("registry.example/ovserve",), True),
        ("registry.example/ovserve-evil:1", ("registry.example/ovserve",), False),
        ("registry.example/other:1", ("registry.example/",), True),
        ("evil.example/ovserve:1", ("registry.example/",), False),
        ("anything:latest", ("*",), True),
        ("x:1", (), False),
        ("x:1", ("x:1",), True),
        ("x:12", ("x:1",), False),
        # a registry's port belongs to its host: another registry, not a tag
        ("registry.example:5000/evil:1", ("registry.example",), False),
        ("registry.example:5000/evil:1", ("registry.example:",), False),
        ("registry.example:5000/ovserve:1", ("registry.example:5000",), True),
        ("registry.example:5000/ovserve:1", ("registry.example:5000/",), True),
        ("registry.example:50001/ovserve:1", ("registry.example:5000",), False),
        ("localhost:5000/ovserve:dev", ("localhost",), False),
        ("localhost/ovserve:dev", ("localhost",), True),
        ("ubuntu:22.04", ("ubuntu",), True),  # a tag, no registry
        ("registry.example/ovserve:1@sha256:abc", ("registry.example/ovserve",), True),
        ("registry.example/ovserve:1", ("",), False),
    ],
)
def test_image_allowed(image, allowed, ok):
    assert policy.image_allowed(image, allowed) is ok


@pytest.mark.parametrize(
    "spec_kw,settings,denied",
    [
        ({}, Settings(), []),
        ({"model": HOST}, Settings(), ["OVSERVE_ALLOW_HOSTPATH"]),
        ({"model": HOST}, Settings(allow_host_path=True), []),
        ({"image": "evil/x:1"}, Settings(), ["OVSERVE_ALLOWED_IMAGES"]),
        ({"image": "localhost/ovserve:dev"}, Settings(), []),  # the operator's own runtime image
        ({"image": "r.example/ovserve:2"}, Settings(allowed_images=("r.example/ovserve",)), []),
        ({"tolerations": [{"operator": "Exists"}]}, Settings(), []),
        (
            {"tolerations": [{"operator": "Exists"}], "affinity": {"nodeAffinity": {}}},
            Settings(allow_scheduling_passthrough=False),
            ["spec.tolerations and spec.affinity denied"],
        ),
        ({"nodeSelector": {"pool": "a100"}}, Settings(), []),
        ({"networkPolicy": {}}, Settings(), ["OVSERVE_NETWORK_POLICIES"]),
        ({"networkPolicy": {"enabled": False}}, Settings(), []),
        ({"networkPolicy": {}}, Settings(network_policies=True), []),
        (
            {"nodeSelector": {"pool": "a100"}},
            Settings(allow_scheduling_passthrough=False),
            ["spec.nodeSelector denied"],
        ),
        (
            {"nodeSelector": {"pool": "a"}, "affinity": {"nodeAffinity": {}}},
            Settings(allow_scheduling_passthrough=False),
            ["spec.nodeSelector and spec.affinity denied"],
        ),
        (
            {"model": HOST, "image": "evil/x:1"},
            Settings(),
            ["OVSERVE_ALLOW_HOSTPATH", "OVSERVE_ALLOWED_IMAGES"],
        ),
    ],
)
def test_violations(spec_kw, settings, denied):
    got = policy.violations(spec(**spec_kw), settings)
    assert len(got) == len(denied)
    for message, setting in zip(got, denied, strict=True):
        assert setting in message


@pytest.mark.parametrize(
    "env,attr,value",
    [
        ({}, "allow_host_path", False),
        ({"OVSERVE_ALLOW_HOSTPATH": "true"}, "allow_host_path", True),
        ({}, "allowed_images", ()),
        ({"OVSERVE_ALLOWED_IMAGES": "a/b, c/"}, "allowed_images", ("a/b", "c/")),
        ({}, "allow_scheduling_passthrough", True),
        ({"OVSERVE_ALLOW_SCHEDULING_PASSTHROUGH": "false"}, "allow_scheduling_passthrough", False),
    ],
)
def test_policy_settings_from_env(env, attr, value):
    assert getattr(Settings.from_env(env), attr) == value
