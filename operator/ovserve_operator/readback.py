"""Readback: runtime pods -> one RuntimeReport per pod.

Running pods are asked over HTTP (GET http://<podIP>:8000/v1/status). Pods whose runtime exited are
read from the container status: the runtime writes its report as the last line of its termination
message (terminationMessagePolicy FallbackToLogsOnError), which the kubelet keeps in
state/lastState.terminated.message even when the pod was never reachable.

A pod answers what its image says (`spec.image` is the tenant's choice), so nothing it answers is trusted:
no redirects are followed (a 3xx could point the operator at any address), the body is read up to
MAX_REPORT_BYTES and never decompressed, every read has a deadline, at most `concurrency` reads run at
once, and whatever goes wrong is a readback error, never an operator crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from ovserve_runtime.report import RuntimeReport, State

from .render import CONTAINER_NAME, PORT

log = logging.getLogger(__name__)

MAX_REPORT_BYTES = 64 * 1024  # a real report is under 2 KiB
DEFAULT_CONCURRENCY = 16


@dataclasses.dataclass(frozen=True)
class Reading:
    """What we know about one pod's runtime: its report (or None) and where it came from."""

    report: RuntimeReport | None
    source: str  # "http", "terminationMessage" or "none"
    error: str = ""


def _container_status(pod: Mapping[str, Any], name: str = CONTAINER_NAME) -> Mapping[str, Any] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return cs
    return None


def termination_report(pod: Mapping[str, Any]) -> RuntimeReport | None:
    """The report in the runtime container's current or last termination message, if any."""
    cs = _container_status(pod)
    if not cs:
        return None
    for key in ("state", "lastState"):
        terminated = (cs.get(key) or {}).get("terminated") or {}
        report = RuntimeReport.from_text(terminated.get("message") or "")
        if report is not None:
            return report
    return None


def is_running(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    cs = _container_status(pod)
    return bool(cs and (cs.get("state") or {}).get("running") is not None)


def status_url(pod: Mapping[str, Any], port: int = PORT) -> str:
    ip = (pod.get("status") or {}).get("podIP", "")
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/v1/status"


def choose(http_report: RuntimeReport | None, terminated: RuntimeReport | None) -> tuple[RuntimeReport | None, str]:
    """Combine the live report and the last termination report (pure).

    A pod that failed before and is not ready now is reported as failed: otherwise a crash-looping
    runtime would flap between Loading and Failed with every restart.
    """
    if http_report is not None and http_report.state == State.READY:
        return http_report, "http"
    if terminated is not None and terminated.state == State.FAILED:
        return terminated, "terminationMessage"
    if http_report is not None:
        return http_report, "http"
    if terminated is not None:
        return terminated, "terminationMessage"
    return None, "none"


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
    terminated = termination_report(pod)
    http_report, error = (None, "")
    if is_running(pod):
        http_report, error = await fetch_report(session, pod, port)
    report, source = choose(http_report, terminated)
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
