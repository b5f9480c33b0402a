"""Readback: runtime pods -> one RuntimeReport per pod.

Running pods are asked over HTTP (GET http://<podIP>:8000/v1/status). Pods whose runtime exited are
read from the container status: the runtime writes its report as the last line of its termination
message (terminationMessagePolicy FallbackToLogsOnError), which the kubelet keeps in
state/lastState.terminated.message even when the pod was never reachable. A Ready pod whose report
cannot be read keeps its last good report for a bounded grace (ReadbackMemory); pod inspection itself
lives in podview.

A pod answers what its image says (`spec.image` is the tenant's choice), so nothing it answers is trusted:
no redirects are followed (a 3xx could point the operator at any address), the body is read up to
MAX_REPORT_BYTES and never decompressed, every read has a deadline, at most `concurrency` reads run at
once, and whatever goes wrong is a readback error, never an operator crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from ovserve_runtime import endpoints
from ovserve_runtime.report import RuntimeReport, State

from . import podview
from .render import PORT

log = logging.getLogger(__name__)

MAX_REPORT_BYTES = 64 * 1024  # a real report is under 2 KiB
DEFAULT_CONCURRENCY = 16


@dataclasses.dataclass(frozen=True)
class Reading:
    """What we know about one pod's runtime: its report (or None) and where it came from.

    `error` is the last readback error; `failing_since` (wall clock) when GET /v1/status began to fail
    for a pod that was read before; source "remembered" = the last good report, kept within the grace.
    """

    report: RuntimeReport | None
    source: str  # "http", "remembered", "terminationMessage" or "none"
    error: str = ""
    failing_since: dt.datetime | None = None


def choose(
    http_report: RuntimeReport | None, terminated: RuntimeReport | None, container_ready: bool = False
) -> tuple[RuntimeReport | None, str]:
    """Combine the live report and the last termination report (pure).

    `terminated` is the termination report podview gives only while the container is not running or has
    not been ready since it restarted (a crash-looping runtime reads its failure; one that recovered speaks
    for itself). A
    container that is ready now is never reported by an old failure (its report may just be unreadable
    for a moment).
    """
    if http_report is not None and http_report.state == State.READY:
        return http_report, "http"
    if terminated is not None and terminated.state == State.FAILED and not container_ready:
        return terminated, "terminationMessage"
    if http_report is not None:
        return http_report, "http"
    if terminated is not None and not container_ready:
        return terminated, "terminationMessage"
    return None, "none"


@dataclasses.dataclass(frozen=True)
class PodMemory:
    """The last good report of one pod and, while GET /v1/status fails, since when."""

    report: RuntimeReport | None = None
    failing_since: dt.datetime | None = None


def with_grace(
    reading: Reading, memory: PodMemory | None, *, ready_now: bool, now: dt.datetime, grace: dt.timedelta
) -> tuple[Reading, PodMemory]:
    """Apply the readback grace (pure): a pod that is Ready and was read before keeps its last good
    report for `grace` after its /v1/status began to fail; afterwards it has no report, and the
    reading carries the error and since when."""
    memory = memory or PodMemory()
    if reading.source == "http" and reading.report is not None:
        return reading, PodMemory(report=reading.report)
    if not reading.error:  # not asked (not running): nothing to remember or forgive
        return reading, PodMemory()
    since = memory.failing_since or now
    kept = PodMemory(report=memory.report, failing_since=since)
    if ready_now and memory.report is not None and now - since < grace:
        return Reading(memory.report, "remembered", reading.error, since), kept
    return dataclasses.replace(reading, failing_since=since), kept


class ReadbackMemory:
    """Per-pod PodMemory across status cycles (keyed by pod uid); forgets pods no longer seen."""

    def __init__(self, grace_s: float) -> None:
        self.grace = dt.timedelta(seconds=grace_s)
        self._pods: dict[str, PodMemory] = {}

    def apply(
        self, pods: list[Mapping[str, Any]], readings: dict[str, Reading], now: dt.datetime
    ) -> dict[str, Reading]:
        out, remembered = self.graced(pods, readings, now)
        self._pods.update(remembered)
        return out

    def graced(
        self, pods: list[Mapping[str, Any]], readings: Mapping[str, Reading], now: dt.datetime
    ) -> tuple[dict[str, Reading], dict[str, PodMemory]]:
        """Pure: (pod name -> the reading after the grace, pod uid -> what to remember of each pod); `keep` the
        second to remember it."""
        out: dict[str, Reading] = {}
        remembered: dict[str, PodMemory] = {}
        for pod in pods:
            key, name = podview.uid(pod), podview.name(pod)
            reading = readings.get(name) or Reading(None, "none")
            out[name], remembered[key] = with_grace(
                reading, self._pods.get(key), ready_now=podview.container_ready(pod), now=now, grace=self.grace
            )
        return out, remembered

    def keep(self, remembered: Mapping[str, PodMemory]) -> None:
        """Remember these pods only (what `graced` returned): the others are gone."""
        self._pods = dict(remembered)

    def forget_except(self, uids: set[str]) -> None:
        for key in set(self._pods) - uids:
            del self._pods[key]


def status_url(pod: Mapping[str, Any], port: int = PORT) -> str:
    ip = (pod.get("status") or {}).get("podIP", "")
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{endpoints.STATUS}"


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    if resp.content_length is not None and resp.content_length > limit:
        raise ValueError(f"body of {resp.content_length} bytes, more than {limit}")
    body = bytearray()
    while chunk := await resp.content.readany():
        body += chunk
        if len(body) > limit:
            raise ValueError(f"body larger than {limit} bytes")
    return bytes(body)


async def fetch_report(
    session: aiohttp.ClientSession, pod: Mapping[str, Any], port: int = PORT
) -> tuple[RuntimeReport | None, str]:
    try:
        async with session.get(
            status_url(pod, port), allow_redirects=False, headers={"Accept-Encoding": "identity"}
        ) as resp:
            if 300 <= resp.status < 400:
                return None, f"GET /v1/status: HTTP {resp.status} (redirects are not followed)"
            if resp.status != 200:
                return None, f"GET /v1/status: HTTP {resp.status}"
            if resp.headers.get("Content-Encoding", "identity") != "identity":
                return None, f"GET /v1/status: Content-Encoding {resp.headers['Content-Encoding']!r} refused"
            body = await _read_bounded(resp, MAX_REPORT_BYTES)
        return RuntimeReport.model_validate_json(body), ""
    except TimeoutError:
        return None, "GET /v1/status: no answer in time"
    except (aiohttp.ClientError, ValueError, OSError) as e:
        return None, f"GET /v1/status: {type(e).__name__}: {str(e)[:200]}"


async def read_pod(session: aiohttp.ClientSession, pod: Mapping[str, Any], port: int = PORT) -> Reading:
    terminated = podview.termination_report(pod)
    http_report, error = (None, "")
    if podview.is_running(pod):
        http_report, error = await fetch_report(session, pod, port)
    report, source = choose(http_report, terminated, podview.container_ready(pod))
    return Reading(report=report, source=source, error=error)


async def read_reports(
    pods: Iterable[Mapping[str, Any]],
    *,
    timeout: float = 2.0,
    port: int = PORT,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> dict[str, Reading]:
    """pod name -> Reading, for every pod (at most `concurrency` HTTP reads at once, each within `timeout`)."""
    pods = list(pods)
    if not pods:
        return {}
    client_timeout = aiohttp.ClientTimeout(total=timeout, connect=timeout, sock_read=timeout)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=True)
    gate = asyncio.Semaphore(concurrency)

    async def one(pod: Mapping[str, Any]) -> Reading:
        async with gate:
            return await read_pod(session, pod, port)

    async with aiohttp.ClientSession(
        timeout=client_timeout, connector=connector, trust_env=False, auto_decompress=False
    ) as session:
        readings = await asyncio.gather(*(one(pod) for pod in pods))
    return {(pod.get("metadata") or {}).get("name", ""): r for pod, r in zip(pods, readings, strict=True)}
