"""Give back the model files' mapped pages once a pipeline is compiled.

OpenVINO maps a model's .bin read-only and the CPU plugin repacks the weights it computes with into memory of
its own while compiling; the mapping stays, and every page compiling read stays resident in the process: the
weights counted twice. Measured on bench-qwen (int8, Qwen2.5-0.5B shape): the engine process held 472 MiB of
openvino_model.bin beside its own copy, 1,134 MiB in all; after MADV_DONTNEED on the read-only mappings,
656 MiB, with identical greedy tokens and no growth over later generations (what inference still reads, e.g.
an embedding row, faults back in from the page cache). Only read-only mappings of the model's own .bin files
are touched: dropping a read-only page loses nothing, the file holds it.

Loading also leaves freed heap behind (the IR read and transformed, the compile's temporaries), which glibc keeps
in its arenas: `trim_heap` hands it back (malloc_trim; 20 MiB of the HTTP process on bench-qwen, measured).

The plugin finishes preparing some weights at the first inference of each kind (a decode step, a prompt chunk),
reading the mapping again: `warm_then_release` runs one of each first, so the pages stay given back.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

log = logging.getLogger("ovserve.engine")

MADV_DONTNEED = 4
MAPS = "/proc/self/maps"


def model_mappings(maps_text: str, dirs: list[str]) -> list[tuple[int, int]]:
    """(start, end) of the read-only mappings of .bin files under `dirs` in a /proc/PID/maps text."""
    roots = [str(Path(d).resolve()).rstrip("/") + "/" for d in dirs if d]
    out = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or "w" in parts[1]:
            continue
        path = parts[5].strip()
        if path.endswith(".bin") and any(path.startswith(r) for r in roots):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


WARM_PROMPTS = ("hi", "hello world " * 48)  # a decode step, then a prompt chunk of ~100 tokens


def warm_then_release(pipe, dirs: list[str]) -> int:
    """One short generation per kind of inference on a ContinuousBatchingPipeline, then `release`. A warm-up
    that fails keeps the pages (the smoke generation after it says what is wrong)."""
    import openvino_genai as g

    try:
        tok = pipe.get_tokenizer()
        config = g.GenerationConfig()
        config.max_new_tokens = 1
        for text in WARM_PROMPTS:
            pipe.generate([tok.encode(text).input_ids], [config])
    except Exception as exc:
        log.info("model pages kept mapped: the warm-up failed: %s", str(exc).strip()[:200])
        return 0
    return release(dirs)


def release(dirs: list[str]) -> int:
    """MADV_DONTNEED on the model files' read-only mappings of this process; the bytes covered (0 where
    /proc or madvise is not there: nothing else changes)."""
    try:
        ranges = model_mappings(Path(MAPS).read_text(), dirs)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError) as exc:
        log.info("model pages kept mapped: %s", exc)
        return 0
    total = 0
    for lo, hi in ranges:
        if libc.madvise(lo, hi - lo, MADV_DONTNEED) == 0:
            total += hi - lo
    if total:
        log.info("gave back %d KiB of mapped model pages after compiling", total >> 10)
    trim_heap()
    return total


def trim_heap() -> None:
    """Return the heap's free memory to the system (glibc's malloc_trim; nothing elsewhere)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
