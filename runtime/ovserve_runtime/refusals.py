"""Every refusal visible to the platform team: one log line per 4xx (method, path, status, error.code,
error.param; never the body, a prompt or a header), rate-limited, and `ovserve_refusals_total{status, code,
param}`.

The label values are bounded: a param's indexes are dropped (`messages[3].content` -> `messages[].content`),
an unknown field's name (the client's to choose) is counted as `(unknown field)` and only logged, a param is
cut at 64 characters, and beyond MAX_LABEL_SETS distinct label sets the rest count as `(other)`. A hostile
client thus cannot grow the metrics (or the log) without bound. The log allows LOG_BURST lines per
LOG_WINDOW_S seconds; what it held back is summed up in the next line.

The server calls `record` from a middleware on the event loop; no locks.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("ovserve.refusals")

MAX_LABEL_SETS = 256
LOG_BURST = 20
LOG_WINDOW_S = 10.0
_INDEX = re.compile(r"\[\d+\]")


def param_label(param: str | None, code: str | None) -> str:
    """The metric label of a refused field: bounded whatever the client sent."""
    if not param:
        return ""
    if code == "unknown_parameter":
        return "(unknown field)"
    return _INDEX.sub("[]", param)[:64]


class Refusals:
    def __init__(self, counter: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.counter = counter  # a prometheus Counter labelled status, code, param
        self.clock = clock
        self._labels: set[tuple[str, str, str]] = set()
        self._window_start = clock()
        self._logged = 0
        self._held = 0

    def record(self, method: str, path: str, status: int, code: str | None, param: str | None) -> None:
        labels = (str(status), (code or "")[:64], param_label(param, code))
        if labels not in self._labels:
            if len(self._labels) >= MAX_LABEL_SETS:
                labels = (labels[0], "(other)", "(other)")
            else:
                self._labels.add(labels)
        self.counter.labels(*labels).inc()
        self._log(method, path[:200], status, code, param)

    def _log(self, method: str, path: str, status: int, code: str | None, param: str | None) -> None:
        now = self.clock()
        if now - self._window_start >= LOG_WINDOW_S:
            self._window_start, self._logged = now, 0
        if self._logged >= LOG_BURST:
            self._held += 1
            return
        self._logged += 1
        held, self._held = self._held, 0
        log.info(
            "refused %s %s: %d code=%s param=%s%s",
            method,
            path,
            status,
            code or "-",
            (param or "-")[:120],
            f" ({held} more refusals not logged before this one)" if held else "",
        )
