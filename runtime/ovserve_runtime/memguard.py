"""The engine's memory guard: growth of the engine process that nothing else bounds ends in a drained restart.

openvino-genai keeps every grammar XGrammar compiled for the life of the pipeline (its GrammarCompiler is built
with an unbounded cache, and nothing outside the library can clear or limit it): every distinct response_format
schema or forced tool call a client sends stays in the engine process, measured at ~1.9 MB each on
tiny-qwen25's vocabulary and ~25 MB each on bench-qwen's 151,936 tokens (docs/runtime.md: Structured outputs).
Left alone, a client sending distinct schemas grows the pod until the kernel's OOM killer ends it and every
generation in flight with it.

So the runtime watches the engine process: its RSS beyond what it had when it became ready, less what its KV
cache grew by (the cache grows on demand and is legitimate), is the growth. Past the budget
(--engine-memory-growth-bytes, capped by what the container's cgroup limit leaves) the runtime recycles
itself as on SIGTERM: readiness turns 503, the requests in flight finish (the drain), the process exits 0 and
the kubelet starts the container again with a fresh engine. Nothing in flight is lost; the pod is away for a
reload, and its Service's other pods take the traffic meanwhile.

`Guard.check` is pure; `rss_bytes` and `cgroup_limit` read /proc and /sys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_MAX = "/sys/fs/cgroup/memory.max"
LIMIT_SHARE = 0.8  # of what the cgroup limit leaves above the pod's memory at ready: the rest is headroom


@dataclass
class Guard:
    budget: int  # bytes of growth allowed; 0: off
    baseline_rss: int | None = None
    baseline_cache: int = 0

    def start(self, rss: int | None, cache_bytes: int | None, pod_rss: int | None, limit: int | None) -> None:
        """The engine's memory at ready; a cgroup `limit` caps the budget at LIMIT_SHARE of what it leaves
        above the whole pod's memory (`pod_rss`) at that point."""
        self.baseline_rss, self.baseline_cache = rss, cache_bytes or 0
        if self.budget and limit and pod_rss is not None:
            self.budget = max(1, min(self.budget, int((limit - pod_rss) * LIMIT_SHARE)))

    def growth(self, rss: int, cache_bytes: int | None) -> int:
        if self.baseline_rss is None:
            return 0
        cache_growth = max(0, (cache_bytes or 0) - self.baseline_cache)
        return rss - self.baseline_rss - cache_growth

    def check(self, rss: int | None, cache_bytes: int | None) -> str | None:
        """None within the budget; else why the runtime recycles."""
        if not self.budget or rss is None or self.baseline_rss is None:
            return None
        grown = self.growth(rss, cache_bytes)
        if grown <= self.budget:
            return None
        return (
            f"the engine process grew by {grown >> 20} MiB beyond its memory at ready and its KV cache's growth "
            f"(budget {self.budget >> 20} MiB, --engine-memory-growth-bytes): compiled grammars openvino-genai "
            "keeps for the pipeline's life; recycling: drain, exit 0, restarted with a fresh engine"
        )


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a process in bytes; None when it is gone or unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_limit(path: str = CGROUP_MAX) -> int | None:
    """The container's memory limit (cgroup v2 memory.max) in bytes; None when unlimited or unreadable."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
