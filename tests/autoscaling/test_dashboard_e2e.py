"""The chart's dashboard against live data: a continuous-batching serving of tiny-llm on the real cluster, scraped
by the cluster's Prometheus (Kubernetes service discovery, as the autoscaling tests), a little traffic through its
Service (answers, a stream, one refusal), then every PromQL expression of charts/ovserve/files/dashboard.json
(the Grafana variables substituted) is evaluated by Prometheus and must return data, and every alert expression
of charts/ovserve/files/alerts.yaml must be accepted by it."""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from tests.autoscaling.conftest import PROMETHEUS, prom_query
from tests.conftest import ROOT
from tests.operator.conftest import operator  # noqa: F401  (one operator watching the test namespace)
from tests.operator.test_operator_e2e import llms, pvc_model, status

pytestmark = [pytest.mark.cluster]

DASHBOARD = ROOT / "charts" / "ovserve" / "files" / "dashboard.json"
ALERTS = ROOT / "charts" / "ovserve" / "files" / "alerts.yaml"
NAME = "dash"


def post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def expressions(namespace: str) -> list[tuple[str, str]]:
    """(panel title, expression) of every dashboard query, with Grafana's variables as a dashboard user's."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for t in panel["targets"]:
            expr = (
                t["expr"]
                .replace("$namespace", namespace)
                .replace("$llmserving", NAME)
                .replace("$__rate_interval", "1m")
            )
            out.append((panel["title"], expr))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":  # label_values(<series>, label): the series must exist
            series = v["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0]
            out.append((f"variable {v['name']}", series.replace("$namespace", namespace)))
    return out


def has_data(result: list[dict]) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in result)


def test_every_dashboard_query_returns_live_data(cluster, addons, operator, namespace, runtime):  # noqa: F811
    cluster.apply(llms(NAME, {"model": pvc_model("tiny-llm"), "resources": {"requests": {"cpu": "100m"}}}), namespace)
    st = cluster.wait_for(
        lambda: (s := status(cluster, namespace, NAME)).get("phase") == "Ready" and s, 120, "the serving Ready"
    )
    assert st["pipeline"]["resolved"] == "LM_CB", st["pipeline"]
    svc = cluster.get("service", NAME, namespace)
    base = f"http://{svc['spec']['clusterIP']}:8000/v3"
    selector = f'namespace="{namespace}",ovserve_dev_llmserving="{NAME}"'
    cluster.wait_for(lambda: prom_query(f"ovserve_pipeline_info{{{selector}}}"), 60, f"the pod scraped ({PROMETHEUS})")

    # ~25 s of traffic (several scrapes at 5 s): answers, streams, and a refusal each round
    chat = {"model": NAME, "messages": [{"role": "user", "content": "count"}], "max_tokens": 24, "ignore_eos": True}
    answers: list[tuple[int, bytes]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 25:
        answers.append(post(base + "/chat/completions", chat))
        answers.append(post(base + "/chat/completions", {**chat, "stream": True}))
        answers.append(post(base + "/chat/completions", {**chat, "temperature": 9}))  # 400
        time.sleep(0.5)
    codes = [c for c, _ in answers]
    assert codes.count(200) == 2 * codes.count(400) and 400 in codes, answers[-3:]
    total = len(answers)  # every request counted once the last scrape came

    def scraped():
        got = prom_query(f"sum(ovserve_requests_total{{{selector}}})")
        return got and float(got[0]["value"][1]) >= total and got

    cluster.wait_for(scraped, 30, "Prometheus scraped the traffic")

    empty = []
    for title, expr in expressions(namespace):
        result = prom_query(expr)
        if not has_data(result):
            empty.append(f"{title}: {expr} -> {result}")
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

    # the alerts parse and evaluate in the real Prometheus (their firing is promtool's test)
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            url = f"{PROMETHEUS}/api/v1/query?{urllib.parse.urlencode({'query': rule['expr']})}"
            with urllib.request.urlopen(url, timeout=5) as r:
                assert json.loads(r.read())["status"] == "success", rule["alert"]
