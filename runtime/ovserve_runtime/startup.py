"""How a pod starts: the compiled-model cache around the load, and the phases timed (docs/startup.md).

`load` wraps the task/pipeline load (tasks.load_serving): it reads the weights (timed: the `weightsRead` phase),
opens the cache's key directory (compilecache.py) and gives it to the pipelines as CACHE_DIR, and returns the
StartupReport with the construction (`compile`, a cache load on a hit) and first-token phases the loaders timed
into `Phases`. A load that fails with the cache is tried once more without it (an unreadable blob or a full
disk must not keep a serving from starting), and the report says so.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import compilecache
from .report import CacheState, Reason, StartupReport, Versions

log = logging.getLogger("ovserve.startup")

READ_CHUNK = 16 << 20
CACHE_PROPERTY = "CACHE_DIR"


@dataclass
class Phases:
    """Seconds of each phase, filled in by the loaders (loader.py, tasks/__init__.py)."""

    weights_read: float | None = None
    compile: float | None = None
    first_token: float | None = None


def read_weights(model_dir: str) -> tuple[float, int]:
    """Read the model's .bin files once (into the page cache, where OpenVINO maps them from): (seconds, bytes)."""
    t = time.perf_counter()
    total = 0
    buf = bytearray(READ_CHUNK)
    for p in sorted(Path(model_dir).glob("*.bin")):
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return time.perf_counter() - t, total


def process_age_s() -> float | None:
    """Seconds since this process started (/proc: the kernel's start time, so imports count too)."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def with_cache_dir(opts: Any, cache_dir: str | None) -> Any:
    """LoadOptions with CACHE_DIR among the properties the pipelines are constructed with (None: without)."""
    props = {k: v for k, v in opts.properties.items() if k != CACHE_PROPERTY}
    enc = None if opts.encoder_properties is None else dict(opts.encoder_properties)
    if enc is not None:
        enc.pop(CACHE_PROPERTY, None)
    if cache_dir is not None:
        props[CACHE_PROPERTY] = cache_dir
        if enc is not None:
            enc[CACHE_PROPERTY] = cache_dir
    return dataclasses.replace(opts, properties=props, encoder_properties=enc, phases=Phases())


def load(
    opts: Any, flags: Any, versions: Versions, load_fn: Callable[..., Any], *args: Any
) -> tuple[Any, StartupReport]:
    """(what load_fn returned, the start report). `opts`: loader.LoadOptions; `flags`: RuntimeFlags."""
    try:
        read_s, weight_bytes = read_weights(opts.model_path)
        log.info("weights read in %.2fs (%d MiB)", read_s, weight_bytes >> 20)
        digest = compilecache.digest_of(compilecache.model_files(opts.model_path)) if flags.cache_dir else None
    except OSError as exc:  # a missing or unreadable model: the loader says what is wrong with it
        log.info("model files not readable (%s); the loader reports it", exc)
        read_s, weight_bytes, digest = None, 0, None
    if digest is None:
        run = with_cache_dir(opts, None)
        loaded = load_fn(run, *args)
        return loaded, _report(read_s, run.phases, CacheState.OFF)
    key = compilecache.make_key(
        versions.openvino,
        versions.openvinoGenai,
        opts.device,
        digest,
        {k: v for k, v in opts.properties.items() if k != CACHE_PROPERTY}
        | opts.scheduler.properties()
        | {"pipelineType": str(opts.pipeline_type)},
    )
    entry = compilecache.open_entry(flags.cache_dir, key, weight_bytes)
    max_bytes = int(flags.cache_max_gb * (1 << 30))
    if isinstance(entry, compilecache.Bypass):
        log.warning("compiled-model cache not used: %s; compiling without it", entry.message)
        run = with_cache_dir(opts, None)
        loaded = load_fn(run, *args)
        return loaded, _report(read_s, run.phases, CacheState.BYPASSED, key.name(), message=entry.message)
    run = with_cache_dir(opts, str(entry.dir))
    try:
        loaded = load_fn(run, *args)
    except Exception as exc:
        entry.finish(False, None)
        report = getattr(exc, "report", None)
        if report is not None and report.reason != Reason.MODEL_LOAD_FAILED:
            raise  # refused for what the model or the request is (not found, no PagedAttention, ...): not the cache
        message = f"{compilecache.BYPASS_FAILED}: the load with the cache failed ({str(exc).strip()[-300:]})"
        log.warning("%s; loading again without the cache", message)
        run = with_cache_dir(opts, None)
        loaded = load_fn(run, *args)  # fails again: the failure is the model's, reported as it is
        return loaded, _report(read_s, run.phases, CacheState.BYPASSED, key.name(), message=message)
    state, message = entry.finish(True, max_bytes)
    previous = entry.previous if state == CacheState.MISS else None
    if previous:
        log.warning("compiled-model cache missed; an entry of %s exists for this model (a version change)", previous)
    log.info("compiled-model cache %s (%s)%s", state, key.name(), f": {message}" if message else "")
    return loaded, _report(read_s, run.phases, state, key.name(), previous, message)


def _report(
    read_s: float | None,
    ph: Phases,
    cache: CacheState,
    key: str | None = None,
    previous: str | None = None,
    message: str = "",
) -> StartupReport:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return StartupReport(
        weightsReadSeconds=r(read_s),
        compileSeconds=r(ph.compile),
        firstTokenSeconds=r(ph.first_token),
        cache=cache,
        cacheKey=key,
        previousVersions=previous,
        message=message,
    )
