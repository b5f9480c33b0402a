"""End-to-end autoscaling on the real cluster: runtime pods scraped by Prometheus (Kubernetes service
discovery), KEDA's ScaledObject rendered by the operator, the HPA scaling the LLMServing through its scale
subresource, load sent through the Service with the openai client: streaming chat completions to a
generation serving, embeddings requests to an embeddings serving (both on QueueDepth, the metric
docs/autoscaling.md recommends for them).

Load is bounded (at most LOAD_MAX_S seconds and LOAD_MAX_REQUESTS requests) and cluster-internal only.
The measured scale-up time (load start -> a second replica Ready in `kubectl get llms`) is printed; the
figures in docs/autoscaling.md come from these tests.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable

import openai
import pytest

from tests.autoscaling.conftest import PROMETHEUS, prom_query
from tests.operator.conftest import service_account_kubeconfig
from tests.operator.test_operator_e2e import (
    CHART_LEASE,
    NOWHERE,
    UNSTARTED,
    chart_rbac,
    condition,
    llms,
    pvc_model,
    row,
    status,
)

pytestmark = [pytest.mark.cluster]

LOAD_MAX_S = 240
LOAD_MAX_REQUESTS = 5000
CONCURRENCY = 6


@pytest.fixture
def operator(start_operator, addons):
    """One operator whose ScaledObjects point KEDA at the cluster's Prometheus."""
    p = start_operator("op-autoscale", OVSERVE_PROMETHEUS_URL=addons)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        h = p.health()
        if h and h.get("role") == "leader" and h.get("kopf"):
            return p
        if not p.alive():
            pytest.fail(f"operator exited {p.proc.returncode}:\n{p.logs()}", pytrace=False)
        time.sleep(0.3)
    pytest.fail(f"operator did not become leader:\n{p.logs()}", pytrace=False)


class Load:
    """CONCURRENCY clients sending `send(client, model)` in a loop through the Service, until stopped or bounded."""

    def __init__(self, base_url: str, model: str, send: Callable[[openai.OpenAI, str], None]) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=30, max_retries=0)
        self.model = model
        self.send = send
        self.stop = threading.Event()
        self.sent = 0
        self.ok = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(CONCURRENCY)]
        self.t0 = self.t_stop = 0.0

    def _worker(self) -> None:
        while not self.stop.is_set() and time.monotonic() - self.t0 < LOAD_MAX_S:
            with self.lock:
                if self.sent >= LOAD_MAX_REQUESTS:
                    return
                self.sent += 1
            try:
                self.send(self.client, self.model)
                with self.lock:
                    self.ok += 1
            except openai.OpenAIError as e:  # counted, never retried blindly
                with self.lock:
                    self.errors.append(repr(e)[:300])
                time.sleep(0.2)

    def start(self) -> None:
        self.t0, self.t0_wall = time.monotonic(), time.time()
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.t_stop = time.monotonic()
        self.stop.set()
        for t in self.threads:
            t.join(40)


def chat(client: openai.OpenAI, model: str) -> None:
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "count"}],
        max_tokens=400,  # the tiny model's context is 512
        stream=True,
        # every request generates its 400 tokens: the random tiny model often says EOS within a few, and then
        # requests end in milliseconds and the queue the HPA reads comes and goes (once the server got faster,
        # the HPA scaled back to 1 before the second pod was Ready)
        extra_body={"ignore_eos": True},
    )
    for _ in stream:
        pass


def test_cel_refuses_min_above_max(cluster, crd, namespace):
    bad = llms(
        "bad", {"model": {"hostPath": {"path": "/m"}}, "autoscaling": {"minReplicas": 3, "maxReplicas": 2, "target": 1}}
    )
    proc = cluster.create(bad, namespace, check=False)
    assert proc.returncode != 0
    assert "autoscaling.minReplicas must be <= autoscaling.maxReplicas" in proc.stderr
    zero = llms(
        "zero",
        {"model": {"hostPath": {"path": "/m"}}, "autoscaling": {"minReplicas": 0, "maxReplicas": 2, "target": 1}},
    )
    proc = cluster.create(zero, namespace, check=False)
    assert proc.returncode != 0 and "minReplicas" in proc.stderr


def test_scales_up_under_load_and_back_down(cluster, operator, namespace, runtime):
    # The legacy pipeline serves one request at a time, so concurrent load queues: QueueDepth is the signal
    # (on the tiny model a continuous-batching pod finishes 400 tokens in milliseconds, and its running
    # requests are almost never caught by a scrape: the load there is HTTP-bound, not generation-bound).
    spec = {"model": pvc_model("tiny-llm"), "pipelineType": "LM"}
    scales_out_and_back(cluster, namespace, "scaler", spec, chat, "text-generation")


# 64 texts of about 30 tokens per request (the tiny encoder's context is 128), one text per pipeline call
# (maxBatch 1): a request is 64 calls, so the other clients' requests wait whole in the queue while it runs,
# however fast the machine (CI once saw a quiet machine finish 16-text requests in one fast call each, the
# queue read 0 at every scrape and nothing scaled)
EMBED_BATCH = 64
EMBED_TEXTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 3 for i in range(EMBED_BATCH)]


def embed(client: openai.OpenAI, model: str) -> None:
    got = client.embeddings.create(model=model, input=EMBED_TEXTS)  # base64, the client's default
    assert len(got.data) == EMBED_BATCH


def test_embeddings_serving_scales_out_under_load_and_back(cluster, operator, namespace, encoder_runtime):
    # The metric docs/autoscaling.md recommends for embeddings: QueueDepth, the requests admitted and not in the
    # pipeline call. maxBatch 1: a request is EMBED_BATCH calls, and the other clients' requests wait meanwhile.
    spec = {"model": pvc_model("tiny-embed"), "task": "embeddings", "embeddings": {"maxBatch": 1}}
    scales_out_and_back(cluster, namespace, "embedder", spec, embed, "embeddings")


def scales_out_and_back(
    cluster, namespace: str, name: str, spec: dict, send: Callable[[openai.OpenAI, str], None], task: str
) -> None:
    """One replica under no load; CONCURRENCY clients sending `send` through the Service: READY 2/2 (the HPA
    scaled the LLMServing on QueueDepth, target 1); load stopped: back to 1/1. Prints the measured times."""
    spec = {
        **spec,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "autoscaling": {
            "minReplicas": 1,
            "maxReplicas": 2,
            "metric": "QueueDepth",
            "target": 1,
            "pollingIntervalSeconds": 2,
            "scaleDownStabilizationSeconds": 10,
        },
    }
    hpa_name = f"keda-hpa-{name}"
    cluster.apply(llms(name, spec), namespace)

    # 1 replica Ready; the ScaledObject is KEDA-ready and its HPA reports
    def settled():
        st = status(cluster, namespace, name)
        a = st.get("autoscaling") or {}
        return (
            st.get("phase") == "Ready"
            and st.get("readyReplicas") == 1
            and a.get("desiredReplicas") == 1
            and condition(st, "Autoscaling").get("status") == "True"
            and st
        )

    st = cluster.wait_for(settled, 240, "1 Ready replica and an active autoscaler")
    assert (st.get("task") or {}).get("resolved") == task
    so = cluster.get("scaledobject", name, namespace)
    assert so["metadata"]["ownerReferences"][0]["kind"] == "LLMServing"
    assert so["spec"]["scaleTargetRef"]["kind"] == "LLMServing"
    selector = f'namespace="{namespace}",ovserve_dev_llmserving="{name}"'
    assert so["spec"]["triggers"][0]["metadata"]["query"] == f"sum(ovserve_queue_depth{{{selector}}})"
    hpa = cluster.get("hpa", hpa_name, namespace)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ovserve.dev/v1alpha1", "kind": "LLMServing", "name": name}
    assert (st["autoscaling"]["minReplicas"], st["autoscaling"]["maxReplicas"]) == (1, 2)
    wide = {r["NAME"]: r for r in cluster.table("llmservings", "-n", namespace, "-o", "wide")}[name]
    assert wide["AUTOSCALING"].startswith("1-2 ")

    # Prometheus found the pod by Kubernetes service discovery, with the labels the trigger selects on; the
    # pod's runtime exports the queried series whatever its task (ovserve_task_info says which one runs)
    series = cluster.wait_for(
        lambda: prom_query(f"ovserve_queue_depth{{{selector}}}"),
        60,
        f"the runtime pod's series in Prometheus ({PROMETHEUS})",
    )
    assert series[0]["metric"]["pod"].startswith(f"{name}-")
    info = prom_query(f"ovserve_task_info{{{selector}}}")
    assert [s["metric"]["task"] for s in info] == [task]

    svc = cluster.get("service", name, namespace)
    base_url = f"http://{svc['spec']['clusterIP']}:8000/v3"
    load = Load(base_url, name, send)  # the served name defaults to metadata.name
    load.start()

    # What the scale-up shows is recorded as it is seen, poll by poll: the HPA may scale back down within
    # seconds of the second pod becoming Ready (the tiny models' load is client-bound and splits over two
    # pods), so nothing about "2" may be read after the fact.
    seen: dict = {}

    def scaled_up():
        if not load.ok and len(load.errors) >= 10:  # the load itself is broken: say so now
            pytest.fail(f"every request failed: {load.errors[:3]}", pytrace=False)
        if "hpa" not in seen:
            hpa = cluster.get("hpa", hpa_name, namespace)
            if (hpa.get("status") or {}).get("desiredReplicas") == 2:
                seen["hpa"] = hpa
        if "status" not in seen:
            st = status(cluster, namespace, name)
            if (st.get("autoscaling") or {}).get("desiredReplicas") == 2:
                seen["status"] = st
        # spec.replicas as the HPA set it through the scale subresource: recorded when it reads 2 (by the time
        # READY shows 2/2 on a loaded machine the HPA may already have set it back to 1)
        if cluster.get("llmserving", name, namespace)["spec"]["replicas"] == 2:
            seen.setdefault("replicas", 2)
        if "ready" not in seen and row(cluster, namespace, name).get("READY") == "2/2":
            seen["ready"] = time.monotonic(), seen.get("replicas", 1)
        return len(seen) == 4

    try:
        # scale up: the HPA raises spec.replicas, a second runtime pod becomes Ready, READY shows it
        cluster.wait_for(
            scaled_up,
            LOAD_MAX_S - 20,
            "HPA desiredReplicas 2, status.autoscaling.desiredReplicas 2 and READY 2/2 under load",
            interval=1,
        )
    finally:
        load.finish()
    t_up, replicas_at_up = seen["ready"]
    scale_up_s = t_up - load.t0
    st, hpa = seen["status"], seen["hpa"]
    # the external metrics API (KEDA's metrics server behind the APIService) served the metric
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    current = hpa["status"]["currentMetrics"][0]["external"]["current"]
    assert load.ok > 0 and len(load.errors) <= load.sent // 10, load.errors[:5]
    assert replicas_at_up == 2  # the HPA scaled the LLMServing through its scale subresource
    a = st["autoscaling"]
    assert a["desiredReplicas"] == 2 and a.get("lastScaleTime")
    assert a["reason"] and condition(st, "Autoscaling")["status"] == "True"
    decided_s = dt.datetime.fromisoformat(a["lastScaleTime"].replace("Z", "+00:00")).timestamp() - load.t0_wall
    print(
        f"\n{task} scale-up: load start -> READY 2/2 in {scale_up_s:.1f} s (HPA rescaled after {decided_s:.0f} s, "
        f"+/- 1 s; KEDA polling 2 s, Prometheus scrape 5 s, HPA sync 15 s); external metric {metric} = {current}; "
        f"{load.ok} requests ok, {len(load.errors)} errors"
    )

    # load stopped: back to minReplicas after the 10 s stabilization window
    cluster.wait_for(
        lambda: (
            row(cluster, namespace, name).get("READY") == "1/1"
            and cluster.get("llmserving", name, namespace)["spec"]["replicas"] == 1
        ),
        180,
        "scale down to minReplicas (READY 1/1)",
        interval=1,
    )
    print(f"{task} scale-down: load stop -> READY 1/1 in {time.monotonic() - load.t_stop:.1f} s")
    st = cluster.wait_for(
        lambda: (s := status(cluster, namespace, name)).get("autoscaling", {}).get("desiredReplicas") == 1 and s,
        60,
        "status.autoscaling.desiredReplicas 1",
    )
    assert st["autoscaling"]["currentReplicas"] in (1, 2)
    assert st["phase"] == "Ready"


def test_kv_cache_usage_on_a_legacy_pipeline_is_named_not_silently_flat(cluster, operator, namespace, runtime):
    """KVCacheUsage on a model whose AUTO pipeline falls back to legacy (its IR has no SDPA op): the runtime's
    KV gauge stays 0 there, so an autoscaler that looks healthy would never scale out. The status says so."""
    name = "kvless"
    spec = {
        "model": pvc_model("tiny-llm-nosdpa"),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "metric": "KVCacheUsage", "target": 50},
    }
    cluster.apply(llms(name, spec), namespace)

    def named():
        st = status(cluster, namespace, name)
        return st.get("phase") == "Ready" and condition(st, "Autoscaling").get("reason") == "MetricNotExported" and st

    st = cluster.wait_for(named, 240, f"{name}: Ready, Autoscaling MetricNotExported")
    cond = condition(st, "Autoscaling")
    assert cond["status"] == "False", cond
    assert "legacy LM pipeline (PagedAttentionNotSupported)" in cond["message"], cond
    assert "QueueDepth" in cond["message"], cond  # what to use instead
    wide = {r["NAME"]: r for r in cluster.table("llmservings", "-n", namespace, "-o", "wide")}[name]
    assert wide["AUTOSCALING"] == "1-2 MetricNotExported", wide
    assert cluster.get("scaledobject", name, namespace) is not None  # the ScaledObject stays as the spec asks


def test_removing_autoscaling_deletes_the_scaled_object(cluster, operator, namespace):
    """The ScaledObject follows the field; replicas stay where the autoscaler left them."""
    name = "toggle"
    spec = {
        "model": {"huggingFace": {"repo": "ovserve-test/never-downloaded"}},  # pods never start: control plane only
        "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "metric": "QueueDepth", "target": 4},
    }
    cluster.apply(llms(name, spec), namespace)
    so = cluster.wait_for(lambda: cluster.get("scaledobject", name, namespace), 60, "ScaledObject created")
    trigger = so["spec"]["triggers"][0]["metadata"]
    assert trigger["query"] == f'sum(ovserve_queue_depth{{namespace="{namespace}",ovserve_dev_llmserving="{name}"}})'
    assert trigger["threshold"] == "4" and trigger["serverAddress"] == PROMETHEUS
    cluster.kubectl(
        "patch",
        "llmserving",
        name,
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/spec/autoscaling"}]',
    )
    cluster.wait_for(lambda: cluster.get("scaledobject", name, namespace) is None, 60, "ScaledObject deleted")
    cluster.wait_for(
        lambda: (
            "autoscaling" not in status(cluster, namespace, name)
            and not condition(status(cluster, namespace, name), "Autoscaling")
        ),
        30,
        "status.autoscaling and the Autoscaling condition gone",
    )


def test_someone_elses_scaled_object_is_never_taken_over(cluster, operator, namespace):
    foreign = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "taken", "labels": {"team": "other"}},
        "spec": {
            "scaleTargetRef": {"name": "someone-elses-deployment"},
            "minReplicaCount": 1,
            "maxReplicaCount": 5,
            "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "50"}}],
        },
    }
    cluster.apply(foreign, namespace)
    spec = {
        "model": {"huggingFace": {"repo": "ovserve-test/never-downloaded"}},
        "autoscaling": {"maxReplicas": 2, "target": 1},
    }
    cluster.apply(llms("taken", spec), namespace)
    st = cluster.wait_for(
        lambda: (
            (s := status(cluster, namespace, "taken")).get("autoscaling", {}).get("reason") == "ScaledObjectRefused"
            and s
        ),
        60,
        "reason ScaledObjectRefused",
    )
    assert "NameConflict" in st["autoscaling"]["message"]
    assert condition(st, "Autoscaling")["status"] == "False"
    so = cluster.get("scaledobject", "taken", namespace)
    assert so["spec"]["maxReplicaCount"] == 5 and not so["metadata"].get("ownerReferences")


def test_keda_discovery_on_the_real_apiserver(cluster, addons):
    """What KEDANotInstalled rests on: served() asks the apiserver, and tells a missing group apart."""
    from ovserve_operator.kube import Kube

    kube = Kube()
    assert kube.served("keda.sh/v1alpha1", "scaledobjects") is True
    assert kube.served("keda.sh/v1alpha1", "llmservings") is False
    assert kube.served("not-installed.example.com/v1", "scaledobjects") is False


def test_operator_works_with_the_charts_autoscaling_rbac(cluster, start_operator, namespace, tmp_path, addons):
    """The chart's ClusterRole with autoscaling.enabled (rendered by helm) is all the operator needs."""
    from tests.chart.helpers import one, render

    chart_role = one(render({"autoscaling": {"enabled": True}}, tmp_path), "ClusterRole")
    rules = [
        *chart_role["rules"],
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    ]  # the test's own Lease
    with service_account_kubeconfig(cluster, namespace, rules, tmp_path / "operator.kubeconfig") as path:
        op = start_operator("op-as-rbac", KUBECONFIG=str(path), OVSERVE_PROMETHEUS_URL=addons)
        cluster.wait_for(lambda: (op.health() or {}).get("role") == "leader", 60, "leader with the SA's rights")
        unstarted = {"huggingFace": {"repo": "ovserve-test/never-downloaded"}}
        cluster.apply(llms("plain", {"model": unstarted}), namespace)
        cluster.apply(llms("scaled", {"model": unstarted, "autoscaling": {"maxReplicas": 2, "target": 1}}), namespace)
        cluster.wait_for(lambda: cluster.get("scaledobject", "scaled", namespace), 60, "ScaledObject created")
        cluster.wait_for(
            lambda: (
                status(cluster, namespace, "scaled").get("autoscaling", {}).get("reason")
                not in (None, "ScaledObjectPending", "WaitingForHPA", "ScaledObjectRefused")
            ),
            90,
            "a reason read from KEDA's HPA",
        )
        assert cluster.get("deployment", "plain", namespace) and not cluster.get("scaledobject", "plain", namespace)
        logs = op.logs()
        assert "403" not in logs and "Forbidden" not in logs, logs[-4000:]


def test_scaled_object_deleted_or_edited_by_hand_comes_back(cluster, operator, namespace):
    """The ScaledObject heals like the other children: re-created within 30 s of a delete, a hand edit of a
    rendered field reverted within 60 s (read on every status cycle: KEDA may be absent, so it is not watched)."""
    autoscaling = {"minReplicas": 1, "maxReplicas": 3, "target": 4}
    spec = {"model": UNSTARTED, "nodeSelector": NOWHERE, "autoscaling": autoscaling}
    cluster.apply(llms("heal", spec), namespace)
    uid = cluster.wait_for(lambda: cluster.get("scaledobject", "heal", namespace), 60, "ScaledObject")["metadata"][
        "uid"
    ]
    t0 = time.monotonic()
    cluster.kubectl("delete", "scaledobject", "heal", "-n", namespace)
    cluster.wait_for(
        lambda: (so := cluster.get("scaledobject", "heal", namespace)) and so["metadata"]["uid"] != uid,
        30,
        "the ScaledObject re-created",
    )
    print(f"ScaledObject back after {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    cluster.kubectl(
        "patch", "scaledobject", "heal", "-n", namespace, "--type=merge", "-p", '{"spec": {"maxReplicaCount": 9}}'
    )
    cluster.wait_for(
        lambda: cluster.get("scaledobject", "heal", namespace)["spec"]["maxReplicaCount"] == 3, 60, "edit reverted"
    )
    print(f"ScaledObject edit reverted after {time.monotonic() - t0:.1f} s")


def test_charts_rbac_without_autoscaling_refuses_visibly_without_a_retry_loop(
    cluster, start_operator, namespace, tmp_path, addons
):
    """Chart autoscaling.enabled=false (the default) on a cluster with KEDA: spec.autoscaling is refused in
    status (ScaledObjectRefused, naming the value to set), the LLMServing still runs at spec.replicas, and the
    operator does not retry the reconcile every 5 s."""
    rules, chart_objects = chart_rbac(namespace, tmp_path)  # helm's rules, autoscaling off
    assert not any("keda.sh" in r.get("apiGroups", []) for r in rules)
    cluster.apply(chart_objects, namespace)
    with service_account_kubeconfig(cluster, namespace, rules, tmp_path / "operator.kubeconfig") as path:
        op = start_operator(
            "op-no-as", KUBECONFIG=str(path), OVSERVE_LEASE_NAME=CHART_LEASE, OVSERVE_PROMETHEUS_URL=addons
        )
        cluster.wait_for(lambda: (op.health() or {}).get("role") == "leader", 60, "leader with the chart's rights")
        spec = {"model": UNSTARTED, "nodeSelector": NOWHERE, "autoscaling": {"maxReplicas": 2, "target": 1}}
        cluster.apply(llms("noscale", spec), namespace)
        st = cluster.wait_for(
            lambda: (
                (s := status(cluster, namespace, "noscale")).get("autoscaling", {}).get("reason")
                == "ScaledObjectRefused"
                and s
            ),
            60,
            "reason ScaledObjectRefused",
        )
        assert "autoscaling.enabled=true" in st["autoscaling"]["message"], st["autoscaling"]
        assert condition(st, "Autoscaling")["status"] == "False"
        assert cluster.get("deployment", "noscale", namespace) and cluster.get("service", "noscale", namespace)
        cluster.wait_for(
            lambda: condition(status(cluster, namespace, "noscale"), "Ready").get("reason") == "Unschedulable",
            60,
            "Ready tells the pods' truth, not an apply failure",
        )
        time.sleep(20)  # a 5 s retry loop would have run 4 times by now
        logs = op.logs()
        assert "failed temporarily" not in logs and "applying children failed" not in logs, logs[-4000:]
        assert logs.count("the ScaledObject was refused") <= 2, logs[-4000:]
