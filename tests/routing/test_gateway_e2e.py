"""End to end (issue 39): Envoy and GIE's real endpoint picker in front of three replicas of a tiny chat serving on
the real cluster. The operator runs the serving with `spec.routing` and creates its InferencePool (owned by the
LLMServing); the test runs the gateway of tests/routing/gateway.py in the cluster's network namespace.

- status.routing names the pool and its Ready endpoints; the pods carry the picker's engine-type label;

- a streamed chat through the gateway arrives intact (every event parses, one finish, `data: [DONE]` last);
- the picker scrapes the pods through the `openvino` engine config (its own metrics name every pod of the pool);
- requests are spread by the picker over the pods (each pod's ovserve_requests_total counts some);
- prefix affinity: requests sharing a long prompt prefix (several prefixes, interleaved) land on one pod per prefix;
- load skew: a pod kept busy with long generations (sent to it directly) gets few of the new requests;
- a legacy-pipeline serving behind its own pool exports no KV-cache families and is routed on its queue;
- a pod deleted under load leaves the pool and its replacement joins it, with no chat lost;
- a rollout (a spec change that replaces every pod) under load through the gateway loses no chat;
- the pool deleted by hand is re-created by the operator, and the gateway routes through it again;
- with spec.routing.picker the operator runs the picker in the cluster (a local image of the same EPP binary):
  it becomes Ready, scrapes the pool's pods, and its ConfigMap deleted by hand comes back.

Skipped, with the reason, where `make routing` has not built the EPP, Envoy and the CRD.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from ovserve_operator import render, routing

from tests.conftest import HACK, make_namespace, run_on_host_network
from tests.operator.conftest import OperatorProcess
from tests.operator.test_operator_e2e import llms, models_claim, pvc_model, status

from .gateway import Gateway, install_pool_crd, missing_artefacts, routing_bin_dir

pytestmark = [pytest.mark.cluster]

NAME = "routed"
REPLICAS = 3
LEGACY = "routed-legacy"
LEGACY_REPLICAS = 2
SPREAD_REQUESTS = 24  # bounded load: short non-streamed chats, 4 at a time
SPREAD_CONCURRENCY = 4
MAX_TOKENS = 16
PREFIXES = 3  # distinct long shared prefixes (a system prompt each), interleaved
PER_PREFIX = 6
PREFIX_WORDS = 70  # ~550 characters, ~350 tokens of tiny-llm (512 at most): several of the picker's prefix blocks
BUSY_STREAMS = 6  # long generations sent straight to one pod (within maxNumSeqs 8: all run)
BUSY_TOKENS = 480
BUSY_RUNNING = 3  # the busy pod counts as busy from this many running requests
BUSY_MAX_PER_STREAM = 40
LEGACY_BUSY_STREAMS = 3  # one generates, two wait (the legacy pipeline runs one request at a time)
LEGACY_QUEUED = 1
CHURN_MAX_PER_CLIENT = 2000  # bounds the churn load whatever happens
SKEW_REQUESTS = 12
WARM_UP_S = 120  # the picker reads the pool, then scrapes each pod before it routes
POOL_WAIT_S = 60  # the operator's pass (every 2 s here) reads the pool back, re-creates one deleted (5 s apart)
PICKED = "routed-picked"
PICKER_WAIT_S = 120  # the picker's pod starts, lists the pool, answers its gRPC health
ROLLOUT_WAIT_S = 240  # three tiny-llm pods replaced one at a time (surge 1), each ready in about 10 s, drains

_missing = missing_artefacts(routing_bin_dir())
if _missing:
    pytest.skip(f"`make routing` has not built {', '.join(_missing)}", allow_module_level=True)


EPP_IMAGE = "localhost/ovserve-epp:v1.5.0"


@pytest.fixture(scope="module")
def epp_image(cluster) -> str:
    """GIE's EPP (the binary `make routing` built) in a scratch image, imported into the node."""
    proc = run_on_host_network(["bash", str(HACK / "images.sh"), "epp"], timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"hack/images.sh epp failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return EPP_IMAGE


@pytest.fixture(scope="module")
def rt_ns(cluster, crd):
    ns = make_namespace(cluster, "t-routing")
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def pool_crd(cluster) -> str:
    return install_pool_crd(cluster)


@pytest.fixture(scope="module")
def rt_operator(cluster, rt_ns, tmp_path_factory):
    # tenant policy: spec.routing and its picker allowed; the picker's image is the local one (hack/images.sh epp)
    env = {"OVSERVE_ROUTING": "true", "OVSERVE_ROUTING_PICKER": "true", "OVSERVE_PICKER_IMAGE": EPP_IMAGE}
    op = OperatorProcess(rt_ns, "op-rt", f"ovserve-operator-{uuid.uuid4().hex[:6]}", tmp_path_factory.mktemp("op"), env)
    cluster.wait_for(lambda: (op.health() or {}).get("kopf") or not op.alive(), 60, "operator leader")
    assert op.alive(), op.logs()
    yield op
    op.stop()


def routed_to(cluster, ns: str, name: str, endpoints: int, rt_operator: OperatorProcess) -> dict:
    """Wait until status.routing says the operator's pool selects `endpoints` Ready pods; status.routing then."""
    last: list[dict] = [{}]

    def counted() -> bool:
        last[0] = status(cluster, ns, name).get("routing") or {}
        return last[0].get("reason") == "PoolReady" and last[0].get("endpoints") == endpoints

    try:
        cluster.wait_for(counted, POOL_WAIT_S, f"status.routing of {name} at {endpoints} endpoints")
    except pytest.fail.Exception:
        pytest.fail(f"status.routing of {name}: {last[0]!r}\noperator log tail:\n{rt_operator.logs()[-3000:]}")
    return last[0]


def start_serving(cluster, ns: str, name: str, spec: dict, replicas: int, rt_operator: OperatorProcess) -> None:
    """An LLMServing with spec.routing of `replicas` Ready pods, and the InferencePool the operator made for it."""
    cluster.apply(llms(name, {**spec, "replicas": replicas, "routing": {}}), ns)
    cluster.wait_for(lambda: status(cluster, ns, name).get("readyReplicas") == replicas, 300, f"{name} ready")
    routed_to(cluster, ns, name, replicas, rt_operator)


@contextlib.contextmanager
def open_gateway(cluster, ns: str, pool: str, workdir, request, picker_host: str | None = None) -> Iterator[Gateway]:
    gw = Gateway(pool=pool, namespace=ns, kubeconfig=cluster.kubeconfig, workdir=workdir, picker_host=picker_host)
    gw.start()
    try:
        # the picker has read the pool and scraped every pod: a request goes through. A failure says why (the
        # gateway's last answer, the EPP's and Envoy's logs): a CI run shows only the failure's text.
        deadline = time.monotonic() + WARM_UP_S
        last: object = None
        while True:
            try:
                gw.check_alive()
            except RuntimeError as exc:  # an EPP or Envoy that died fails now, with its log
                pytest.fail(str(exc), pytrace=False)
            try:
                last = _chat(gw.url, "warm up", stream=False, model=pool, timeout=30)
            except OSError as exc:  # refused or timed out: a value to report
                last = exc
            if isinstance(last, tuple) and last[0] == 200:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no chat through the gateway in {WARM_UP_S}s; last {last!r}\n{gw.logs(3000)}", pytrace=False
                )
            time.sleep(0.5)
        yield gw
    finally:
        gw.stop()
        if request.session.testsfailed:
            print(gw.logs())


@pytest.fixture(scope="module")
def models(cluster, rt_ns, tiny_models):
    with models_claim(cluster, rt_ns, tiny_models):
        yield


@pytest.fixture(scope="module")
def serving(cluster, rt_ns, rt_operator, pool_crd, project_image, models):
    """Three Ready replicas of tiny-llm (prefix caching on) and the InferencePool selecting them."""
    spec = {"model": pvc_model("tiny-llm"), "scheduler": {"maxNumSeqs": 8, "enablePrefixCaching": True}}
    start_serving(cluster, rt_ns, NAME, spec, REPLICAS, rt_operator)
    yield NAME
    cluster.kubectl("delete", "llmserving", NAME, "-n", rt_ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def gateway(cluster, rt_ns, serving, tmp_path_factory, request):
    with open_gateway(cluster, rt_ns, serving, tmp_path_factory.mktemp("gw"), request) as gw:
        yield gw


@pytest.fixture(scope="module")
def legacy_gateway(cluster, rt_ns, rt_operator, pool_crd, project_image, models, tmp_path_factory, request):
    """Two replicas of the SDPA-free tiny model (the legacy fallback pipeline) behind a pool of their own."""
    start_serving(cluster, rt_ns, LEGACY, {"model": pvc_model("tiny-llm-nosdpa")}, LEGACY_REPLICAS, rt_operator)
    with open_gateway(cluster, rt_ns, LEGACY, tmp_path_factory.mktemp("gw-legacy"), request) as gw:
        yield gw
    cluster.kubectl("delete", "llmserving", LEGACY, "-n", rt_ns, "--wait=false", check=False)


def runtime_pods(cluster, ns: str, name: str = NAME) -> list[dict]:
    selector = ",".join(f"{k}={v}" for k, v in render.selector_labels(name).items())
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if p["metadata"].get("deletionTimestamp") is None]


def scrape(pod: dict) -> str:
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8000/metrics", timeout=5) as r:
        return r.read().decode()


def requests_served(pod: dict, endpoint: str = "chat") -> float:
    """ovserve_requests_total of one pod for one endpoint (chat: what the gateway was sent), from its own address."""
    head = f'ovserve_requests_total{{endpoint="{endpoint}"'
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in scrape(pod).splitlines() if ln.startswith(head))


def gauge(pod: dict, name: str) -> float:
    return next(float(ln.rsplit(" ", 1)[1]) for ln in scrape(pod).splitlines() if ln.startswith(name + " "))


def served_by(pods: list[dict], send) -> str:
    """Which pod served one request sent by `send()` (sequential: the one whose chat counter moved)."""
    before = {p["metadata"]["name"]: requests_served(p) for p in pods}
    send()
    moved = [p["metadata"]["name"] for p in pods if requests_served(p) > before[p["metadata"]["name"]]]
    assert len(moved) == 1, moved
    return moved[0]


def _chat(
    url: str, content: str, *, stream: bool, max_tokens: int = MAX_TOKENS, model: str = NAME, timeout: float = 120
) -> tuple[int, bytes]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    req = urllib.request.Request(
        url + "/v3/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_streamed_chat_arrives_intact(gateway):
    code, raw = _chat(gateway.url, "tell me a story", stream=True, max_tokens=64)
    assert code == 200, raw[-2000:]
    events = [ln[len(b"data: ") :] for ln in raw.split(b"\n") if ln.startswith(b"data: ")]
    assert events[-1] == b"[DONE]", raw[-500:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert len(finishes) == 1, finishes
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text


def test_status_routing_names_the_operators_pool(cluster, rt_ns, serving, rt_operator):
    """The operator made the pool (owned by the LLMServing, selecting its runtime pods on port 8000), status.routing
    names it with its Ready endpoints, and the pods carry the picker's engine-type label."""
    st = routed_to(cluster, rt_ns, serving, REPLICAS, rt_operator)
    assert st["pool"] == serving and st["display"] == f"{REPLICAS} endpoints", st
    pool = cluster.get("inferencepool", serving, rt_ns)
    owner = cluster.get("llmserving", serving, rt_ns)
    refs = pool["metadata"]["ownerReferences"]
    uid = owner["metadata"]["uid"]
    assert [(r["kind"], r["uid"], r.get("controller")) for r in refs] == [("LLMServing", uid, True)]
    assert pool["spec"]["selector"]["matchLabels"] == render.selector_labels(serving)
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    for pod in runtime_pods(cluster, rt_ns):
        assert pod["metadata"]["labels"].get(routing.ENGINE_TYPE_LABEL) == routing.ENGINE_TYPE, pod["metadata"]


def test_the_picker_scrapes_every_pod_of_the_pool(cluster, rt_ns, gateway):
    pods = {p["metadata"]["name"] for p in runtime_pods(cluster, rt_ns)}
    assert len(pods) == REPLICAS

    def seen() -> set[str]:
        text = gateway.picker_metrics()
        return {name for name in pods if name in text}

    # the EPP's per-pod gauges (queue, KV usage) carry the pod name once it scraped the pod
    assert cluster.wait_for(lambda: seen() == pods, 30, "the picker's metrics naming every pod")


def test_requests_are_spread_over_the_pods(cluster, rt_ns, gateway):
    pods = runtime_pods(cluster, rt_ns)
    before = {p["metadata"]["name"]: requests_served(p) for p in pods}
    codes: Counter[int] = Counter()
    lock = threading.Lock()
    prompts = iter(range(SPREAD_REQUESTS))

    def client() -> None:
        for i in prompts:  # distinct prompts: no prefix affinity pins them to one pod
            code, _ = _chat(gateway.url, f"{uuid.uuid4().hex} question {i}", stream=False)
            with lock:
                codes[code] += 1

    threads = [threading.Thread(target=client) for _ in range(SPREAD_CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert codes == {200: SPREAD_REQUESTS}, codes
    served = {p["metadata"]["name"]: requests_served(p) - before[p["metadata"]["name"]] for p in pods}
    print(f"requests per pod through the gateway: {served}")
    assert sum(served.values()) == SPREAD_REQUESTS, served
    assert sum(1 for n in served.values() if n > 0) >= 2, served


def test_shared_prefixes_land_prefix_affine(cluster, rt_ns, gateway):
    """Each long prefix (interleaved with the others, a fresh question each time) is served by one pod: the picker's
    prefix scorer remembers where it sent the prefix's blocks (an idle pool: the other scorers tie)."""
    pods = runtime_pods(cluster, rt_ns)
    rng = random.Random(39)
    words = [f"w{rng.randrange(10_000)}" for _ in range(PREFIXES * PREFIX_WORDS)]
    prefixes = [" ".join(words[i * PREFIX_WORDS : (i + 1) * PREFIX_WORDS]) for i in range(PREFIXES)]
    where: dict[int, list[str]] = {i: [] for i in range(PREFIXES)}
    for k in range(PER_PREFIX):
        for i, prefix in enumerate(prefixes):

            def send(prefix=prefix, k=k) -> None:
                code, raw = _chat(gateway.url, f"{prefix}\nquestion {k}: {uuid.uuid4().hex[:8]}", stream=False)
                assert code == 200, raw[-500:]

            where[i].append(served_by(pods, send))
    print(f"pods per prefix: {where}")
    for i, names in where.items():
        top = Counter(names).most_common(1)[0][1]
        assert top >= PER_PREFIX - 1, (i, names)


@contextlib.contextmanager
def kept_busy(pod: dict, model: str, streams: int) -> Iterator[None]:
    """`streams` clients sending long generations straight to `pod`, back to back (completions: not counted as
    chat), until the block ends; bounded in count whatever happens."""
    url = f"http://{pod['status']['podIP']}:8000/v3/completions"
    body = json.dumps({"model": model, "prompt": "once upon a time", "max_tokens": BUSY_TOKENS, "ignore_eos": True})
    stop = threading.Event()

    def long_generations() -> None:
        for _ in range(BUSY_MAX_PER_STREAM):
            if stop.is_set():
                return
            req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()

    load = [threading.Thread(target=long_generations) for _ in range(streams)]
    for t in load:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in load:
            t.join(timeout=300)


def skewed(cluster, gw: Gateway, pods: list[dict], busy: dict, model: str, signal: str, level: int):
    """New chats through the gateway while `busy` is kept busy: (chats served per pod, the busy pod's `signal`
    gauge after each chat)."""
    cluster.wait_for(lambda: gauge(busy, signal) >= level, 30, f"the busy pod's {signal} at {level}", 0.05)
    time.sleep(0.2)  # a few of the picker's 50 ms scrapes
    before = {p["metadata"]["name"]: requests_served(p) for p in pods}
    during: list[float] = []
    for i in range(SKEW_REQUESTS):
        code, raw = _chat(gw.url, f"{uuid.uuid4().hex} short question {i}", stream=False, model=model)
        assert code == 200, raw[-500:]
        during.append(gauge(busy, signal))
    served = {p["metadata"]["name"]: requests_served(p) - before[p["metadata"]["name"]] for p in pods}
    assert sum(served.values()) == SKEW_REQUESTS, served
    assert sorted(during)[SKEW_REQUESTS // 2] >= level, during  # busy through most of the chats
    return served, during


def test_a_busy_pod_gets_few_new_requests(cluster, rt_ns, gateway):
    """One pod kept busy by long generations sent to it directly: the picker reads its queue and running gauges
    and sends the new chats elsewhere."""
    pods = runtime_pods(cluster, rt_ns)
    busy = pods[0]
    with kept_busy(busy, NAME, BUSY_STREAMS):
        served, running = skewed(cluster, gateway, pods, busy, NAME, "ovserve_requests_running", BUSY_RUNNING)
    print(f"new chats per pod while {busy['metadata']['name']} was busy: {served}; its running: {running}")
    assert served[busy["metadata"]["name"]] <= SKEW_REQUESTS // (2 * REPLICAS), served


def test_a_legacy_pool_is_routed_on_what_it_reports(cluster, rt_ns, legacy_gateway):
    """Legacy pods export no KV-cache families (no paged cache: no zero that attracts traffic), only their exact
    queue and running counts; the picker routes on those: a legacy pod with requests waiting behind its one running
    request gets few of the new chats."""
    pods = runtime_pods(cluster, rt_ns, LEGACY)
    assert len(pods) == LEGACY_REPLICAS
    for pod in pods:
        text = scrape(pod)
        assert "ovserve_kv_cache_usage_ratio" not in text and "ovserve_kv_cache_config_info" not in text
        assert 'resolved="LM"' in text and 'fallback="true"' in text  # ovserve_pipeline_info: the fallback runs
    busy = pods[0]
    with kept_busy(busy, LEGACY, LEGACY_BUSY_STREAMS):
        served, queued = skewed(cluster, legacy_gateway, pods, busy, LEGACY, "ovserve_queue_depth", LEGACY_QUEUED)
    print(f"legacy: new chats per pod while {busy['metadata']['name']} was busy: {served}; its queue: {queued}")
    assert served[busy["metadata"]["name"]] <= SKEW_REQUESTS // (2 * LEGACY_REPLICAS), served


@contextlib.contextmanager
def steady_chats(url: str, what: str) -> Iterator[tuple[Counter[int], list[bytes]]]:
    """SPREAD_CONCURRENCY clients streaming chats through the gateway, back to back, until the block ends (at most
    CHURN_MAX_PER_CLIENT each): the answers' codes, and the tails of those not 200 or not ending in [DONE]."""
    codes: Counter[int] = Counter()
    failures: list[bytes] = []
    stop = threading.Event()
    lock = threading.Lock()

    def client(c: int) -> None:
        for i in range(CHURN_MAX_PER_CLIENT):
            if stop.is_set():
                return
            code, raw = _chat(url, f"{uuid.uuid4().hex} {what} {c}.{i}", stream=True)
            with lock:
                codes[code] += 1
                if code != 200 or not raw.rstrip().endswith(b"data: [DONE]"):
                    failures.append(raw[-300:])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(SPREAD_CONCURRENCY)]
    for t in threads:
        t.start()
    try:
        yield codes, failures
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)


def test_a_pod_leaving_and_joining_the_pool_loses_nothing(cluster, rt_ns, gateway):
    """Under steady chats through the gateway, one pod is deleted: it turns unready (preStop, drain) and leaves the
    pool, its replacement joins once Ready and gets chats; every chat answers 200 (no retry anywhere)."""
    pods = runtime_pods(cluster, rt_ns)
    victim = pods[0]["metadata"]["name"]
    with steady_chats(gateway.url, "churn") as (codes, failures):
        cluster.kubectl("delete", "pod", victim, "-n", rt_ns, "--wait=false")

        def replaced() -> list[dict]:
            now = runtime_pods(cluster, rt_ns)
            ready = [p for p in now if all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])]
            names = {p["metadata"]["name"] for p in ready}
            return ready if len(ready) == REPLICAS and victim not in names else []

        fresh = cluster.wait_for(replaced, 180, "a Ready replacement")
        newcomer = next(p for p in fresh if p["metadata"]["name"] not in {q["metadata"]["name"] for q in pods})
        cluster.wait_for(lambda: requests_served(newcomer) > 0, 60, "the replacement to get chats")
    print(f"chats during the churn: {dict(codes)}")
    assert not failures and set(codes) == {200}, (codes, failures[:3])


def test_a_rollout_through_the_gateway_loses_nothing(cluster, rt_ns, gateway, rt_operator):
    """A spec change that replaces every pod (one at a time, surge 1) under steady chats through the gateway: each
    old pod drains out of the pool as its replacement joins; every chat answers 200 and ends in [DONE], and the
    pool ends with every new pod."""
    old_pods = {p["metadata"]["name"] for p in runtime_pods(cluster, rt_ns)}
    generation = cluster.get("llmserving", NAME, rt_ns)["metadata"]["generation"]
    last: list[object] = [None]

    def rolled() -> bool:
        st = status(cluster, rt_ns, NAME)
        names = {p["metadata"]["name"] for p in runtime_pods(cluster, rt_ns)}
        last[0] = (st.get("observedGeneration"), st.get("readyReplicas"), st.get("previous"), sorted(names))
        return (
            (st.get("observedGeneration") or 0) > generation
            and st.get("readyReplicas") == REPLICAS
            and not st.get("previous")
            and len(names) == REPLICAS
            and not names & old_pods
        )

    started = time.monotonic()
    with steady_chats(gateway.url, "rollout") as (codes, failures):
        patch = {"spec": {"scheduler": {"maxNumSeqs": 9}}}  # a runtime flag: a new pod template
        cluster.kubectl("patch", "llmserving", NAME, "-n", rt_ns, "--type", "merge", "-p", json.dumps(patch))
        try:
            cluster.wait_for(rolled, ROLLOUT_WAIT_S, "the rollout")
        except pytest.fail.Exception:
            pytest.fail(f"rollout not done in {ROLLOUT_WAIT_S}s: {last[0]!r}\n{rt_operator.logs()[-3000:]}")
        routed_to(cluster, rt_ns, NAME, REPLICAS, rt_operator)
    print(f"chats during the rollout ({time.monotonic() - started:.0f} s): {dict(codes)}")
    assert not failures and set(codes) == {200}, (codes, failures[:3])
    assert sum(codes.values()) >= SPREAD_CONCURRENCY, codes


def test_a_pool_deleted_by_hand_comes_back(cluster, rt_ns, gateway, rt_operator):
    """The operator re-creates its InferencePool (a new object, owned again), status.routing counts its endpoints
    again, and the gateway's picker, which watches the pool, routes through it."""
    before = cluster.get("inferencepool", NAME, rt_ns)["metadata"]["uid"]
    started = time.monotonic()
    cluster.kubectl("delete", "inferencepool", NAME, "-n", rt_ns)

    def recreated() -> str | None:
        pool = cluster.get("inferencepool", NAME, rt_ns)
        return pool["metadata"]["uid"] if pool and pool["metadata"]["uid"] != before else None

    try:
        cluster.wait_for(recreated, POOL_WAIT_S, "the InferencePool re-created")
    except pytest.fail.Exception:
        st = status(cluster, rt_ns, NAME).get("routing")
        pytest.fail(f"no pool back in {POOL_WAIT_S}s; status.routing {st!r}\n{rt_operator.logs()[-3000:]}")
    print(f"the pool came back in {time.monotonic() - started:.1f} s")
    routed_to(cluster, rt_ns, NAME, REPLICAS, rt_operator)
    last: list[object] = [None]

    def through() -> bool:
        last[0] = _chat(gateway.url, "after the pool came back", stream=False, timeout=30)
        return last[0][0] == 200

    try:
        cluster.wait_for(through, POOL_WAIT_S, "a chat through the gateway after the pool came back")
    except pytest.fail.Exception:
        pytest.fail(f"no chat through the re-created pool: {last[0]!r}\n{gateway.logs(3000)}")


def picker_metrics(cluster, ns: str, name: str) -> str:
    """The picker's own metrics, through its Service (ClusterIP, port 9090; no TokenReview auth)."""
    ip = cluster.get("service", routing.picker_name(name), ns)["spec"]["clusterIP"]
    with urllib.request.urlopen(f"http://{ip}:{routing.PICKER_METRICS_PORT}/metrics", timeout=5) as r:
        return r.read().decode()


def test_the_operators_picker_runs_in_the_cluster(
    cluster, rt_ns, rt_operator, pool_crd, project_image, models, epp_image, tmp_path_factory, request
):
    """spec.routing.picker: the operator creates the picker's ServiceAccount, Role, RoleBinding, ConfigMap,
    Deployment and Service; the picker (GIE's EPP in the local image) becomes Ready with only its Role's rights,
    reads the pool and scrapes its pod through the `openvino` engine config; status.routing says pickerReady; Envoy
    asking it through its Service routes a streamed chat (Envoy forwards only to the pod the picker names); its
    ConfigMap deleted by hand comes back."""
    spec = {"model": pvc_model("tiny-llm"), "replicas": 1, "routing": {"picker": {}}}
    cluster.apply(llms(PICKED, spec), rt_ns)
    try:
        last: list[dict] = [{}]

        def picker_ready() -> bool:
            last[0] = status(cluster, rt_ns, PICKED).get("routing") or {}
            return last[0].get("pickerReady") is True and last[0].get("endpoints") == 1

        started = time.monotonic()
        try:
            cluster.wait_for(picker_ready, PICKER_WAIT_S, "the operator's picker Ready")
        except pytest.fail.Exception:
            logs = cluster.kubectl("logs", f"deploy/{routing.picker_name(PICKED)}", "-n", rt_ns, check=False)
            pytest.fail(
                f"status.routing {last[0]!r}\npicker log: {(logs.stdout + logs.stderr)[-3000:]}\n"
                f"operator: {rt_operator.logs()[-2000:]}"
            )
        print(f"the picker Ready in {time.monotonic() - started:.0f} s: {last[0]}")
        assert last[0]["reason"] == "PoolReady" and last[0]["picker"] == routing.picker_name(PICKED), last[0]
        pod = runtime_pods(cluster, rt_ns, PICKED)[0]["metadata"]["name"]
        cluster.wait_for(
            lambda: pod in picker_metrics(cluster, rt_ns, PICKED), 30, "the picker's metrics naming the pod"
        )
        dep = cluster.get("deployment", routing.picker_name(PICKED), rt_ns)
        assert dep["spec"]["template"]["spec"]["serviceAccountName"] == routing.picker_name(PICKED)
        assert "ovserve.dev/llmserving" not in dep["metadata"]["labels"]  # never cached as the runtime's
        picker_ip = cluster.get("service", routing.picker_name(PICKED), rt_ns)["spec"]["clusterIP"]
        workdir = tmp_path_factory.mktemp("gw-picked")
        with open_gateway(cluster, rt_ns, PICKED, workdir, request, picker_host=picker_ip) as gw:
            code, raw = _chat(gw.url, "tell me a story", stream=True, max_tokens=32, model=PICKED)
        assert code == 200 and raw.rstrip().endswith(b"data: [DONE]"), raw[-500:]

        config = routing.picker_name(PICKED)
        before = cluster.get("configmap", config, rt_ns)["metadata"]["uid"]
        cluster.kubectl("delete", "configmap", config, "-n", rt_ns)

        def back() -> bool:
            cm = cluster.get("configmap", config, rt_ns)
            return bool(cm) and cm["metadata"]["uid"] != before

        cluster.wait_for(back, POOL_WAIT_S, "the picker's ConfigMap re-created")

        # turned off: the picker's objects go (status said the operator ran one), then the pool with routing
        def patched(routing_spec: dict) -> None:
            body = json.dumps({"spec": {"routing": routing_spec}})
            cluster.kubectl("patch", "llmserving", PICKED, "-n", rt_ns, "--type", "merge", "-p", body)

        def gone(*kinds: str) -> list[str]:
            left = [k for k in kinds if cluster.get(k, routing.picker_name(PICKED), rt_ns) is not None]
            return [] if left else ["gone"]

        patched({"picker": {"enabled": False}})
        picker_kinds = ("deployment", "service", "configmap", "serviceaccount", "role", "rolebinding")
        cluster.wait_for(lambda: gone(*picker_kinds), POOL_WAIT_S, "the picker's objects deleted")
        cluster.wait_for(
            lambda: "picker" not in (status(cluster, rt_ns, PICKED).get("routing") or {"picker": 1}),
            POOL_WAIT_S,
            "status.routing without the picker",
        )
        assert cluster.get("inferencepool", PICKED, rt_ns) is not None
        patched({"enabled": False})
        cluster.wait_for(lambda: cluster.get("inferencepool", PICKED, rt_ns) is None, POOL_WAIT_S, "the pool deleted")
        cluster.wait_for(lambda: "routing" not in status(cluster, rt_ns, PICKED), POOL_WAIT_S, "no status.routing")
    finally:
        cluster.kubectl("delete", "llmserving", PICKED, "-n", rt_ns, "--wait=false", check=False)
