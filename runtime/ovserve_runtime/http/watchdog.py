"""The liveness progress watchdog: generations are in flight and no token came for too long -> not live.

A hung engine (a device that stopped answering, a deadlock) leaves the process up and its event loop
serving: without this, /v2/health/live answers 200 forever and the kubelet never restarts it. Progress is
what the handlers see: the tokens their generations received. Checked when liveness is asked (the
kubelet's probe period is the watchdog's tick), no task of its own. Pure but for the clock it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STEP_MULTIPLE = 50  # no token for this many engine step times (when longer than the configured floor)


@dataclass
class Watchdog:
    stall_s: float  # --liveness-stall-seconds: the floor
    _seen: tuple = ()  # (generation, tokens) of the last check
    _since: float | None = None  # when progress was last seen
    stalled: str | None = field(default=None)  # the report once stalled

    def check(self, now: float, generations: list, step_s: float | None) -> str | None:
        """None when live; else why not. `generations`: the GenRequests in flight."""
        if not generations:
            self._seen, self._since = (), None
            return None
        cur = {id(g): g.generated for g in generations}
        before = dict(self._seen)
        # progress: a generation got tokens, or one ended; a new arrival is not (it may be stuck too)
        progressed = any(k in before and n > before[k] for k, n in cur.items()) or any(k not in cur for k in before)
        self._seen = tuple(cur.items())
        if progressed or self._since is None:
            self._since = now
        bound = max(self.stall_s, STEP_MULTIPLE * step_s) if step_s else self.stall_s
        idle = now - self._since
        if idle < bound:
            return None
        return (
            f"engine stalled: {len(generations)} generations in flight and no token for {idle:.1f}s "
            f"(bound {bound:.1f}s)"
        )
