"""drift.py: what counts as a child that drifted from its rendered form, and the value that heals it."""

from __future__ import annotations

import copy

import pytest
from ovserve_operator import drift, render
from ovserve_operator import spec as api
from ovserve_operator.settings import Settings

SPEC = api.parse_spec({"model": {"pvc": {"claimName": "models", "path": "m"}}, "replicas": 2})


def deployment() -> dict:
    return render.render_deployment("m", "ns", "uid-1", SPEC, Settings())


def live_of(obj: dict) -> dict:
    """What the apiserver serves back: defaults added to maps and list items, status and metadata added."""
    live = copy.deepcopy(obj)
    live["metadata"].update(uid="x", resourceVersion="7", annotations={"deployment.kubernetes.io/revision": "1"})
    live["spec"]["progressDeadlineSeconds"] = 600
    pod = live["spec"]["template"]["spec"]
    pod["dnsPolicy"] = "ClusterFirst"
    c = pod["containers"][0]
    c["terminationMessagePath"] = c.get("terminationMessagePath", "/dev/termination-log")
    c["env"][1]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    c["readinessProbe"]["successThreshold"] = 1
    live["status"] = {"replicas": 2}
    return live


def container(live: dict) -> dict:
    return live["spec"]["template"]["spec"]["containers"][0]


def _set_env(live):
    container(live)["env"].append({"name": "INJECTED", "value": "1"})


def _change_image(live):
    container(live)["image"] = "other:1"


def _restart_annotation(live):
    live["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"


def _drop_env(live):
    container(live)["env"].pop()


def _cpu_normalized(live):
    container(live)["resources"] = {"requests": {"cpu": "1"}}


def _cpu_changed(live):
    container(live)["resources"] = {"requests": {"cpu": "2"}}


def _replicas(live):
    live["spec"]["replicas"] = 5


def _selector_label(live):
    live["spec"]["selector"]["matchLabels"]["extra"] = "x"


def _label_removed(live):
    del live["metadata"]["labels"]["ovserve.dev/llmserving"]


@pytest.mark.parametrize(
    "edit, want",
    [
        (lambda live: None, []),  # only apiserver defaults: no drift
        (_restart_annotation, []),  # kubectl rollout restart: a map key nobody renders
        (_set_env, ["spec.template.spec.containers.0.env"]),  # kubectl set env
        (_drop_env, ["spec.template.spec.containers.0.env"]),
        (_change_image, ["spec.template.spec.containers.0.image"]),  # kubectl set image
        (_cpu_changed, ["spec.template.spec.containers.0.resources.requests.cpu"]),
        (_cpu_normalized, []),  # 1000m written back as 1
        (_replicas, ["spec.replicas"]),
        (_selector_label, ["spec.selector.matchLabels.extra"]),
        (_label_removed, ["metadata.labels.ovserve.dev/llmserving"]),
    ],
)
def test_deployment_drift_and_its_healing(edit, want):
    desired = deployment()
    if edit in (_cpu_normalized, _cpu_changed):
        container(desired)["resources"] = {"requests": {"cpu": "1000m"}}
    live = live_of(desired)
    edit(live)
    assert drift.differences(desired, live) == want
    healed = {**live, "spec": drift.healed(desired, live)}
    # the healed spec holds what is rendered and keeps the defaults and foreign map keys
    assert [p for p in drift.differences(desired, healed) if p.startswith("spec")] == []
    assert healed["spec"]["progressDeadlineSeconds"] == 600
    if edit is not _drop_env:  # a live list item keeps its defaults
        assert container(healed)["env"][1]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    if edit is _restart_annotation:
        assert "kubectl.kubernetes.io/restartedAt" in healed["spec"]["template"]["metadata"]["annotations"]


def test_a_missing_child_is_drift():
    assert drift.differences(deployment(), None) == ["<missing>"]


def test_service_selector_is_exact():
    svc = render.render_service("m", "ns", "uid-1")
    live = copy.deepcopy(svc)
    live["spec"].update(clusterIP="10.0.0.1", sessionAffinity="None")
    live["spec"]["ports"][0]["nodePort"] = None
    assert drift.differences(svc, live) == []
    live["spec"]["selector"]["extra"] = "x"
    live["spec"]["ports"].append({"name": "debug", "port": 9000})
    assert sorted(drift.differences(svc, live)) == ["spec.ports", "spec.selector.extra"]
    healed = drift.healed(svc, live)
    assert healed["selector"] == svc["spec"]["selector"] and len(healed["ports"]) == 1
    assert healed["clusterIP"] == "10.0.0.1"


def test_pods_of_a_hand_edited_template_do_not_match():
    template = deployment()["spec"]["template"]
    pod_containers = copy.deepcopy(template["spec"]["containers"])
    assert drift.pod_matches(template, pod_containers)
    pod_containers[0]["env"].append({"name": "INJECTED", "value": "1"})
    assert not drift.pod_matches(template, pod_containers)
    assert not drift.pod_matches(template, [])
