"""spec.routing wired into the operator (issue 39), pure parts, table-driven: what render adds (the InferencePool,
the pods' engine-type label), what status.routing says (routing.pool_status), what decide does with what the
pool's read found (written alone when missing or edited, a refusal retried slowly, the CRD absent named, never a
silent skip), and the tenant policy."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest
from ovserve_operator import intake, policy, reasons, render, routing, routing_io
from ovserve_operator import spec as api
from ovserve_operator.decide import Apply, Now, begin, decide, render_children
from ovserve_operator.memory import Memory
from ovserve_operator.observe import Observed, parse
from ovserve_operator.readback import ReadbackMemory
from ovserve_operator.rules import ApplyError
from ovserve_operator.settings import Settings

from .podfixtures import pod

NS, NAME, UID, GEN = "ns", "llm", "uid-llm", 3
NOW = Now(dt.datetime(2026, 12, 7, 8, 0, 0, tzinfo=dt.UTC), 1000.0)
SETTINGS = Settings(allow_host_path=True, routing=True, default_cpu_request="", default_memory_request="")
PLAIN = {"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 2}
ROUTED = {**PLAIN, "routing": {}}
APPLIED = {"applied_generation": GEN, "attempted_generation": GEN, "applied_at": NOW.tick - 100}
SEEN = {**APPLIED, "children_seen": {"Deployment", "Service", "PodDisruptionBudget"}}


def rendered(spec: dict[str, Any], settings: Settings = SETTINGS) -> list[dict[str, Any]]:
    return render.render(NAME, NS, UID, api.parse_spec(spec), settings)


def pool_of(spec: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in rendered(spec) if o["kind"] == routing.POOL_KIND), None)


def template_labels(spec: dict[str, Any]) -> dict[str, str]:
    dep = next(o for o in rendered(spec) if o["kind"] == "Deployment")
    return dep["spec"]["template"]["metadata"]["labels"]


# ------------------------------------------------------------------------------------------------- render


@pytest.mark.parametrize(
    "spec,pool,label",
    [
        (PLAIN, False, False),
        (ROUTED, True, True),
        ({**PLAIN, "routing": {"enabled": False}}, False, False),
        ({**PLAIN, "routing": {"failureMode": "FailClose"}}, True, True),
    ],
    ids=["no spec.routing", "routing: {}", "enabled false", "FailClose"],
)
def test_render_adds_the_pool_and_the_pod_label_only_with_routing_on(spec, pool, label):
    assert (pool_of(spec) is not None) is pool
    assert (template_labels(spec).get(routing.ENGINE_TYPE_LABEL) == routing.ENGINE_TYPE) is label
    assert (routing.ENGINE_TYPE_LABEL in template_labels(spec)) is label


def test_the_pool_selects_the_runtime_pods_and_is_owned_by_the_serving():
    pool = pool_of({**PLAIN, "routing": {"failureMode": "FailClose"}})
    assert pool is not None
    assert pool["metadata"]["name"] == NAME and pool["metadata"]["namespace"] == NS
    assert pool["metadata"]["ownerReferences"] == [render.owner_reference(NAME, UID)]
    assert pool["spec"]["selector"] == {"matchLabels": render.selector_labels(NAME)}
    assert pool["spec"]["targetPorts"] == [{"number": render.PORT}]
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
    assert pool["spec"]["endpointPickerRef"]["name"] == routing.picker_name(NAME)


def test_the_pool_has_its_own_write_and_toggling_routing_rolls_the_pods():
    desired = render_children(NAME, NS, UID, api.parse_spec(ROUTED), SETTINGS)
    assert desired.inference_pool is not None
    assert routing.POOL_KIND not in {o["kind"] for o in desired.applied}
    plain = render_children(NAME, NS, UID, api.parse_spec(PLAIN), SETTINGS)
    assert plain.inference_pool is None
    # the label is in the template hash: only servings that turn routing on roll
    assert plain.template_hash != desired.template_hash
    # the setting alone changes no pod: a serving without spec.routing keeps its template
    off = SETTINGS.model_copy(update={"routing": False})
    assert plain.template_hash == render_children(NAME, NS, UID, api.parse_spec(PLAIN), off).template_hash


# ------------------------------------------------------------------------------------------- status.routing


def labelled(name: str, labels: dict[str, str], **kw: Any) -> dict[str, Any]:
    p = pod(name, **kw)
    p["metadata"]["labels"] = labels
    return p


OURS = render.labels(NAME)
LIVE_POOL = {"spec": {"selector": {"matchLabels": render.selector_labels(NAME)}}}
PODS = [
    labelled("a", OURS),
    labelled("b", OURS),
    labelled("c", OURS, ready=False),
    labelled("d", OURS, deleting=True),
    labelled("e", render.labels("other")),
]


@pytest.mark.parametrize(
    "installed,pool,problem,pods,want",
    [
        (False, None, None, PODS, {"reason": reasons.ROUTING_UNAVAILABLE, "endpoints": 0, "pool": None}),
        (True, None, "HTTP 403: forbidden", PODS, {"reason": reasons.POOL_REFUSED, "pool": None}),
        (True, LIVE_POOL, "NameConflict: not ours", PODS, {"reason": reasons.POOL_REFUSED, "pool": None}),
        (True, None, None, PODS, {"reason": reasons.POOL_PENDING, "pool": None, "display": "PoolPending"}),
        (True, LIVE_POOL, None, PODS, {"reason": reasons.POOL_READY, "pool": NAME, "endpoints": 2}),
        (True, LIVE_POOL, None, PODS[:1], {"endpoints": 1, "display": "1 endpoint"}),
        (True, LIVE_POOL, None, [], {"endpoints": 0, "display": "0 endpoints"}),
        (True, {"spec": {"selector": {"matchLabels": {"x": "y"}}}}, None, PODS, {"endpoints": 0}),
    ],
    ids=[
        "CRD absent",
        "refused",
        "not ours",
        "not created yet",
        "ready and not terminating pods of the selector",
        "one",
        "none",
        "a selector edited by hand",
    ],
)
def test_pool_status(installed, pool, problem, pods, want):
    st = routing.pool_status(NAME, installed=installed, pool=pool, pods=pods, problem=problem)
    api.RoutingStatus.model_validate(st)  # the CRD's schema
    for key, value in want.items():
        assert st.get(key) == value, (key, st)
    if not installed:
        assert "InferencePool CRD not installed" in st["message"]


# ------------------------------------------------------------------------------------------------- decide


def observed(spec: dict[str, Any] = ROUTED, *, settings: Settings = SETTINGS, **fields: Any) -> Observed:
    meta = {"name": NAME, "namespace": NS, "uid": UID, "generation": GEN, "resourceVersion": "7"}
    snap = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": meta, "spec": spec, "status": {}}
    live = {}
    for obj in render.render(NAME, NS, UID, api.parse_spec(spec), settings):
        if obj["kind"] in ("Deployment", "Service", "PodDisruptionBudget") and not routing.is_picker_object(obj):
            live[obj["kind"]] = intake.child_snapshot(copy.deepcopy(obj))
    fields.setdefault("live", live)
    return Observed(snap, settings, parse(snap), {}, **fields)


def memory(**fields: Any) -> Memory:
    return Memory(readback=ReadbackMemory(30.0), uid=UID, **{**SEEN, **fields})


def live_pool(**spec_edits: Any) -> dict[str, Any]:
    pool = copy.deepcopy(pool_of(ROUTED))
    assert pool is not None
    pool["spec"].update(spec_edits)
    pool["metadata"]["uid"] = "pool-uid"
    return pool


CASES: dict[str, tuple[Observed, Memory, dict[str, Any]]] = {
    "the CRD not served: RoutingUnavailable, nothing written, the serving runs": (
        observed(pool=routing_io.Seen(installed=False), pods=[labelled("a", OURS)]),
        memory(),
        {"routing.reason": reasons.ROUTING_UNAVAILABLE, "write_pool": False, "apply": Apply.NONE},
    ),
    "the pool missing (deleted by hand): written alone": (
        observed(pool=routing_io.Seen(installed=True)),
        memory(),
        {"routing.reason": reasons.POOL_PENDING, "write_pool": True, "memory.pool_written_at": NOW.tick},
    ),
    "the pool written 2 s ago and not read back yet: not again": (
        observed(pool=routing_io.Seen(installed=True)),
        memory(pool_written_at=NOW.tick - 2),
        {"write_pool": False},
    ),
    "refused 30 s ago: shown, not retried yet": (
        observed(pool=routing_io.Seen(installed=True)),
        memory(pool_error="the operator may not manage InferencePools", pool_refused_at=NOW.tick - 30),
        {"routing.reason": reasons.POOL_REFUSED, "write_pool": False},
    ),
    "refused 61 s ago: retried": (
        observed(pool=routing_io.Seen(installed=True)),
        memory(pool_error="HTTP 403", pool_refused_at=NOW.tick - 61),
        {"write_pool": True},
    ),
    "a pool of that name not ours: never written, named": (
        observed(pool=routing_io.Seen(installed=True, problem="NameConflict: not ours")),
        memory(),
        {"routing.reason": reasons.POOL_REFUSED, "routing.message": "NameConflict: not ours", "write_pool": False},
    ),
    "the pool as rendered: its Ready endpoints counted, nothing written": (
        observed(pool=routing_io.Seen(installed=True, pool=live_pool()), pods=PODS),
        memory(),
        {"routing.reason": reasons.POOL_READY, "routing.endpoints": 2, "routing.pool": NAME, "write_pool": False},
    ),
    "the pool edited by hand: reverted, the revert recorded": (
        observed(pool=routing_io.Seen(installed=True, pool=live_pool(targetPorts=[{"number": 9}]))),
        memory(),
        {"write_pool": True, "memory.pool_reverted_at": NOW.tick},
    ),
    "edited again 10 s after a revert: not a tight fight": (
        observed(pool=routing_io.Seen(installed=True, pool=live_pool(targetPorts=[{"number": 9}]))),
        memory(pool_reverted_at=NOW.tick - 10),
        {"write_pool": False},
    ),
    "the pool could not be read: the last status.routing stands": (
        observed(pool=None),
        memory(last_status={"routing": {"reason": reasons.POOL_READY, "endpoints": 3}}),
        {"routing.endpoints": 3},
    ),
    "routing off: no status.routing": (
        observed(PLAIN, pool=None),
        memory(last_status={"routing": {"reason": reasons.POOL_READY}}),
        {"routing": None, "write_pool": False},
    ),
    "a generation not applied yet: its apply writes the pool, not the pass": (
        observed(pool=routing_io.Seen(installed=True)),
        memory(applied_generation=GEN - 1, attempted_generation=GEN - 1),
        {"apply": Apply.GENERATION, "write_pool": False},
    ),
    "routing denied by the tenant policy: PolicyDenied, in status.routing and Ready": (
        observed(settings=Settings(allow_host_path=True), pool=routing_io.Seen(installed=True)),
        memory(),
        {"routing.reason": reasons.POLICY_DENIED, "write_pool": False, "ready": ("False", reasons.POLICY_DENIED)},
    ),
}


def _get(plan: Any, path: str) -> Any:
    if path == "ready":
        c = next(c for c in plan.status["conditions"] if c["type"] == "Ready")
        return c["status"], c["reason"]
    if path.startswith("routing"):
        obj: Any = plan.status
    else:
        obj = plan
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


@pytest.mark.parametrize("obs,mem,want", list(CASES.values()), ids=list(CASES))
def test_decide_routing(obs, mem, want):
    if "ready" in want:  # a denied spec: what the apply refused is remembered (act's), the status names it
        mem.apply_error = ApplyError(GEN, 0, "spec", "spec.routing is denied", reasons.POLICY_DENIED)
    plan = decide(obs, mem, NOW)
    for path, value in want.items():
        got = _get(plan, path)
        assert got == value, (path, got, plan.status.get("routing"))


def test_the_crd_absent_never_blocks_the_serving():
    """RoutingUnavailable is status.routing's, never the Ready condition's: the pods serve behind the Service."""
    ready_pods = [labelled("a", OURS), labelled("b", OURS)]
    plan = decide(observed(pool=routing_io.Seen(installed=False), pods=ready_pods), memory(), NOW)
    ready = next(c for c in plan.status["conditions"] if c["type"] == "Ready")
    assert plan.status["routing"]["reason"] == reasons.ROUTING_UNAVAILABLE
    assert ready["reason"] != reasons.ROUTING_UNAVAILABLE


@pytest.mark.parametrize(
    "spec,settings,denied",
    [
        (ROUTED, Settings(), True),
        (ROUTED, Settings(routing=True), False),
        ({**PLAIN, "routing": {"enabled": False}}, Settings(), False),
        (PLAIN, Settings(), False),
    ],
    ids=["on, not allowed", "on, allowed", "enabled false", "none"],
)
def test_policy_governs_who_may_enable_routing(spec, settings, denied):
    found = [v for v in policy.violations(api.parse_spec(spec), settings) if v.startswith("spec.routing")]
    assert bool(found) is denied
    if denied:
        assert "OVSERVE_ROUTING" in found[0] and "routing.enabled" in found[0]


# ------------------------------------------------------------------------------------------- the picker

PICKED = {**PLAIN, "routing": {"picker": {}}}
PICKER_SETTINGS = Settings(
    allow_host_path=True, routing=True, routing_picker=True, default_cpu_request="", default_memory_request=""
)


def picker_objects(spec: dict[str, Any], settings: Settings = PICKER_SETTINGS) -> list[dict[str, Any]]:
    return render_children(NAME, NS, UID, api.parse_spec(spec), settings).picker_objects


@pytest.mark.parametrize(
    "spec,kinds",
    [
        (ROUTED, []),
        (PICKED, ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"]),
        ({**PLAIN, "routing": {"picker": {"enabled": False}}}, []),
        ({**PLAIN, "routing": {"enabled": False, "picker": {}}}, []),
    ],
    ids=["no picker", "picker: {}", "picker enabled false", "routing enabled false"],
)
def test_render_adds_the_picker_only_when_asked(spec, kinds):
    assert [o["kind"] for o in picker_objects(spec)] == kinds


def test_the_pickers_objects_are_never_taken_for_the_runtimes():
    """The reflectors cache children by the owner label: the picker's Deployment and Service do not carry it, and
    the serving's own Deployment and Service stay the ones decide compares and heals."""
    desired = render_children(NAME, NS, UID, api.parse_spec(PICKED), PICKER_SETTINGS)
    for obj in desired.picker_objects:
        assert render.LABEL_OWNER not in obj["metadata"]["labels"], obj["kind"]
        assert obj["metadata"]["name"] == routing.picker_name(NAME)
        assert obj["metadata"]["ownerReferences"] == [render.owner_reference(NAME, UID)]
    dep = next(o for o in desired.picker_objects if o["kind"] == "Deployment")
    assert render.LABEL_OWNER not in dep["spec"]["template"]["metadata"]["labels"]
    assert not intake.child_change("Deployment", "ADDED", {**dep, "metadata": {**dep["metadata"], "uid": "u"}}).key
    assert desired.of("Deployment")["metadata"]["name"] == NAME and desired.of("Service")["metadata"]["name"] == NAME
    assert not any(routing.is_picker_object(o) for o in desired.applied)
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == PICKER_SETTINGS.picker_image
    own = {**PLAIN, "routing": {"picker": {"image": "localhost/epp:1"}}}
    dep = next(o for o in picker_objects(own) if o["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost/epp:1"


@pytest.mark.parametrize(
    "spec,settings,want",
    [
        (PICKED, SETTINGS, ["OVSERVE_ROUTING_PICKER"]),
        (PICKED, PICKER_SETTINGS, []),
        (
            {**PLAIN, "routing": {"picker": {"image": "evil.example/epp:1"}}},
            PICKER_SETTINGS,
            ["OVSERVE_ALLOWED_IMAGES"],
        ),
        (
            {**PLAIN, "routing": {"picker": {"image": "localhost/epp:1"}}},
            PICKER_SETTINGS.model_copy(update={"allowed_images": ("localhost/",)}),
            [],
        ),
        (
            {**PLAIN, "routing": {"picker": {"image": PICKER_SETTINGS.picker_image}}},
            PICKER_SETTINGS,
            [],
        ),
    ],
    ids=["picker not allowed", "allowed", "another image", "an allowed image", "the operator's own image"],
)
def test_policy_governs_the_picker_and_its_image(spec, settings, want):
    found = [v for v in policy.violations(api.parse_spec(spec), settings) if v.startswith("spec.routing")]
    assert len(found) == len(want) and all(w in f for w, f in zip(want, found, strict=True)), found


def live_picker(available: bool = True, **edits: Any) -> dict[str, Any]:
    """The picker's objects as the apiserver holds them after an apply (`edits`: kind -> a field changed by hand)."""
    out: dict[str, Any] = {}
    for obj in picker_objects(PICKED):
        obj = copy.deepcopy(obj)
        obj["metadata"]["uid"] = f"uid-{obj['kind']}"
        for field, value in edits.get(obj["kind"], {}).items():
            obj[field] = value
        out[obj["kind"]] = obj
    out["Deployment"]["status"] = {"conditions": [{"type": "Available", "status": "True" if available else "False"}]}
    return out


def picked(**fields: Any) -> Observed:
    return observed(PICKED, settings=PICKER_SETTINGS, **fields)


PICKER_CASES: dict[str, tuple[Observed, Memory, dict[str, Any]]] = {
    "pool and picker as rendered, Available: PoolReady, pickerReady": (
        picked(pool=routing_io.Seen(installed=True, pool=live_pool(), picker=live_picker()), pods=PODS),
        memory(),
        {
            "routing.reason": reasons.POOL_READY,
            "routing.pickerReady": True,
            "routing.picker": "llm-epp",
            "write_pool": False,
        },
    ),
    "the picker not Available yet: PickerNotReady": (
        picked(pool=routing_io.Seen(installed=True, pool=live_pool(), picker=live_picker(False)), pods=PODS),
        memory(),
        {"routing.reason": reasons.PICKER_NOT_READY, "routing.pickerReady": False, "write_pool": False},
    ),
    "the picker's ConfigMap deleted by hand: written": (
        picked(pool=routing_io.Seen(installed=True, pool=live_pool(), picker={**live_picker(), "ConfigMap": None})),
        memory(),
        {"write_pool": True, "memory.pool_written_at": NOW.tick},
    ),
    "the picker's Role edited by hand: reverted": (
        picked(pool=routing_io.Seen(installed=True, pool=live_pool(), picker=live_picker(Role={"rules": []}))),
        memory(),
        {"write_pool": True, "memory.pool_reverted_at": NOW.tick},
    ),
    "the picker refused: PoolRefused, not retried for 60 s": (
        picked(pool=routing_io.Seen(installed=True, pool=live_pool(), picker=dict.fromkeys(routing_io.PICKER_KINDS))),
        memory(pool_error="the operator may not manage ...", pool_refused_at=NOW.tick - 10),
        {"routing.reason": reasons.POOL_REFUSED, "write_pool": False},
    ),
    "picker turned off, ours still there: written (deleted)": (
        observed(pool=routing_io.Seen(installed=True, pool=live_pool(), picker=live_picker())),
        memory(),
        {"write_pool": True, "routing.reason": reasons.POOL_READY, "routing.picker": None},
    ),
}


@pytest.mark.parametrize("obs,mem,want", list(PICKER_CASES.values()), ids=list(PICKER_CASES))
def test_decide_the_picker(obs, mem, want):
    plan = decide(obs, mem, NOW)
    for path, value in want.items():
        got = _get(plan, path)
        assert got == value, (path, got, plan.status.get("routing"))


def test_a_picker_status_reported_and_no_longer_rendered_is_deleted_by_the_apply():
    ran = {"routing": {"reason": reasons.POOL_READY, "picker": "llm-epp", "pickerReady": True}}
    start = begin(observed(), memory(last_status=ran), NOW)
    assert start.desired is not None and start.desired.remove_picker
    assert not begin(observed(), memory(), NOW).desired.remove_picker  # type: ignore[union-attr]
    assert not begin(picked(), memory(last_status=ran), NOW).desired.remove_picker  # type: ignore[union-attr]


def test_picker_drift_names_what_is_missing_or_edited():
    desired = picker_objects(PICKED)
    assert routing_io.picker_drift(desired, live_picker()) == []
    assert routing_io.picker_drift(desired, {**live_picker(), "Service": None}) == ["Service: missing"]
    edited = routing_io.picker_drift(desired, live_picker(ConfigMap={"data": {"epp-config.yaml": "{}"}}))
    assert edited and all(p.startswith("ConfigMap: data") for p in edited)


def test_a_new_leader_applies_when_status_says_routing_ran_and_the_spec_has_none():
    """Routing turned off while no operator ran: the children are otherwise as rendered, but status still names
    the pool, so a new leader takes the full apply (which deletes the pool) instead of the unchanged shortcut."""
    meta = {"name": NAME, "namespace": NS, "uid": UID, "generation": GEN, "resourceVersion": "7"}
    ran = {"routing": {"reason": reasons.POOL_READY, "pool": NAME, "endpoints": 2}}
    for stored, want in (({}, Apply.UNCHANGED), (ran, Apply.GENERATION)):
        obs = observed(PLAIN)
        snap = {**obs.snapshot, "metadata": meta, "status": stored}
        obs = Observed(snap, SETTINGS, parse(snap), stored, live=obs.live)
        assert begin(obs, Memory(readback=ReadbackMemory(30.0), uid=UID), NOW).apply is want, stored
