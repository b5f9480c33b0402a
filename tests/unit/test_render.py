"""Table-driven tests of the pure renderer (spec -> Deployment + Service)."""

from __future__ import annotations

import json

import pytest
from ovserve_operator import render, resourcedefaults
from ovserve_operator import spec as api
from ovserve_operator.settings import Settings

HOST = {"hostPath": {"path": "/var/cache/ovserve/models/tiny-llm"}}
SETTINGS = Settings()


def objs(spec: dict, settings: Settings = SETTINGS, name: str = "llm"):
    typed = api.parse_spec(spec)
    svc, dep, *_budget = render.render(name, "ns", "uid-1", typed, settings)  # a budget with replicas > 1
    return svc, dep, dep["spec"]["template"]["spec"]


def container(pod_spec, name="runtime"):
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def arg(args: list[str], flag: str):
    return args[args.index(flag) + 1] if flag in args else None


def test_owner_refs_and_labels():
    svc, dep, _pod = objs({"model": HOST})
    for obj in (svc, dep):
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "ovserve.dev/v1alpha1",
                "kind": "LLMServing",
                "name": "llm",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert obj["metadata"]["namespace"] == "ns"
    want = {
        "app.kubernetes.io/name": "ovserve-runtime",
        "app.kubernetes.io/instance": "llm",
        "app.kubernetes.io/managed-by": "ovserve-operator",
        "app.kubernetes.io/component": "runtime",
        "ovserve.dev/llmserving": "llm",
    }
    assert dep["spec"]["template"]["metadata"]["labels"] == want
    assert dep["metadata"]["labels"] == want
    sel = dep["spec"]["selector"]["matchLabels"]
    assert sel.items() <= want.items() and svc["spec"]["selector"] == sel
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_runtime_container_shape():
    _, dep, pod = objs({"model": HOST})
    c = container(pod)
    assert c["command"] == ["ovserve-runtime"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["image"] == "localhost/ovserve:dev" and c["imagePullPolicy"] == "IfNotPresent"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert "nodeSelector" not in pod
    # never BestEffort: the operator's default requests, no limits (resourcedefaults.py)
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "1Gi"}}
    args = c["args"]
    assert arg(args, "--model-path") == "/models/llm"
    assert arg(args, "--served-name") == "llm"
    assert arg(args, "--pipeline-type") == "AUTO" and arg(args, "--device") == "CPU"
    assert arg(args, "--port") == "8000"
    assert dep["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    "settings,prestop,drain,grace",
    [
        (SETTINGS, 5, 30, 45),  # the defaults
        (Settings(runtime_prestop_s=15, runtime_drain_timeout_s=300), 15, 300, 325),  # long generations, slow LB
        (Settings(runtime_prestop_s=0, runtime_drain_timeout_s=0), None, 0, 10),  # no hook at all
    ],
)
def test_graceful_termination_fits_together(settings, prestop, drain, grace):
    """preStop sleep (endpoints drop the pod first), then SIGTERM: the runtime drains for at most its
    --drain-timeout-seconds; the grace period holds both plus the exit margin, so SIGKILL never cuts a drain."""
    _, dep, pod = objs({"model": HOST}, settings)
    c = container(pod)
    if prestop is None:
        assert "lifecycle" not in c
    else:
        # the native sleep action: the image has no shell to exec `sleep`
        assert c["lifecycle"] == {"preStop": {"sleep": {"seconds": prestop}}}
    assert arg(c["args"], "--drain-timeout-seconds") == str(drain)
    assert pod["terminationGracePeriodSeconds"] == grace == (prestop or 0) + drain + render.TERMINATION_MARGIN_S
    # zero-loss rollouts (CPU default): a new pod is ready before an old one goes
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    # the readiness probe is what stops new traffic in a rollout: it must be there
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_termination_settings_change_the_template_hash():
    hashes = {
        dep["spec"]["template"]["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH]
        for _, dep, _ in (objs({"model": HOST}), objs({"model": HOST}, Settings(runtime_drain_timeout_s=60)))
    }
    assert len(hashes) == 2


@pytest.mark.parametrize(
    "model,volume,mount",
    [
        (
            HOST,
            {
                "name": "model",
                "hostPath": {"path": "/var/cache/ovserve/models/tiny-llm", "type": "Directory"},
            },
            {"name": "model", "mountPath": "/models/llm", "readOnly": True},
        ),
        (
            {"pvc": {"claimName": "models", "path": "qwen/int4"}},
            {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            {"name": "model", "mountPath": "/models/llm", "readOnly": True, "subPath": "qwen/int4"},
        ),
        (
            {"pvc": {"claimName": "models"}},
            {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            {"name": "model", "mountPath": "/models/llm", "readOnly": True},
        ),
        (
            {"huggingFace": {"repo": "OpenVINO/tiny-ov"}},
            {"name": "model", "emptyDir": {"sizeLimit": "20Gi"}},  # OVSERVE_HF_DOWNLOAD_SIZE_LIMIT
            {"name": "model", "mountPath": "/models/llm", "readOnly": True},
        ),
        (
            {"huggingFace": {"repo": "OpenVINO/tiny-ov", "sizeLimit": "3Gi"}},
            {"name": "model", "emptyDir": {"sizeLimit": "3Gi"}},
            {"name": "model", "mountPath": "/models/llm", "readOnly": True},
        ),
    ],
)
def test_model_sources(model, volume, mount):
    _, _, pod = objs({"model": model})
    assert volume in pod["volumes"]
    assert mount in container(pod)["volumeMounts"]
    assert ("initContainers" in pod) == ("huggingFace" in model)


def test_huggingface_token_stays_out_of_args_and_logs():
    _, _, pod = objs(
        {
            "model": {
                "huggingFace": {
                    "repo": "org/private-ov",
                    "revision": "v2",
                    "tokenSecretRef": {"name": "hf", "key": "tok"},
                }
            }
        }
    )
    init = pod["initContainers"][0]
    assert init["name"] == "model-download"
    assert init["command"] == ["python", "-m", "ovserve_operator.hfdownload"]
    assert arg(init["args"], "--repo") == "org/private-ov" and arg(init["args"], "--revision") == "v2"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}} in init["env"]
    assert all("hf" != a and "tok" not in a for a in init["args"])
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "model", "mountPath": "/models/llm"} in init["volumeMounts"]  # writable for the download
    assert not any(e["name"] == "HF_TOKEN" for e in container(pod)["env"])  # runtime never sees the token
    assert not any(e["name"] == "HF_ENDPOINT" for e in init["env"])
    assert not any(e["name"] == "OVSERVE_HF_ALLOW_HTTP" for e in init["env"])
    _, _, pod2 = objs(
        {"model": {"huggingFace": {"repo": "org/m"}}}, Settings(hf_endpoint="http://mirror", hf_allow_http=True)
    )
    assert {"name": "HF_ENDPOINT", "value": "http://mirror"} in pod2["initContainers"][0]["env"]
    assert {"name": "OVSERVE_HF_ALLOW_HTTP", "value": "true"} in pod2["initContainers"][0]["env"]


@pytest.mark.parametrize(
    "spec,settings,limits,node_selector",
    [
        (
            {"device": "GPU"},
            Settings(),
            {"gpu.intel.com/i915": "1"},
            {"intel.feature.node.kubernetes.io/gpu": "true"},
        ),
        (
            {"device": "GPU"},
            Settings(gpu_resource="gpu.intel.com/xe", gpu_node_selector={}),
            {"gpu.intel.com/xe": "1"},
            None,
        ),
        (
            {"device": "GPU", "resources": {"limits": {"gpu.intel.com/xe": 2, "memory": "8Gi"}}},
            Settings(),
            {"gpu.intel.com/xe": "2", "memory": "8Gi"},
            {"intel.feature.node.kubernetes.io/gpu": "true"},
        ),
        (
            {"device": "GPU", "nodeSelector": {"zone": "a"}},
            Settings(gpu_node_selector={"gpu": "yes", "k": "v"}),
            {"gpu.intel.com/i915": "1"},
            {"gpu": "yes", "k": "v", "zone": "a"},
        ),
        (
            {"device": "CPU", "nodeSelector": {"zone": "a"}, "resources": {"requests": {"cpu": "500m"}}},
            Settings(),
            None,
            {"zone": "a"},
        ),
    ],
)
def test_device_resources_and_node_selection(spec, settings, limits, node_selector):
    _, _, pod = objs({"model": HOST, **spec}, settings)
    c = container(pod)
    assert (c.get("resources") or {}).get("limits") == limits
    assert pod.get("nodeSelector") == node_selector
    assert arg(c["args"], "--device") == spec["device"]


def test_scheduler_flags_and_overrides():
    _, dep, pod = objs(
        {
            "model": {**HOST, "servedName": "tiny"},
            "pipelineType": "LM_CB",
            "replicas": 3,
            "image": "registry.example/ovserve:1",
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "scheduler": {
                "cacheSizeGB": 2,
                "maxNumSeqs": 8,
                "maxNumBatchedTokens": 512,
                "enablePrefixCaching": True,
                "dynamicSplitFuse": False,
                "kvCachePrecision": "u8",
            },
            "serving": {"maxQueuedRequests": 0, "streamIntervalMs": 2.5},
        }
    )
    c = container(pod)
    args = c["args"]
    assert arg(args, "--served-name") == "tiny" and arg(args, "--pipeline-type") == "LM_CB"
    assert arg(args, "--cache-size-gb") == "2" and arg(args, "--max-num-seqs") == "8"
    assert arg(args, "--max-num-batched-tokens") == "512" and arg(args, "--kv-cache-precision") == "u8"
    assert "--enable-prefix-caching" in args and "--no-dynamic-split-fuse" in args
    assert arg(args, "--max-queued-requests") == "0" and arg(args, "--stream-interval-ms") == "2.5"
    assert c["image"] == "registry.example/ovserve:1"
    assert dep["spec"]["replicas"] == 3
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["affinity"] == {"nodeAffinity": {}}


def test_template_hash_tracks_the_template_not_replicas():
    _, a, _ = objs({"model": HOST, "replicas": 1})
    _, b, _ = objs({"model": HOST, "replicas": 4})
    _, c, _ = objs({"model": HOST, "pipelineType": "LM"})
    h = lambda d: d["spec"]["template"]["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH]  # noqa: E731
    assert h(a) == h(b) != h(c)
    assert a["metadata"]["annotations"][render.ANNOTATION_TEMPLATE_HASH] == h(a)
    assert render.template_hash(a["spec"]["template"]) == h(a)


def test_render_is_pure_and_json_serialisable():
    first = objs({"model": HOST})
    second = objs({"model": HOST})
    assert first == second
    json.dumps(first)


@pytest.mark.parametrize(
    "spec,strategy",
    [
        ({}, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        # a GPU pool sized to the replicas has no device for a surge pod: one old pod goes first
        ({"device": "GPU"}, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
        (
            {"device": "GPU", "rollout": {"maxSurge": 1}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
        ),
        (
            {"device": "GPU", "rollout": {"maxSurge": 1, "maxUnavailable": 0}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        ),
        (
            {"rollout": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        ),
        # only the default other bound was 0 as well: the rollout must still move
        (
            {"rollout": {"maxSurge": 0}},
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        ),
        ({"device": "GPU", "rollout": {"strategy": "Recreate"}}, {"type": "Recreate"}),
    ],
)
def test_rollout_strategy(spec, strategy):
    _, dep, _ = objs({"model": HOST, **spec})
    assert dep["spec"]["strategy"] == strategy


@pytest.mark.parametrize(
    "rollout,error",
    [
        ({"maxSurge": 0, "maxUnavailable": "0%"}, "must not both be 0"),
        ({"strategy": "Recreate", "maxSurge": 1}, "RollingUpdate only"),
        ({"maxSurge": "x%"}, "maxSurge"),
        ({"maxUnavailable": -1}, "maxUnavailable"),
    ],
)
def test_rollout_refused(rollout, error):
    with pytest.raises(ValueError, match=error):
        api.parse_spec({"model": HOST, "rollout": rollout})


@pytest.mark.parametrize(
    "spec,settings,requests,limits",
    [
        ({}, SETTINGS, {"cpu": "100m", "memory": "1Gi"}, None),
        # the KV cache size is known on CPU for a pipeline that may batch: added to the floor
        ({"scheduler": {"cacheSizeGB": 4}}, SETTINGS, {"cpu": "100m", "memory": "5Gi"}, None),
        ({"scheduler": {"cacheSizeGB": 4}, "pipelineType": "LM"}, SETTINGS, {"cpu": "100m", "memory": "1Gi"}, None),
        # on a GPU the cache lives in device memory
        (
            {"scheduler": {"cacheSizeGB": 4}, "device": "GPU"},
            SETTINGS,
            {"cpu": "100m", "memory": "1Gi"},
            {"gpu.intel.com/i915": "1"},
        ),
        (
            {"scheduler": {"cacheSizeGB": 2}},
            Settings(default_memory_request="512Mi"),
            {"cpu": "100m", "memory": "2560Mi"},
            None,
        ),
        # what the spec names is the spec's: a limit alone is the request too (Kubernetes' own default)
        ({"resources": {"requests": {"cpu": "2"}}}, SETTINGS, {"cpu": "2", "memory": "1Gi"}, None),
        ({"resources": {"limits": {"memory": "3Gi"}}}, SETTINGS, {"cpu": "100m"}, {"memory": "3Gi"}),
        ({"resources": {"requests": {"cpu": 1, "memory": "8Gi"}}}, SETTINGS, {"cpu": "1", "memory": "8Gi"}, None),
        ({}, Settings(default_cpu_request="", default_memory_request=""), None, None),
    ],
)
def test_default_requests(spec, settings, requests, limits):
    _, _, pod = objs({"model": HOST, **spec}, settings)
    res = container(pod).get("resources") or {}
    assert res.get("requests") == requests and res.get("limits") == limits


def test_default_requests_reported_for_status():
    typed = api.parse_spec({"model": HOST, "scheduler": {"cacheSizeGB": 4}, "resources": {"requests": {"cpu": "1"}}})
    got = resourcedefaults.defaults(typed, SETTINGS)
    assert got.status() == {"cpu": None, "memory": "5Gi", "message": got.message}
    assert "OVSERVE_DEFAULT_MEMORY_REQUEST" in got.message and "cacheSizeGB" in got.message
    full = api.parse_spec({"model": HOST, "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}})
    assert resourcedefaults.defaults(full, SETTINGS).status() is None


@pytest.mark.parametrize(
    "quantity,n",
    [("1Gi", 2**30), ("512Mi", 2**29), ("2G", 2 * 10**9), ("1.5Gi", 3 * 2**29), ("100", 100)],
)
def test_memory_quantities(quantity, n):
    assert resourcedefaults.memory_bytes(quantity) == n


@pytest.mark.parametrize("n,text", [(2**30, "1Gi"), (5 * 2**30, "5Gi"), (2**29, "512Mi"), (2**20 + 1, "2Mi")])
def test_memory_format_rounds_up(n, text):
    assert resourcedefaults.format_memory(n) == text


@pytest.mark.parametrize("served", ["-x", "--help", "a b", " x"])
def test_served_name_that_reads_as_a_flag_is_refused(served):
    with pytest.raises(ValueError, match="servedName"):
        api.parse_spec({"model": {**HOST, "servedName": served}})


NP_ON = Settings(network_policies=True, operator_namespace="ovserve-system", operator_pod_labels={"app": "op"})
SAME_NS = {"podSelector": {}}
OPERATOR = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ovserve-system"}},
    "podSelector": {"matchLabels": {"app": "op"}},
}


@pytest.mark.parametrize(
    "spec,settings,sources",
    [
        ({}, NP_ON, None),  # not asked for, no default: none
        ({}, NP_ON.replace(network_policy_default=True), [SAME_NS, OPERATOR]),
        ({"networkPolicy": {"enabled": False}}, NP_ON.replace(network_policy_default=True), None),
        ({"networkPolicy": {}}, NP_ON, [SAME_NS, OPERATOR]),
        (
            {"networkPolicy": {"allowedNamespaces": ["ingress", "monitoring", "ingress"], "allowSameNamespace": False}},
            NP_ON,
            [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "In",
                                "values": ["ingress", "monitoring"],
                            }
                        ]
                    }
                },
                OPERATOR,
            ],
        ),
        (
            {"networkPolicy": {"allowedNamespaceLabels": {"team": "a"}}},
            NP_ON.replace(operator_pod_labels={}),
            [
                SAME_NS,
                {"namespaceSelector": {"matchLabels": {"team": "a"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ovserve-system"}}},
            ],
        ),
        # nobody allowed at all: no rule, i.e. every ingress denied (an empty `from` would admit everyone)
        ({"networkPolicy": {"allowSameNamespace": False}}, NP_ON.replace(operator_namespace=""), []),
    ],
)
def test_network_policy(spec, settings, sources):
    typed = api.parse_spec({"model": HOST, **spec})
    objs = render.render("llm", "ns", "uid-1", typed, settings)
    nps = [o for o in objs if o["kind"] == "NetworkPolicy"]
    if sources is None:
        assert not nps
        return
    assert objs[0] is nps[0]  # applied before the pods exist
    np = nps[0]
    assert np["metadata"]["ownerReferences"][0]["uid"] == "uid-1" and np["metadata"]["name"] == "llm"
    assert np["spec"]["podSelector"] == {"matchLabels": render.selector_labels("llm")}
    assert np["spec"]["policyTypes"] == ["Ingress"]
    want = [{"from": sources, "ports": [{"protocol": "TCP", "port": 8000}]}] if sources else []
    assert np["spec"]["ingress"] == want


def test_chat_template_kwargs_become_the_runtimes_flag():
    """spec.serving.chatTemplateKwargs: the serving's default template variables (issue 37), as canonical JSON."""
    _svc, _dep, pod = objs({"model": HOST, "serving": {"chatTemplateKwargs": {"enable_thinking": False, "a": 1}}})
    args = container(pod)["args"]
    assert json.loads(arg(args, "--chat-template-kwargs")) == {"a": 1, "enable_thinking": False}
    _svc, _dep, pod = objs({"model": HOST})
    assert "--chat-template-kwargs" not in container(pod)["args"]  # unset: no flag, an unchanged template hash
    for bad in ({"not a name": 1}, {f"k{i}": 1 for i in range(17)}):
        with pytest.raises(ValueError):
            api.parse_spec({"model": HOST, "serving": {"chatTemplateKwargs": bad}})


@pytest.mark.parametrize(
    "autoscaling,network_policy,kinds",
    [
        (None, False, ["Service", "Deployment"]),  # one replica: no budget
        ({"maxReplicas": 3, "target": 2}, False, ["Service", "Deployment", "PodDisruptionBudget", "ScaledObject"]),
        (
            {"maxReplicas": 3, "target": 2},
            True,
            ["NetworkPolicy", "Service", "Deployment", "PodDisruptionBudget", "ScaledObject"],
        ),
    ],
)
def test_render_returns_every_child_the_scaled_object_included(autoscaling, network_policy, kinds):
    """One pure render, one list: the ScaledObject of spec.autoscaling is a child like the others (last)."""
    spec = {"model": HOST, **({"autoscaling": autoscaling} if autoscaling else {})}
    settings = Settings(
        allow_host_path=True,
        network_policies=network_policy,
        network_policy_default=network_policy,
        prometheus_url="http://p:9090",
    )
    typed = api.parse_spec(spec)
    objs = render.render("llm", "ns", "uid-1", typed, settings)
    assert [o["kind"] for o in objs] == kinds
    if autoscaling:
        so = objs[-1]
        assert so == render.render_scaled_object("llm", "ns", "uid-1", typed, "http://p:9090")
        assert so["metadata"]["ownerReferences"][0]["uid"] == "uid-1" and so["metadata"]["name"] == "llm"
        assert so["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://p:9090"


ZONES = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}]


@pytest.mark.parametrize(
    "extra,spread",
    [
        ({}, None),  # unset: kube-scheduler's default spread of a ReplicaSet's pods applies
        ({"topologySpreadConstraints": ZONES}, ZONES),  # the spec's own, as written
        ({"topologySpreadConstraints": []}, None),
    ],
)
def test_replicas_spread_as_the_spec_says(extra, spread):
    _svc, _dep, pod = objs({"model": HOST, "replicas": 3, **extra})
    assert pod.get("topologySpreadConstraints") == spread


def test_the_template_does_not_depend_on_replicas():
    """Scaling never rolls the pods: the template (and its hash) is the same at 1 and 5 replicas."""
    one, five = objs({"model": HOST, "replicas": 1})[1], objs({"model": HOST, "replicas": 5})[1]
    assert one["spec"]["template"] == five["spec"]["template"]


@pytest.mark.parametrize(
    "extra,budget",
    [
        ({"replicas": 1}, False),  # its only pod would go anyway: no budget
        ({"replicas": 2}, True),
        ({"replicas": 1, "autoscaling": {"maxReplicas": 3, "target": 2}}, True),  # may grow
        ({"replicas": 1, "autoscaling": {"maxReplicas": 1, "target": 2}}, False),
    ],
)
def test_a_budget_only_where_it_holds_anything(extra, budget):
    typed = api.parse_spec({"model": HOST, **extra})
    kinds = [o["kind"] for o in render.render("llm", "ns", "uid-1", typed, SETTINGS)]
    assert ("PodDisruptionBudget" in kinds) is budget


@pytest.mark.parametrize(
    "extra,allowed",
    [
        ({}, 1),  # CPU default rollout: maxUnavailable 0 -> one pod at a time
        ({"device": "GPU"}, 1),  # GPU default: maxUnavailable 1
        ({"rollout": {"maxSurge": 0, "maxUnavailable": "50%"}}, "50%"),  # follows the rollout's bound
        ({"rollout": {"strategy": "Recreate"}}, 1),
        ({"disruptionBudget": {"maxUnavailable": 2}}, 2),  # the spec's own
        ({"disruptionBudget": {"maxUnavailable": "100%"}}, "100%"),
    ],
)
def test_the_disruption_budget_follows_the_rollout_and_the_spec(extra, allowed):
    typed = api.parse_spec({"model": HOST, "replicas": 4, **extra})
    pdb = next(o for o in render.render("llm", "ns", "uid-1", typed, SETTINGS) if o["kind"] == "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["name"] == "llm"
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert pdb["spec"] == {
        "selector": {"matchLabels": render.selector_labels("llm")},
        "maxUnavailable": allowed,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",  # a pod not Ready never blocks a drain
    }


def test_spread_constraints_are_scheduling_pass_through():
    from ovserve_operator import policy

    typed = api.parse_spec({"model": HOST, "topologySpreadConstraints": ZONES})
    denied = policy.violations(typed, SETTINGS.model_copy(update={"allow_scheduling_passthrough": False}))
    assert any("topologySpreadConstraints" in d for d in denied)
