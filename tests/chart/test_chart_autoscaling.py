"""The chart's autoscaling parts, rendered by the real helm binary: RBAC for ScaledObjects only when
autoscaling.enabled, the Prometheus URL setting, and the optional runtime PodMonitor."""

from __future__ import annotations

import re

import pytest
from ovserve_operator import autoscaling
from ovserve_operator import render as operator_render

from tests.chart.helpers import by_kind, container_env, helm, one, rbac_table, render, template_args
from tests.chart.test_chart_static import EXPECTED_RBAC
from tests.conftest import ROOT

AUTOSCALING_RBAC = {
    ("cluster", "keda.sh", "scaledobjects"): {"get", "create", "patch", "delete"},
    ("cluster", "autoscaling", "horizontalpodautoscalers"): {"get"},
}
PODMONITOR_API = ("--api-versions", "monitoring.coreos.com/v1/PodMonitor")


def test_autoscaling_off_by_default_grants_nothing_of_keda(tmp_path):
    docs = render()
    assert rbac_table(docs) == EXPECTED_RBAC
    assert "OVSERVE_PROMETHEUS_URL" not in container_env(one(docs, "Deployment"))
    assert not by_kind(docs, "PodMonitor")


def test_autoscaling_enabled_grants_exactly_scaledobjects_and_reading_hpas(tmp_path):
    url = "http://prometheus-k8s.monitoring.svc:9090"
    docs = render({"autoscaling": {"enabled": True, "prometheusURL": url}}, tmp_path)
    table = rbac_table(docs)
    assert table == EXPECTED_RBAC | AUTOSCALING_RBAC
    assert container_env(one(docs, "Deployment"))["OVSERVE_PROMETHEUS_URL"] == url
    # namespaced scope: the same ClusterRole, bound only in the watched namespaces
    docs = render({"autoscaling": {"enabled": True}, "watchNamespaces": ["team-a"]}, tmp_path)
    assert rbac_table(docs) == EXPECTED_RBAC | AUTOSCALING_RBAC
    assert [
        b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding") if "leader" not in b["metadata"]["name"]
    ] == ["team-a"]


def test_autoscaling_doc_rbac_table_matches_the_chart():
    doc = (ROOT / "docs" / "autoscaling.md").read_text()
    section = doc.split("### RBAC the chart adds", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*([^|]+)\|", line)
        if m:
            group, res, verbs = (x.strip() for x in m.groups())
            rows[("cluster", group, res)] = {v.strip() for v in verbs.split(",")}
    assert rows == AUTOSCALING_RBAC


def test_runtime_pod_monitor_needs_the_prometheus_operator(tmp_path):
    values = {"metrics": {"runtimePodMonitor": {"enabled": True}}}
    proc = helm(*template_args(values, tmp_path), check=False)
    assert proc.returncode != 0 and "needs the Prometheus Operator" in proc.stderr


@pytest.mark.parametrize(
    "watch, selector", [([], {"any": True}), (["team-a", "team-b"], {"matchNames": ["team-a", "team-b"]})]
)
def test_runtime_pod_monitor_selects_runtime_pods_and_keeps_the_series_label(tmp_path, watch, selector):
    values = {
        "watchNamespaces": watch,
        "metrics": {"runtimePodMonitor": {"enabled": True, "interval": "5s", "labels": {"release": "prom"}}},
    }
    pm = one(render(values, tmp_path, extra=PODMONITOR_API), "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "prom"
    spec = pm["spec"]
    # the labels the operator puts on every runtime pod
    pod_labels = operator_render.labels("any")
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["namespaceSelector"] == selector
    # the Prometheus Operator names a pod target label after the sanitized pod label: the series label the
    # ScaledObject's query selects on
    [label] = spec["podTargetLabels"]
    assert re.sub(r"[^a-zA-Z0-9_]", "_", label) == autoscaling.SERIES_LABEL
    assert label == operator_render.LABEL_OWNER
    [ep] = spec["podMetricsEndpoints"]
    assert (ep["port"], ep["path"], ep["interval"]) == (operator_render.PORT_NAME, "/metrics", "5s")


BAD = [
    ({"autoscaling": {"enabled": "yes"}}, "enabled"),
    ({"autoscaling": {"prometheusURL": "prometheus:9090"}}, "prometheusURL"),
    ({"autoscaling": {"prometheusUrl": "http://p:9090"}}, "prometheusUrl"),
    ({"metrics": {"runtimePodMonitor": {"interval": 30}}}, "interval"),
]


@pytest.mark.parametrize(("values", "field"), BAD, ids=[f for _, f in BAD])
def test_schema_refuses_bad_autoscaling_values(values, field, tmp_path):
    proc = helm(*template_args(values, tmp_path), check=False)
    assert proc.returncode != 0 and field in proc.stderr, proc.stderr
