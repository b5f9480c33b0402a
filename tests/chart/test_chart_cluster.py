"""The chart on the real one-node cluster: server-side validation, install, least privilege, Pod Security,
a sample LLMServing to Ready, leader hand-over, upgrade, uninstall.

The tests of this module share one release (module scope) and run in file order: install -> checks ->
failover -> upgrade -> uninstall. The operator runs as pods of the built image, in-cluster config through
the `kubernetes` Service; it watches one restricted namespace (PVC models) and one namespace that admits
pod-level hostPath volumes (the hostPath examples: Pod Security restricted refuses hostPath volumes).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest

from tests.chart.helpers import (
    CHART,
    EXAMPLES,
    can_i,
    example_docs,
    helm,
    llms_phase,
    template_args,
    values_file,
)
from tests.conftest import make_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RELEASE = "ovs-chart"
FULLNAME = f"{RELEASE}-ovserve"
OPERATOR_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
READY_TIMEOUT = 420


def sa_user(namespace: str, name: str = FULLNAME) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def operator_pods(cluster, ns: str) -> list[dict]:
    pods = cluster.get("pods", namespace=ns) or {"items": []}
    return [
        p
        for p in pods["items"]
        if p["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE
        and not p["metadata"].get("deletionTimestamp")
    ]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def lease_holder(cluster, ns: str) -> str | None:
    lease = cluster.get("lease", "ovserve-operator", ns)
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


# ------------------------------------------------------------------------- server-side validation


@pytest.mark.parametrize("scope", ["clusterwide", "namespaced"])
def test_helm_template_passes_server_side_dry_run(cluster, namespace, scope, tmp_path):
    values = {"watchNamespaces": [namespace]} if scope == "namespaced" else {}
    values |= {"metrics": {"service": {"enabled": True}}}
    rendered = helm(
        *template_args(values, tmp_path, release="dry", namespace=namespace, extra=("--include-crds",))
    ).stdout
    proc = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        input=rendered,
    )
    kinds = {
        line.split("/", 1)[0].split(".", 1)[0] for line in proc.stdout.splitlines() if line.endswith("(server dry run)")
    }
    expected = {
        "customresourcedefinition",
        "serviceaccount",
        "clusterrole",
        "role",
        "rolebinding",
        "deployment",
        "lease",
        "poddisruptionbudget",
        "service",
    }
    scoped = (
        {"clusterrolebinding"}
        if scope == "clusterwide"
        else {"validatingadmissionpolicy", "validatingadmissionpolicybinding"}  # warns outside the scope
    )
    assert kinds == expected | scoped, proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr  # PSA warn=restricted would name the operator pod here


@pytest.mark.parametrize("name", ["cpu-auto.yaml", "pinned-lm-cb.yaml", "gpu.yaml", "pvc.yaml", "huggingface.yaml"])
def test_examples_pass_server_side_dry_run(cluster, crd, namespace, name):
    proc = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(EXAMPLES / name))
    assert "llmserving.ovserve.dev/" in proc.stdout and "(server dry run)" in proc.stdout, proc.stdout


# ----------------------------------------------------------------------------------- the release


@pytest.fixture(scope="module")
def spaces(cluster):
    ns = {
        "op": make_namespace(cluster, "ovs-op"),
        "app": make_namespace(cluster, "ovs-app"),
        "dev": make_namespace(cluster, "ovs-dev", psa="privileged"),
    }
    yield ns
    helm("uninstall", RELEASE, "-n", ns["op"], "--wait", check=False)
    for kind in ("llmservings",):
        for n in (ns["app"], ns["dev"]):
            cluster.kubectl("delete", kind, "--all", "-n", n, "--wait=false", check=False)
    for n in ns.values():
        cluster.kubectl("delete", "namespace", n, "--wait=false", check=False)


@pytest.fixture(autouse=True)
def _diagnostics_on_failure(request):
    """The release's namespaces (module scope, not the `namespace` fixture): attach what a human would
    look at when a test using them failed."""
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed or "spaces" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("cluster")
    for ns in request.getfixturevalue("spaces").values():
        request.node.add_report_section("teardown", f"cluster diagnostics {ns}", cluster.diagnostics(ns))


@pytest.fixture(scope="module")
def release(cluster, project_image, spaces, tmp_path_factory):
    repo, tag = project_image.rsplit(":", 1)
    values = {
        "image": {"repository": repo, "tag": tag, "pullPolicy": "IfNotPresent"},
        "watchNamespaces": [spaces["app"], spaces["dev"]],
        # a quicker hand-over than the 15 s default, for the failover test
        "extraEnv": [
            {"name": "OVSERVE_LEASE_DURATION_SECONDS", "value": "8"},
            {"name": "OVSERVE_LEASE_RENEW_DEADLINE_SECONDS", "value": "5"},
            {"name": "OVSERVE_LEASE_RETRY_PERIOD_SECONDS", "value": "1"},
            {"name": "OVSERVE_STATUS_INTERVAL_SECONDS", "value": "2"},
        ],
        "metrics": {"service": {"enabled": True}},
        # the hostPath examples run in the dev namespace (Pod Security privileged): allowed on purpose
        "policy": {"allowHostPath": True},
    }
    vf = values_file(tmp_path_factory.mktemp("values"), values)
    t0 = time.monotonic()
    proc = helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        spaces["op"],
        "-f",
        str(vf),
        "--wait",
        "--timeout",
        "300s",
        check=False,
        timeout=360,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"helm install failed:\n{proc.stdout}\n{proc.stderr}\n{cluster.diagnostics(spaces['op'])}",
            pytrace=False,
        )
    return {"ns": spaces["op"], "values": vf, "install_s": time.monotonic() - t0, **spaces}


def test_install_runs_two_operator_pods_under_restricted_psa(cluster, release):
    ns = release["ns"]
    assert cluster.get("namespace", ns)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pods = cluster.wait_for(
        lambda: (
            [p for p in operator_pods(cluster, ns) if ready(p)]
            if len([p for p in operator_pods(cluster, ns) if ready(p)]) == 2
            else None
        ),
        120,
        "2 ready operator pods",
    )
    for p in pods:
        spec = p["spec"]
        assert spec["containers"][0]["image"].endswith("ovserve:dev")
        assert spec["automountServiceAccountToken"] is True
        assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert p["status"]["containerStatuses"][0]["restartCount"] == 0, cluster.logs(p["metadata"]["name"], ns)
    # the operator reached the API with its in-cluster config: it took the chart's Lease
    holder = cluster.wait_for(lambda: lease_holder(cluster, ns), 60, "a lease holder")
    assert holder in {p["metadata"]["name"] for p in pods}
    # Renewing must keep the Lease's metadata: Helm owns the object (labels + meta.helm.sh annotations)
    # and `helm uninstall` only deletes what it still recognises as the release's.
    meta = cluster.get("lease", "ovserve-operator", ns)["metadata"]
    assert meta.get("labels", {}).get("app.kubernetes.io/instance") == RELEASE, (
        f"the operator's Lease update dropped Helm's labels/annotations: {meta}"
    )
    assert meta.get("annotations", {}).get("meta.helm.sh/release-name") == RELEASE, meta


def test_metrics_service_answers(cluster, release):
    svc = cluster.get("service", f"{FULLNAME}-metrics", release["ns"])
    url = f"http://{svc['spec']['clusterIP']}:8080/healthz"
    body = cluster.wait_for(lambda: urllib.request.urlopen(url, timeout=3).read(), 30, url)
    assert body is not None


# what the operator needs: yes; everything else: no (real apiserver authorizer, impersonating the SA)
CAN_I = [
    # (namespace key, verb, resource, extra, expected)
    ("app", "watch", "llmservings.ovserve.dev", (), True),
    ("app", "patch", "llmservings.ovserve.dev", (), False),  # only the status: nothing writes the spec or metadata
    ("app", "patch", "llmservings.ovserve.dev", ("--subresource=status",), True),
    ("app", "update", "llmservings.ovserve.dev", ("--subresource=finalizers",), True),
    ("app", "create", "deployments.apps", (), True),
    ("app", "patch", "services", (), True),
    ("app", "delete", "services", (), False),
    ("app", "delete", "deployments.apps", (), False),
    ("app", "list", "pods", (), True),
    ("app", "create", "events", (), True),
    ("app", "list", "events", (), True),  # the kubelet's FailedMount events of pods stuck creating
    ("app", "delete", "events", (), False),
    ("dev", "create", "deployments.apps", (), True),
    ("op", "get", "leases.coordination.k8s.io/ovserve-operator", (), True),
    ("op", "update", "leases.coordination.k8s.io/ovserve-operator", (), True),
    ("op", "create", "leases.coordination.k8s.io", (), True),  # a deleted Lease is recreated
    ("app", "create", "leases.coordination.k8s.io", (), False),  # in the release namespace only
    # no
    ("app", "get", "secrets", (), False),
    ("app", "list", "secrets", (), False),
    ("app", "create", "pods", (), False),
    ("app", "delete", "pods", (), False),
    ("app", "create", "pods", ("--subresource=exec",), False),
    ("app", "get", "pods", ("--subresource=log",), False),
    ("app", "get", "configmaps", (), False),
    ("app", "create", "llmservings.ovserve.dev", (), False),
    ("app", "delete", "llmservings.ovserve.dev", (), False),
    ("app", "create", "roles.rbac.authorization.k8s.io", (), False),
    ("app", "create", "serviceaccounts", ("--subresource=token",), False),
    ("app", "create", "persistentvolumeclaims", (), False),
    ("op", "create", "deployments.apps", (), False),  # its own namespace is not watched
    ("op", "update", "leases.coordination.k8s.io/some-other-lease", (), False),
    ("op", "delete", "leases.coordination.k8s.io/ovserve-operator", (), False),
    ("default", "list", "llmservings.ovserve.dev", (), False),  # outside watchNamespaces
    (None, "delete", "nodes", (), False),
    (None, "list", "namespaces", (), False),
    (None, "create", "customresourcedefinitions.apiextensions.k8s.io", (), False),
    (None, "create", "clusterrolebindings.rbac.authorization.k8s.io", (), False),
    (None, "list", "llmservings.ovserve.dev", (), False),  # not cluster-wide in this release
]


def test_service_account_has_exactly_the_permissions_it_needs(cluster, release):
    user = sa_user(release["ns"])
    wrong = []
    for key, verb, res, extra, expected in CAN_I:
        ns = None if key is None else release.get(key, key)
        got = can_i(cluster, user, ns, verb, res, *extra)
        if got != expected:
            wrong.append(f"{verb} {res} {' '.join(extra)} in {ns or 'cluster'}: {got}, expected {expected}")
    assert not wrong, "\n".join(wrong)


def _wait_ready(cluster, name: str, ns: str) -> dict:
    cluster.wait_for(lambda: llms_phase(cluster, name, ns) == "Ready", READY_TIMEOUT, f"LLMServing {ns}/{name} Ready")
    return cluster.get("llmserving", name, ns)


def _complete(cluster, endpoint: str, model: str) -> dict:
    """POST /completions to status.endpoint. The test cluster has no DNS: the Service's DNS name in the
    endpoint is swapped for its ClusterIP (the same Service, the same port)."""
    url = urllib.parse.urlsplit(endpoint)
    service, namespace = url.hostname.split(".")[:2]
    ip = cluster.get("service", service, namespace)["spec"]["clusterIP"]
    base = urllib.parse.urlunsplit(url._replace(netloc=f"{ip}:{url.port or 80}")).rstrip("/")
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"{base}/completions", body, {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


def test_apply_into_an_unwatched_namespace_warns(cluster, release):
    """The chart's ValidatingAdmissionPolicy (Warn): an LLMServing outside watchNamespaces is admitted but
    `kubectl apply` prints that no operator will serve it; inside the scope, no warning."""
    body = {
        "apiVersion": "ovserve.dev/v1alpha1",
        "kind": "LLMServing",
        "metadata": {"name": "unwatched"},
        "spec": {"model": {"pvc": {"claimName": "models"}}, "nodeSelector": {"ovserve.dev/test-nowhere": "true"}},
    }
    try:
        # the policy is enforced a moment after helm created it: retry until the warning shows
        def warned():
            cluster.kubectl("delete", "llmserving", "unwatched", "-n", release["op"], "--ignore-not-found")
            err = cluster.apply(body, release["op"]).stderr
            return f"is not watched by the ovserve operator (release {RELEASE} " in err and err

        err = cluster.wait_for(warned, 30, "the unwatched-namespace warning", interval=2)
        assert "Warning:" in err and release["app"] in err and f"-n {release['app']}" in err, err
        err = cluster.apply(body, release["app"]).stderr
        assert f"release {RELEASE} " not in err, err  # (another release on the cluster may warn: its scope)
    finally:
        for ns in (release["op"], release["app"]):
            cluster.kubectl("delete", "llmserving", "unwatched", "-n", ns, "--ignore-not-found", check=False)


def test_pvc_sample_ready_in_restricted_namespace(cluster, release, tiny_models):
    """A model on a PVC (hostPath PV): the runtime pod is admitted under Pod Security restricted."""
    ns = release["app"]
    docs = example_docs(
        "pvc.yaml",
        tiny_models,
        **{
            "name: ovserve-models": f"name: ovserve-models-{ns}",
            "volumeName: ovserve-models": f"volumeName: ovserve-models-{ns}",
        },
    )
    try:
        cluster.apply(docs, ns)
        obj = _wait_ready(cluster, "tiny-pvc", ns)
        pods = cluster.get("pods", namespace=ns)["items"]
        runtime = [p for p in pods if p["metadata"]["labels"].get("ovserve.dev/llmserving") == "tiny-pvc"]
        assert runtime, "no runtime pod"
        for p in runtime:
            spec = p["spec"]
            assert spec.get("automountServiceAccountToken") is False
            c = next(c for c in spec["containers"] if c["name"] == "runtime")
            assert not any(
                m["mountPath"].startswith("/var/run/secrets/kubernetes.io") for m in c.get("volumeMounts", [])
            )
            assert all(port["containerPort"] >= 1024 for port in c.get("ports", []))
        assert obj["status"]["pipeline"]["resolved"] == "LM_CB"
        out = _complete(cluster, obj["status"]["endpoint"], "tiny-pvc")
        assert out["choices"], out
    finally:
        cluster.kubectl("delete", "-n", ns, "llmserving", "tiny-pvc", "--wait=true", "--timeout=120s", check=False)
        cluster.kubectl("delete", "-n", ns, "pvc", "models", "--wait=false", check=False)
        cluster.kubectl("delete", "pv", f"ovserve-models-{ns}", "--wait=false", check=False)


@pytest.mark.parametrize(
    ("example", "name", "resolved"),
    [("cpu-auto.yaml", "tiny-auto", "LM_CB"), ("pinned-lm-cb.yaml", "tiny-lm-cb", "LM_CB")],
)
def test_cpu_examples_become_ready(cluster, release, tiny_models, example, name, resolved):
    ns = release["dev"]
    cluster.apply(example_docs(example, tiny_models), ns)
    obj = _wait_ready(cluster, name, ns)
    pipeline = obj["status"]["pipeline"]
    assert pipeline["resolved"] == resolved and pipeline["fallback"] is False, pipeline
    rows = cluster.table("llmserving", name, "-n", ns)
    assert rows[0]["PHASE"] == "Ready" and rows[0]["RESOLVED"] == resolved, rows
    out = _complete(cluster, obj["status"]["endpoint"], obj["spec"]["model"]["servedName"])
    assert out["choices"][0]["text"] is not None
    if name == "tiny-lm-cb":  # keep the cluster light: one runtime pod stays (tiny-auto) for the failover
        cluster.kubectl("delete", "-n", ns, "llmserving", name, "--wait=true", "--timeout=120s")


def test_killing_the_leader_hands_over(cluster, release):
    ns, dev = release["ns"], release["dev"]
    before = lease_holder(cluster, ns)
    assert before, "no leader"
    transitions = cluster.get("lease", "ovserve-operator", ns)["spec"].get("leaseTransitions", 0)
    cluster.kubectl("delete", "pod", before, "-n", ns, "--grace-period=0", "--force")
    after = cluster.wait_for(
        lambda: (h := lease_holder(cluster, ns)) and h != before and h,
        90,
        "the lease taken over by another replica",
    )
    assert after in {p["metadata"]["name"] for p in operator_pods(cluster, ns)}
    assert cluster.get("lease", "ovserve-operator", ns)["spec"]["leaseTransitions"] > transitions
    # the new leader reconciles: a spec change reaches the runtime Deployment and the status
    assert cluster.get("llmserving", "tiny-auto", dev), "test_cpu_examples_become_ready left tiny-auto"
    cluster.kubectl("patch", "llmserving", "tiny-auto", "-n", dev, "--type=merge", "-p", '{"spec":{"replicas":0}}')

    def scaled():
        deps = cluster.get("deployments", namespace=dev)["items"]
        mine = [d for d in deps if d["metadata"].get("labels", {}).get("ovserve.dev/llmserving") == "tiny-auto"]
        return mine and all(d["spec"]["replicas"] == 0 for d in mine)

    cluster.wait_for(scaled, 90, "the runtime Deployment scaled to 0 by the new leader")
    # the first status of the new generation may still count the pod the ReplicaSet has not deleted yet
    cluster.wait_for(
        lambda: (
            (o := cluster.get("llmserving", "tiny-auto", dev))
            and o["status"].get("observedGeneration") == o["metadata"]["generation"]
            and o["status"]["replicas"] == 0
        ),
        60,
        "status observed the new generation and no pod",
    )


def test_a_deleted_lease_is_recreated_and_helm_adopts_it(cluster, release):
    """`kubectl delete lease`: the leader recreates it at its next renewal (RBAC `create` in the release
    namespace) with Helm's labels and annotations, so the next `helm upgrade` (the test below) adopts it;
    the standby never takes it meanwhile (one leader)."""
    ns = release["ns"]
    before = cluster.wait_for(lambda: lease_holder(cluster, ns), 60, "a lease holder")
    cluster.kubectl("delete", "lease", "ovserve-operator", "-n", ns)
    lease = cluster.wait_for(
        lambda: (obj := cluster.get("lease", "ovserve-operator", ns)) and obj["spec"].get("holderIdentity") and obj,
        30,
        "the Lease recreated with a holder",
    )
    assert lease["spec"]["holderIdentity"] == before, "the live leader recreates it; no hand-over"
    meta = lease["metadata"]
    assert meta["labels"].get("app.kubernetes.io/managed-by") == "Helm", meta
    assert meta["annotations"].get("meta.helm.sh/release-name") == RELEASE, meta
    assert meta["annotations"].get("meta.helm.sh/release-namespace") == ns, meta
    # it keeps being renewed, by the same leader, and both operator pods stay up
    renewed = lease["spec"]["renewTime"]
    cluster.wait_for(
        lambda: cluster.get("lease", "ovserve-operator", ns)["spec"]["renewTime"] != renewed, 30, "a renewal"
    )
    assert lease_holder(cluster, ns) == before
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in operator_pods(cluster, ns))


def test_upgrade_rolls_the_operator(cluster, release):
    ns = release["ns"]
    old = {p["metadata"]["uid"] for p in operator_pods(cluster, ns)}
    generation = cluster.get("deployment", FULLNAME, ns)["metadata"]["generation"]
    helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        ns,
        "-f",
        str(release["values"]),
        "--set-string",
        "podAnnotations.ovserve\\.dev/rollout=2",
        "--set",
        "logLevel=DEBUG",
        "--wait",
        "--timeout",
        "300s",
        timeout=360,
    )
    dep = cluster.get("deployment", FULLNAME, ns)
    assert dep["metadata"]["generation"] > generation
    assert dep["spec"]["template"]["metadata"]["annotations"]["ovserve.dev/rollout"] == "2"
    pods = cluster.wait_for(
        lambda: (
            (ps := operator_pods(cluster, ns))
            and len(ps) == 2
            and all(map(ready, ps))
            and not ({p["metadata"]["uid"] for p in ps} & old)
            and ps
        ),
        180,
        "2 new ready operator pods",
    )
    holder = cluster.wait_for(
        lambda: (h := lease_holder(cluster, ns)) in {p["metadata"]["name"] for p in pods} and h,
        60,
        "a new pod leading",
    )
    assert holder
    history = json.loads(helm("history", RELEASE, "-n", ns, "-o", "json").stdout)
    assert [h["status"] for h in history][-1] == "deployed" and len(history) == 2


def test_uninstall_leaves_only_the_crd(cluster, release):
    ns = release["ns"]
    # LLMServings are user data: Helm keeps them (and the CRD). Delete them while the operator runs,
    # so that it removes its finalizer.
    for n in (release["app"], release["dev"]):
        cluster.kubectl("delete", "llmservings", "--all", "-n", n, "--wait=true", "--timeout=120s")
    helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "120s")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    namespaced = "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,leases,poddisruptionbudgets"

    def leftovers():
        out = []
        for n in (ns, release["app"], release["dev"]):
            items = cluster.get(namespaced, namespace=n)["items"]
            out += [
                f"{i['kind']}/{i['metadata']['name']}"
                for i in items
                if i["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE
                or i["kind"] in ("Deployment", "Lease", "Role", "RoleBinding", "PodDisruptionBudget")
            ]
        for kind in ("clusterroles", "clusterrolebindings"):
            proc = cluster.kubectl("get", kind, "-l", selector, "-o", "name")
            out += proc.stdout.split()
        return out

    seen: list[list[str]] = [[]]

    def clean() -> bool:
        seen[0] = leftovers()
        return not seen[0]

    deadline = time.monotonic() + 90
    while not clean() and time.monotonic() < deadline:
        time.sleep(1)
    assert not seen[0], f"left behind after helm uninstall: {seen[0]}"
    assert helm("list", "-n", ns, "-q").stdout.strip() == ""
    crd = cluster.get("crd", "llmservings.ovserve.dev")
    assert crd is not None, "the CRD must stay (Helm never deletes crds/)"


# ------------------------------------------------------------------------------ cluster-wide scope


def test_clusterwide_rbac(cluster, project_image, tmp_path):
    """The default scope: a ClusterRoleBinding, still nothing beyond the table (replicaCount 0: RBAC only)."""
    ns = make_namespace(cluster, "ovs-cw")
    rel = "ovs-cw"
    try:
        helm("install", rel, str(CHART), "-n", ns, "--set", "replicaCount=0", "--wait", "--timeout", "120s")
        user = sa_user(ns, f"{rel}-ovserve")
        assert can_i(cluster, user, None, "watch", "llmservings.ovserve.dev")
        assert can_i(cluster, user, None, "patch", "llmservings.ovserve.dev", "--subresource=status")
        assert can_i(cluster, user, "default", "create", "deployments.apps")
        assert can_i(cluster, user, "kube-system", "list", "pods")
        assert can_i(cluster, user, ns, "update", "leases.coordination.k8s.io/ovserve-operator")
        for verb, res in [
            ("get", "secrets"),
            ("list", "namespaces"),
            ("delete", "nodes"),
            ("create", "pods/exec"),
            ("list", "customresourcedefinitions.apiextensions.k8s.io"),
            ("get", "configmaps"),
            ("create", "leases.coordination.k8s.io"),
            ("create", "clusterroles.rbac.authorization.k8s.io"),
        ]:
            res, _, sub = res.partition("/")
            extra = (f"--subresource={sub}",) if sub else ()
            assert not can_i(cluster, user, None, verb, res, *extra), f"{verb} {res} {sub}"
    finally:
        helm("uninstall", rel, "-n", ns, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
