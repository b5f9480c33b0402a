"""No stale latches in status (issue 26 §3), each reproduced by a table case: pods as the apiserver serves
them (podfixtures), the runtime's own report and termination-message writer, the real status computation."""

from __future__ import annotations

import datetime as dt

import pytest
from ovserve_operator import podview
from ovserve_operator import spec as api
from ovserve_operator.readback import Reading, choose
from ovserve_runtime import cli
from ovserve_runtime.http.app import failed_state
from ovserve_runtime.report import TERMINATION_MESSAGE_LIMIT, RuntimeReport

from .podfixtures import CB_READY, pod, report
from .podfixtures import compute as compute_status

NOW = dt.datetime(2026, 12, 4, 7, 0, 0, tzinfo=dt.UTC)
LOAD_FAILED = report("failed", resolved=None, reason="ModelLoadFailed", message="cannot compile the model")
TIMEOUT = "GET /v1/status: no answer in time"


def compute(pods, readings, replicas=1):
    spec = api.parse_spec({"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": replicas})
    return compute_status(spec, pods, readings, now=NOW).status


def ready(status):
    c = next(c for c in status["conditions"] if c["type"] == "Ready")
    return c["status"], c["reason"], c["message"]


def reading_of(p, http_report=None, error=""):
    """What readback makes of a pod: its live report (or the error) and its termination report."""
    rep, source = choose(http_report, podview.termination_report(p), podview.container_ready(p))
    return Reading(rep, source, error)


STARTED = "2026-12-03T00:00:00Z"  # podfixtures' running.startedAt


@pytest.mark.parametrize(
    "running, waiting, ready_changed, want_reason",
    [
        # recovered (ready since its restart), now briefly unready and /v1/status times out: not the old failure
        (True, None, "2026-12-03T00:05:00Z", "Loading"),
        # restarted and loading again, never ready since: still the failure (a crash loop does not flap)
        (True, None, "2026-12-02T23:59:00Z", "ModelLoadFailed"),
        # not running (backing off after the failure): the termination report is the news
        (False, ("CrashLoopBackOff", "back-off 10s"), None, "ModelLoadFailed"),
    ],
)
def test_last_termination_report_not_trusted_once_the_container_recovered(running, waiting, ready_changed, want_reason):
    p = pod("a", ready=False, running=running, waiting=waiting, last_terminated_message=LOAD_FAILED.to_line())
    if ready_changed:
        p["status"]["conditions"].append(
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": ready_changed}
        )
    status = compute([p], {"a": reading_of(p, error=TIMEOUT if running else "")})
    assert ready(status)[1] == want_reason
    assert status["phase"] == ("Loading" if want_reason == "Loading" else "Failed")


@pytest.mark.parametrize("size", [10_000, 4_200, 100])
def test_a_long_termination_report_is_trimmed_keeping_its_end(tmp_path, size):
    """The kubelet keeps 4 KiB of the termination message: the runtime trims the message (keeping the end
    that names the cause) so that the line still parses, instead of CrashLoopBackOff with no reason."""
    error = "x" * size + " the cause: Exception from src/plugin.cpp: device lost"
    rep = report("failed", resolved=None, reason="ModelLoadFailed", message=error)
    path = tmp_path / "termination-log"
    cli.write_failure(rep, str(path))
    written = path.read_bytes()
    assert len(written) <= TERMINATION_MESSAGE_LIMIT
    kept = written[:TERMINATION_MESSAGE_LIMIT].decode()  # what the kubelet keeps
    p = pod("a", ready=False, running=False, waiting=("CrashLoopBackOff", ""), last_terminated_message=kept)
    parsed = podview.termination_report(p)
    assert parsed is not None and parsed.pipeline.message.endswith("device lost")
    assert (parsed.pipeline.message == error) is (size < 3_000)
    assert ready(compute([p], {"a": reading_of(p)}))[1] == "ModelLoadFailed"


def test_an_untrimmed_report_over_4_kib_would_not_parse():
    """Why the trim is needed: the line as it was written before, cut by the kubelet, parses to nothing."""
    rep = report("failed", resolved=None, reason="ModelLoadFailed", message="y" * 10_000)
    assert RuntimeReport.from_text(rep.to_line()[:TERMINATION_MESSAGE_LIMIT]) is None


@pytest.mark.parametrize(
    "running, want",
    [(False, ("False", "OOMKilled")), (True, ("False", "Loading"))],  # running again: not latched
)
def test_oom_killed_is_named_with_the_memory_limit(running, want):
    p = pod(
        "a",
        ready=False,
        running=running,
        waiting=None if running else ("CrashLoopBackOff", "back-off 20s restarting failed container"),
        last_terminated_message="",
        last_reason="OOMKilled",
        memory_limit="2Gi",
    )
    status, reason, message = ready(compute([p], {"a": reading_of(p)}))
    assert (status, reason) == want
    if reason == "OOMKilled":
        assert "memory limit 2Gi" in message and "cacheSizeGB" in message


def test_one_crash_looping_extra_replica_of_a_serving_reads_degraded():
    serving = [pod("a"), pod("b")]
    looping = pod(
        "c", ready=False, waiting=("CrashLoopBackOff", "back-off"), last_terminated_message=LOAD_FAILED.to_line()
    )
    pods = [*serving, looping]
    readings = {"a": Reading(CB_READY, "http"), "b": Reading(CB_READY, "http"), "c": reading_of(looping)}
    status = compute(pods, readings, replicas=3)
    s, reason, message = ready(status)
    assert (s, reason, status["phase"]) == ("False", "Degraded", "Degraded")
    assert message.startswith("2/3 replicas ready; 1 failing, first: ModelLoadFailed: c:")
    # every pod failing: Failed, as before
    alone = compute([looping], {"c": reading_of(looping)})
    assert (alone["phase"], ready(alone)[1]) == ("Failed", "ModelLoadFailed")


def test_a_failure_while_serving_is_not_model_load_failed():
    failed = failed_state(CB_READY, "Exception from the plugin: device lost")
    assert failed.pipeline.reason.value == "EngineFailed" and failed.pipeline.resolved is not None
    p = pod("a", ready=False, waiting=("CrashLoopBackOff", ""), last_terminated_message=failed.to_line())
    s, reason, message = ready(compute([p], {"a": reading_of(p)}))
    assert (s, reason) == ("False", "EngineFailed") and "device lost" in message
