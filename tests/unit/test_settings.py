"""Operator configuration from the environment (docs/interfaces.md) and the kopf settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from ovserve_operator import cli, settings
from ovserve_operator.settings import Settings, parse_selector

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


@pytest.mark.parametrize(
    "env,attr,value",
    [
        ({}, "watch_namespaces", ()),
        ({"OVSERVE_WATCH_NAMESPACES": "a, b,,c"}, "watch_namespaces", ("a", "b", "c")),
        ({"OVSERVE_WATCH_NAMESPACES": ""}, "clusterwide", True),
        ({"OVSERVE_ALLOWED_IMAGES": " "}, "allowed_images", ()),
        ({"OVSERVE_RUNTIME_IMAGE": ""}, "runtime_image", "localhost/ovserve:dev"),  # empty = unset
        ({"OVSERVE_LEADER_ELECTION": ""}, "leader_election", True),
        ({"OVSERVE_LOG_LEVEL": "debug"}, "log_level", "DEBUG"),
        ({"OVSERVE_PROMETHEUS_URL": "http://prom:9090/"}, "prometheus_url", "http://prom:9090"),
        ({"OVSERVE_WATCH_NAMESPACES": "a"}, "clusterwide", False),
        ({}, "runtime_image", "localhost/ovserve:dev"),
        ({"OVSERVE_RUNTIME_IMAGE": "r/x:1"}, "runtime_image", "r/x:1"),
        ({}, "runtime_image_pull_policy", "IfNotPresent"),
        ({"OVSERVE_RUNTIME_IMAGE_PULL_POLICY": "Always"}, "runtime_image_pull_policy", "Always"),
        ({}, "gpu_resource", "gpu.intel.com/i915"),
        ({"OVSERVE_GPU_RESOURCE": "gpu.intel.com/xe"}, "gpu_resource", "gpu.intel.com/xe"),
        ({}, "gpu_node_selector", {"intel.feature.node.kubernetes.io/gpu": "true"}),
        ({"OVSERVE_GPU_NODE_SELECTOR": ""}, "gpu_node_selector", {}),
        ({"OVSERVE_GPU_NODE_SELECTOR": "a=1, b=2"}, "gpu_node_selector", {"a": "1", "b": "2"}),
        ({"OVSERVE_GPU_SUPPLEMENTAL_GROUPS": "109,992"}, "gpu_supplemental_groups", (109, 992)),
        ({"OVSERVE_HF_ENDPOINT": "https://mirror:8443/"}, "hf_endpoint", "https://mirror:8443"),
        (
            {"OVSERVE_HF_ENDPOINT": "http://mirror:8080/", "OVSERVE_HF_ALLOW_HTTP": "true"},
            "hf_endpoint",
            "http://mirror:8080",
        ),
        ({}, "hf_allow_http", False),
        ({"OVSERVE_HF_ALLOW_HTTP": "yes"}, "hf_allow_http", True),
        ({}, "leader_election", True),
        ({"OVSERVE_READBACK_GRACE_SECONDS": "12"}, "readback_grace_s", 12.0),
        ({"OVSERVE_LEADER_ELECTION": "false"}, "leader_election", False),
        ({"OVSERVE_LEADER_ELECTION": "True"}, "leader_election", True),
        ({}, "lease_namespace", "default"),
        ({"POD_NAMESPACE": "ops"}, "lease_namespace", "ops"),
        ({"POD_NAMESPACE": "ops", "OVSERVE_LEASE_NAMESPACE": "lease"}, "lease_namespace", "lease"),
        ({}, "lease_name", "ovserve-operator"),
        ({"OVSERVE_LEASE_NAME": "x"}, "lease_name", "x"),
        ({"POD_NAME": "op-0"}, "identity", "op-0"),
        ({}, "health_port", 8080),
        ({"OVSERVE_HEALTH_PORT": "9090"}, "health_port", 9090),
        (
            {
                "OVSERVE_LEASE_DURATION_SECONDS": "6",
                "OVSERVE_LEASE_RENEW_DEADLINE_SECONDS": "4",
                "OVSERVE_LEASE_RETRY_PERIOD_SECONDS": "1",
            },
            "lease_duration_s",
            6.0,
        ),
        ({"OVSERVE_STATUS_INTERVAL_SECONDS": "1.5"}, "status_interval_s", 1.5),
        ({}, "runtime_prestop_s", 5),
        ({"OVSERVE_RUNTIME_PRESTOP_SECONDS": "0"}, "runtime_prestop_s", 0),
        ({}, "runtime_drain_timeout_s", 30),
        ({"OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS": "600"}, "runtime_drain_timeout_s", 600),
    ],
)
def test_from_env(env, attr, value):
    assert getattr(Settings.from_env(env), attr) == value


def test_identity_default_is_hostname_pid():
    import os
    import socket

    assert Settings.from_env({}).identity == f"{socket.gethostname()}-{os.getpid()}"


@pytest.mark.parametrize(
    "env,message",
    [
        ({"OVSERVE_LEADER_ELECTION": "maybe"}, "OVSERVE_LEADER_ELECTION"),
        (
            {"OVSERVE_GPU_NODE_SELECTOR": "a=1,novalue"},
            "OVSERVE_GPU_NODE_SELECTOR='a=1,novalue': expected a comma list of key=value, got 'novalue'",
        ),
        ({"OVSERVE_HEALTH_PORT": "http"}, "OVSERVE_HEALTH_PORT"),
        ({"OVSERVE_HF_ENDPOINT": "mirror"}, "OVSERVE_HF_ENDPOINT"),
        ({"OVSERVE_HF_ENDPOINT": "http://mirror:8080"}, "OVSERVE_HF_ALLOW_HTTP=true"),
        ({"OVSERVE_HF_ALLOW_HTTP": "sometimes"}, "OVSERVE_HF_ALLOW_HTTP"),
        ({"OVSERVE_HEALTH_PORT": "70000"}, "OVSERVE_HEALTH_PORT='70000': input should be less than or equal to 65535"),
        ({"OVSERVE_RUNTIME_IMAGE_PULL_POLICY": "Sometimes"}, "PULL_POLICY"),
        ({"OVSERVE_LEASE_DURATION_SECONDS": "5"}, "renew deadline"),
        ({"OVSERVE_LEASE_RETRY_PERIOD_SECONDS": "x"}, "a number"),
        (
            {"OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS": "1.5"},
            "OVSERVE_RUNTIME_DRAIN_TIMEOUT_SECONDS='1.5': input should be a valid integer",
        ),
        (
            {"OVSERVE_RUNTIME_PRESTOP_SECONDS": "-1"},
            "OVSERVE_RUNTIME_PRESTOP_SECONDS='-1': input should be greater than or equal to 0",
        ),
        (
            {"OVSERVE_STATUS_INTERVAL_SECONDS": "0"},
            "OVSERVE_STATUS_INTERVAL_SECONDS='0': input should be greater than 0",
        ),
        (
            {"OVSERVE_READBACK_GRACE_SECONDS": "nan"},
            "OVSERVE_READBACK_GRACE_SECONDS='nan': input should be a finite number",
        ),
        (
            {"OVSERVE_GPU_SUPPLEMENTAL_GROUPS": "109,render"},
            "OVSERVE_GPU_SUPPLEMENTAL_GROUPS='109,render': input should be a valid integer",
        ),
        ({"OVSERVE_PROMETHEUS_URL": "prometheus:9090"}, "OVSERVE_PROMETHEUS_URL='prometheus:9090': expected an http"),
        ({"OVSERVE_LOG_LEVEL": "chatty"}, "OVSERVE_LOG_LEVEL='chatty': input should be 'DEBUG'"),
    ],
)
def test_from_env_errors(env, message):
    with pytest.raises(ValueError) as exc:
        Settings.from_env(env)
    assert message in str(exc.value)


def test_every_bad_variable_is_named_at_once():
    with pytest.raises(ValueError) as exc:
        Settings.from_env({"OVSERVE_HEALTH_PORT": "http", "OVSERVE_LEADER_ELECTION": "maybe"})
    assert "OVSERVE_HEALTH_PORT='http'" in str(exc.value) and "OVSERVE_LEADER_ELECTION='maybe'" in str(exc.value)


def test_docs_table_is_generated_from_the_settings():
    text = DOC.read_text()
    assert settings.DOCS.render_into(text) == text, (
        "docs/operator.md drifted: python -m ovserve_operator.settings --write docs/operator.md"
    )
    for field in Settings.model_fields:  # every variable from_env reads has its row
        for name in settings.env_names(field):
            assert f"`{name}`" in text, name


def test_a_flag_is_validated_like_its_variable():
    args = cli.build_parser().parse_args(["--health-port", "70000"])
    with pytest.raises(ValueError, match="less than or equal to 65535"):
        cli.settings_from(args, {})


def test_parse_selector():
    assert parse_selector("a=b,c=") == {"a": "b", "c": ""}


@pytest.mark.parametrize("value", ["team-*", "!kube-system", "Team-A", "a,b*"])
def test_namespace_globs_are_refused_not_dropped(value):
    """With scanning off kopf would drop a glob silently (and watch nothing there): refused at start, named."""
    with pytest.raises(ValueError, match="globs are not supported"):
        Settings.from_env({"OVSERVE_WATCH_NAMESPACES": value})
    assert Settings.from_env({"OVSERVE_WATCH_NAMESPACES": "team-a,team-b"}).watch_namespaces == ("team-a", "team-b")


MANAGED = "app.kubernetes.io/managed-by=ovserve-operator"


@pytest.mark.parametrize(
    "kind,want",
    [
        ("Pod", f"{MANAGED},app.kubernetes.io/component=runtime,ovserve.dev/llmserving"),
        ("Deployment", f"{MANAGED},ovserve.dev/llmserving"),
        ("Service", f"{MANAGED},ovserve.dev/llmserving"),
    ],
)
def test_child_reflectors_send_label_selectors_to_the_apiserver(kind, want):
    """Only the operator's own children stream to it (the selector goes to the apiserver with the LIST and the
    watch), not every pod, Deployment and Service of the cluster; kopf watches none of them."""
    from ovserve_operator import cache, intake

    assert cache.label_selector(intake.CHILD_KINDS[kind][1], intake.PRESENT) == want


@pytest.mark.parametrize(
    "argv,env,attr,value",
    [
        ([], {"OVSERVE_WATCH_NAMESPACES": "a,b"}, "watch_namespaces", ("a", "b")),
        (["-n", "x", "-n", "y,z"], {"OVSERVE_WATCH_NAMESPACES": "a"}, "watch_namespaces", ("x", "y", "z")),
        (["--all-namespaces"], {"OVSERVE_WATCH_NAMESPACES": "a"}, "clusterwide", True),
        (["--no-leader-election"], {}, "leader_election", False),
        (["--leader-election"], {"OVSERVE_LEADER_ELECTION": "false"}, "leader_election", True),
        (["--health-port", "0"], {}, "health_port", 0),
        (["--identity", "me", "--lease-name", "l", "--lease-namespace", "n"], {}, "identity", "me"),
    ],
)
def test_cli_flags_override_env(argv, env, attr, value):
    args = cli.build_parser().parse_args(argv)
    assert getattr(cli.settings_from(args, env), attr) == value


def test_cli_help_and_bad_config(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    assert "ovserve-operator" in capsys.readouterr().out
    monkeypatch.setenv("OVSERVE_LEADER_ELECTION", "perhaps")
    assert cli.main([]) == 2
    assert "configuration error" in capsys.readouterr().err
