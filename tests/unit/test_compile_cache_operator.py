"""spec.cache in the operator (issue 42): the volume and flags rendered, the tenant policy, status.startup from the
pods' reports, and the Warning Event of a miss that a version change caused (on the transition only)."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import policy, render
from ovserve_operator import spec as api
from ovserve_operator.settings import Settings
from ovserve_runtime.report import CacheState, StartupReport

from .podfixtures import CB_READY, pod, readings
from .podfixtures import compute as compute_status

HOST = {"hostPath": {"path": "/var/cache/ovserve/models/tiny-llm"}}
SETTINGS = Settings(cache_host_root="/srv/ovserve-compiled")
NOW = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)


def _pod_spec(cache: dict | None) -> dict:
    spec = {"model": HOST, **({"cache": cache} if cache is not None else {})}
    _svc, dep, *_ = render.render("llm", "ns", "uid-1", api.parse_spec(spec), SETTINGS)
    return dep["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("cache", "volume", "cache_dir", "max_gb", "env_ns"),
    [
        (None, None, None, None, False),
        ({"mode": "off"}, None, None, None, False),
        (
            {"mode": "node"},
            {"name": "compile-cache", "hostPath": {"path": "/srv/ovserve-compiled", "type": "Directory"}},
            "/var/cache/ovserve-compiled/$(POD_NAMESPACE)",
            None,
            True,
        ),
        (
            {"mode": "pvc", "claimName": "blobs", "maxSizeGB": 5},
            {"name": "compile-cache", "persistentVolumeClaim": {"claimName": "blobs"}},
            "/var/cache/ovserve-compiled",
            "5",
            False,
        ),
    ],
)
def test_render(cache, volume, cache_dir, max_gb, env_ns):
    ps = _pod_spec(cache)
    c = ps["containers"][0]
    args = c["args"]
    got_volume = next((v for v in ps["volumes"] if v["name"] == render.CACHE_VOLUME), None)
    assert got_volume == volume
    assert (args[args.index("--cache-dir") + 1] if "--cache-dir" in args else None) == cache_dir
    assert (args[args.index("--cache-max-gb") + 1] if "--cache-max-gb" in args else None) == max_gb
    mounted = any(m["name"] == render.CACHE_VOLUME for m in c["volumeMounts"])
    assert mounted is (volume is not None)
    assert any(e["name"] == "POD_NAMESPACE" for e in c["env"]) is env_ns


def test_cache_off_leaves_the_template_hash_unchanged():
    assert _pod_spec(None) == _pod_spec({"mode": "off"})


@pytest.mark.parametrize(
    "cache",
    [{"mode": "pvc"}, {"mode": "node", "claimName": "x"}, {"mode": "pvc", "claimName": "x", "maxSizeGB": 0}],
)
def test_invalid_cache_specs(cache):
    with pytest.raises(ValueError):
        api.parse_spec({"model": HOST, "cache": cache})


@pytest.mark.parametrize(
    ("cache", "allow_host_path", "denied"),
    [
        ({"mode": "node"}, False, True),
        ({"mode": "node"}, True, False),
        ({"mode": "pvc", "claimName": "x"}, False, False),
        ({"mode": "off"}, False, False),
    ],
)
def test_node_cache_follows_the_host_path_policy(cache, allow_host_path, denied):
    spec = api.parse_spec({"model": {"pvc": {"claimName": "m"}}, "cache": cache})
    out = policy.violations(spec, Settings(allow_host_path=allow_host_path))
    assert any("spec.cache.mode node is denied" in v for v in out) is denied


def _with_startup(cache: CacheState, compile_s: float, previous: str | None = None):
    st = StartupReport(compileSeconds=compile_s, cache=cache, previousVersions=previous, totalSeconds=compile_s + 1)
    return CB_READY.model_copy(update={"startup": st})


def _started(name: str, at: str) -> dict:
    p = pod(name)
    p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = at
    return p


def _compute(pods, reports, previous=None):
    spec = api.parse_spec({"model": HOST, "replicas": len(pods)})
    return compute_status(spec, pods, readings(reports), now=NOW, generation=1, previous=previous, desired_hash="h1")


def test_status_startup_is_the_newest_start_and_counts_hits():
    pods = [_started("llm-a", "2026-12-07T00:00:10Z"), _started("llm-b", "2026-12-07T00:00:05Z")]
    r = _compute(pods, {"llm-a": _with_startup(CacheState.HIT, 0.5), "llm-b": _with_startup(CacheState.MISS, 3.0)})
    su = r.status["startup"]
    assert su["pod"] == "llm-a" and su["cache"] == "hit" and su["compileSeconds"] == 0.5, su
    assert su["cacheHits"] == "1/2"


def test_status_startup_absent_without_reports():
    r = _compute([pod("llm-a")], {"llm-a": CB_READY})
    assert r.status.get("startup") is None


def test_version_miss_warns_once():
    miss = _with_startup(CacheState.MISS, 3.0, previous="OpenVINO 2026.3.0 / openvino-genai 2026.3.0.0")
    first = _compute([pod("llm-a")], {"llm-a": miss})
    warned = [e for e in first.events if e.reason == "CompileCacheVersionMiss"]
    assert len(warned) == 1 and "2026.3.0" in warned[0].message and warned[0].type == "Warning"
    again = _compute([pod("llm-a")], {"llm-a": miss}, previous=first.status)
    assert not [e for e in again.events if e.reason == "CompileCacheVersionMiss"]
    plain = _compute([pod("llm-b")], {"llm-b": _with_startup(CacheState.MISS, 3.0)})
    assert not [e for e in plain.events if e.reason == "CompileCacheVersionMiss"]
