"""End to end (issue 42): a serving with `autoscaling.minReplicas: 0` and `spec.routing` on the real cluster, with
only real parts: KEDA scales it to zero after its idle window, GIE's endpoint picker (flow control on) holds the
requests that arrive while no pod runs, Prometheus scrapes the picker's held-request gauge, KEDA activates on it
and scales back to one, and every held request is answered once the pod is Ready. Then idle again: back to zero.

- status reads ScaledToZero (READY 0/0, the Autoscaling condition IdleAtZero, not a failure), then Activating while
  the first pod starts (a Normal Event each), then Ready;
- 8 concurrent first requests, all answered (none refused, none lost), their wait printed, with what the activated
  pod's start reused of OpenVINO's compiled-model cache on the node (spec.cache node; status.startup);
- a serving asking for minReplicas 0 without routing is refused by the CRD's rule, with the reason.

The picker and Envoy run as local processes in the cluster's network namespace (tests/routing/gateway.py), the
picker registered with the cluster's Prometheus through its file_sd directory (hack/cluster.sh).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from ovserve_operator import routing

from tests.autoscaling.conftest import addons, prom_query  # noqa: F401 (a fixture, used by name)
from tests.conftest import STATE_DIR, make_namespace, node_cache_root
from tests.operator.conftest import OperatorProcess
from tests.operator.test_operator_e2e import llms, models_claim, pvc_model, status

from .gateway import Gateway, missing_artefacts, routing_bin_dir
from .test_gateway_e2e import _chat, pool_crd, runtime_pods  # noqa: F401 (pool_crd: a fixture, used by name)

pytestmark = [pytest.mark.cluster]

NAME = "idle"
IDLE_S = 20  # autoscaling.idleSeconds: KEDA's cooldown (and initial cooldown)
POLL_S = 2  # KEDA's pollingInterval
HOLD_S = 150  # the picker holds a request this long at most
FIRST_REQUESTS = 8
ZERO_WAIT_S = 120  # initial cooldown, KEDA's poll, the pod's drain
ACTIVATE_WAIT_S = 150  # Prometheus's scrape (5 s), KEDA's poll, the pod's start

if missing := missing_artefacts(routing_bin_dir()):
    pytest.skip(f"`make routing` has not built {', '.join(missing)}", allow_module_level=True)


@pytest.fixture(scope="module")
def zero_ns(cluster, crd):
    ns = make_namespace(cluster, "t-zero", psa="privileged")  # hostPath volumes: the node's compiled-model cache
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def cache_root():
    with node_cache_root("ovserve-zero-cache") as root:
        yield root


@pytest.fixture(scope="module")
def zero_operator(cluster, zero_ns, addons, cache_root, tmp_path_factory):  # noqa: F811 (addons: a fixture)
    env = {"OVSERVE_ROUTING": "true", "OVSERVE_PROMETHEUS_URL": addons, "OVSERVE_CACHE_HOST_ROOT": str(cache_root)}
    lease = f"ovserve-operator-{uuid.uuid4().hex[:6]}"
    op = OperatorProcess(zero_ns, "op-zero", lease, tmp_path_factory.mktemp("op"), env)
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def zero_models(cluster, zero_ns, tiny_models):
    with models_claim(cluster, zero_ns, tiny_models):
        yield


def _phase(cluster, ns: str) -> tuple[str, str]:
    st = status(cluster, ns, NAME)
    return st.get("phase", ""), st.get("readyDisplay", "")


def _wait(cluster, ns: str, op: OperatorProcess, want: str, timeout: float, gw: Gateway | None = None) -> dict:
    last: list[tuple[str, str]] = [("", "")]

    def reached() -> bool:
        last[0] = _phase(cluster, ns)
        return last[0][0] == want

    try:
        cluster.wait_for(reached, timeout, f"phase {want}")
    except pytest.fail.Exception:
        keda = cluster.kubectl("get", "scaledobject", NAME, "-n", ns, "-o", "json", check=False).stdout[-3000:]
        logs = gw.logs(2000) if gw is not None else ""
        pytest.fail(
            f"phase {want} not reached in {timeout:.0f}s: last {last[0]}\nScaledObject: {keda}\n"
            f"operator log tail:\n{op.logs()[-3000:]}\n{logs}",
            pytrace=False,
        )
    return status(cluster, ns, NAME)


def test_minreplicas_zero_without_routing_is_refused(cluster, zero_ns):
    spec = {"model": pvc_model("tiny-llm"), "autoscaling": {"minReplicas": 0, "maxReplicas": 1, "target": 1}}
    proc = cluster.create(llms("no-gateway", spec), zero_ns, check=False)
    assert proc.returncode != 0
    assert "minReplicas 0 needs spec.routing" in proc.stderr, proc.stderr


@pytest.mark.usefixtures("pool_crd", "project_image", "zero_models")
def test_idle_to_zero_held_requests_answered_and_back_to_zero(cluster, zero_ns, zero_operator, tmp_path):
    spec = {
        "model": pvc_model("tiny-llm"),
        "routing": {},
        "cache": {"mode": "node", "maxSizeGB": 1},
        "autoscaling": {
            "minReplicas": 0,
            "maxReplicas": 1,
            "target": 4,
            "pollingIntervalSeconds": POLL_S,
            "scaleDownStabilizationSeconds": 0,
            "idleSeconds": IDLE_S,
        },
    }
    cluster.apply(llms(NAME, spec), zero_ns)
    # the first pod loads and says what it runs before the first scale to zero (KEDA's initial cooldown)
    first = _wait(cluster, zero_ns, zero_operator, "Ready", 300)
    assert first["pipeline"]["resolved"] == "LM_CB", first["pipeline"]

    gw = Gateway(
        pool=routing.pool_name(NAME),
        namespace=zero_ns,
        kubeconfig=cluster.kubeconfig,
        workdir=tmp_path / "gw",
        hold_seconds=HOLD_S,
        targets_dir=STATE_DIR / "prometheus-targets",
    )
    gw.start()
    try:
        # idle: KEDA takes the last replica away; status says so, without calling it a failure
        idle = _wait(cluster, zero_ns, zero_operator, "ScaledToZero", ZERO_WAIT_S, gw)
        assert idle["readyDisplay"] == "0/0"
        ready = next(c for c in idle["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "ScaledToZero" and "idle" in ready["message"], ready
        cluster.wait_for(lambda: not runtime_pods(cluster, zero_ns, NAME), 60, "no runtime pod left")
        assert (status(cluster, zero_ns, NAME).get("autoscaling") or {}).get("reason") == "IdleAtZero"
        # Prometheus scrapes the picker (its gauge exists once it has a pool to report on)
        cluster.wait_for(lambda: prom_query(f'up{{namespace="{zero_ns}",job="ovserve-gateway"}}'), 60, "picker scraped")

        phases: list[str] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                phase = _phase(cluster, zero_ns)[0]
                if not phases or phases[-1] != phase:
                    phases.append(phase)
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t0 = time.monotonic()

        def first_request(i: int) -> tuple[int, bytes, float]:
            code, body = _chat(gw.url, f"hello {i}", stream=False, model=NAME, timeout=HOLD_S + 30)
            return code, body, time.monotonic() - t0

        with ThreadPoolExecutor(FIRST_REQUESTS) as pool:
            answers = list(pool.map(first_request, range(FIRST_REQUESTS)))
        stop.set()
        watcher.join(5)
        waits = sorted(a[2] for a in answers)
        print(f"\n{FIRST_REQUESTS} first requests at zero replicas answered after {waits[0]:.1f}-{waits[-1]:.1f} s")
        bad = [(code, body[:300]) for code, body, _ in answers if code != 200]
        assert not bad, f"{bad}\nphases {phases}\n{gw.logs(3000)}"
        for _, body, _ in answers:
            assert json.loads(body)["choices"][0]["message"]["content"] is not None
        assert "Activating" in phases, phases
        reasons = cluster.kubectl(
            "get", "events", "-n", zero_ns, "--field-selector", f"involvedObject.name={NAME}", "-o", "json"
        ).stdout
        seen = {e["reason"] for e in json.loads(reasons)["items"]}
        assert {"ScaledToZero", "Activating"} <= seen, seen
        back = _wait(cluster, zero_ns, zero_operator, "Ready", 60, gw)
        # what the activated pod's start reused of the node's compiled-model cache (printed: a figure, not a rule)
        print(f"first pod's start: {first.get('startup')}\nactivated pod's start: {back.get('startup')}")

        # idle again: back to zero
        _wait(cluster, zero_ns, zero_operator, "ScaledToZero", ZERO_WAIT_S, gw)
    finally:
        gw.stop()
        cluster.kubectl("delete", "llmserving", NAME, "-n", zero_ns, "--wait=false", check=False)
