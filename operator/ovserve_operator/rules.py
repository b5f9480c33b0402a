"""The status rules: an ordered chain of small pure rules per condition (cert-manager's policy chain).

`Facts` is everything observed about one LLMServing in one cycle (pods split into those of the current
template and those of earlier specs, their runtime reports, the Deployment, a refused apply). A rule is
a function `Facts -> (reason, message) | None`; a chain is an ordered tuple of (condition status, rule);
the first rule that answers decides the condition. Adding a rule = one function + one line in a chain.

Truth rules (../DESIGN.md "Status truth rules"): only pods of the CURRENT template speak for the spec;
a pinned *_CB never shows a fallback; every stuck state names its cause.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import TypeVar

from ovserve_runtime.report import CB_PIPELINES, RuntimeReport, State

from . import podview
from . import reasons as R
from . import spec as api
from .podview import InitPhase, InitState
from .render import DRAFT_VOLUME

Finding = tuple[str, str]  # (reason, message)
T = TypeVar("T")
ChainOf = tuple[tuple[api.ConditionStatus, Callable[[T], Finding | None]], ...]  # rules over facts of type T
Rule = Callable[["Facts"], Finding | None]
Chain = ChainOf["Facts"]

TRUE, FALSE, UNKNOWN = api.ConditionStatus.TRUE, api.ConditionStatus.FALSE, api.ConditionStatus.UNKNOWN

# kubelet waiting reasons that will not resolve by waiting (vs. ContainerCreating, PodInitializing, pulls)
BROKEN_WAITING = frozenset(r for r in R.KUBELET_WAITING if R.REGISTRY[r].phase == api.Phase.FAILED)
# runtime reasons that say nothing about a failure: a failed report with one of them is RuntimeFailed
_NOT_A_FAILURE = {R.LOADING_REASON, R.CONTINUOUS_BATCHING, R.LEGACY_REQUESTED}


@dataclasses.dataclass(frozen=True)
class PodFacts:
    """One runtime pod as the rules see it."""

    name: str
    current: bool  # of the current pod template
    pod_ready: bool
    container_ready: bool
    report: RuntimeReport | None
    readback_error: str = ""
    failing_since: dt.datetime | None = None
    unschedulable: str | None = None
    waiting: tuple[str, str] | None = None  # runtime container (reason, kubelet message)
    init: InitState = dataclasses.field(default_factory=lambda: InitState(InitPhase.NONE))
    mount_failure: str | None = None  # kubelet FailedMount Event message
    oom_limit: str | None = None  # the memory limit, when the runtime was OOM-killed (podview.oom_killed)
    node_fault: str | None = None  # why its node cannot serve (nodes.fault): NotReady, unreachable, gone
    node: str = ""  # the node it is bound to
    started: str = ""  # when its runtime container last started (RFC 3339), "" when not running

    @property
    def marked_not_ready(self) -> bool:
        """Its containers ready and its runtime reporting ready, yet the pod not Ready: the node controller marked
        it so while its node did not report (the kubelet sets both from the same probes; only the node controller
        sets the pod's alone), and the kubelet has not confirmed it Ready again since the node came back."""
        reporting = self.report is not None and self.report.state == State.READY
        return self.container_ready and not self.pod_ready and reporting

    @property
    def node_problem(self) -> str | None:
        """What its node did to it: a fault now, or the not-Ready mark a fault left; None when nothing."""
        if self.node_fault is not None:
            return self.node_fault
        if self.marked_not_ready:
            where = f"node {self.node}" if self.node else "its node"
            return (
                f"marked not ready by the node controller while {where} did not report; the runtime reports ready "
                "and the kubelet's next readiness probe clears it"
            )
        return None

    @property
    def ready(self) -> bool:
        """Serving: Ready, reporting ready, and on a node that is not faulty (the node controller takes the pods of
        a NotReady node out of their Services; until it has, they are not counted either)."""
        ok = self.pod_ready and self.report is not None and self.report.state == State.READY
        return ok and self.node_fault is None

    @property
    def failed(self) -> bool:
        return self.report is not None and self.report.state == State.FAILED

    @property
    def resolved_key(self) -> tuple[str | None, bool, str] | None:
        """What this pod says about its pipeline, or None while it says nothing yet."""
        r = self.report
        if r is None or (r.state == State.LOADING and r.pipeline.resolved is None):
            return None
        p = r.pipeline
        return (p.resolved.value if p.resolved else None, p.fallback, p.reason.value)


@dataclasses.dataclass(frozen=True)
class ApplyError:
    """Applying `generation` did not happen: the apiserver refused a child (4xx, ApplyFailed), the tenant
    policy denied the spec (PolicyDenied), or a child's name is taken by a foreign object (NameConflict)."""

    generation: int | None
    code: int
    target: str  # e.g. Deployment/name
    message: str
    reason: str = R.APPLY_FAILED


@dataclasses.dataclass(frozen=True)
class Facts:
    name: str
    namespace: str
    generation: int | None
    spec: api.LLMServingSpec | None
    spec_error: str = ""
    pods: tuple[PodFacts, ...] = ()
    replica_failure: str | None = None  # the Deployment's ReplicaFailure message
    apply_error: ApplyError | None = None
    missing_children: tuple[str, ...] = ()  # kinds of children deleted by hand, not re-created yet
    # terminating pods that a node fault or a drain took off their node: (pod name, why: nodes.eviction)
    evicted: tuple[tuple[str, str], ...] = ()
    was_idle: bool = False  # the last status read ScaledToZero or Activating: a start now is an activation

    @property
    def scales_to_zero(self) -> bool:
        return self.spec is not None and self.spec.scales_to_zero

    @property
    def current(self) -> list[PodFacts]:
        return [p for p in self.pods if p.current]

    @property
    def previous(self) -> list[PodFacts]:
        return [p for p in self.pods if not p.current]

    @property
    def requested(self) -> api.PipelineType:
        return self.spec.pipelineType if self.spec else api.PipelineType.AUTO

    @property
    def pinned_cb(self) -> bool:
        return self.requested in CB_PIPELINES

    @property
    def desired(self) -> int:
        return self.spec.replicas if self.spec else 0

    @property
    def ready_replicas(self) -> int:
        return sum(1 for p in self.current if p.ready)

    @property
    def speaking(self) -> list[PodFacts]:
        """Current pods that say which pipeline they run. For a pinned *_CB a legacy answer is not
        taken as the spec's pipeline (the runtime never gives one; the status must never show one)."""
        out = [p for p in self.current if p.resolved_key is not None]
        if self.pinned_cb:
            out = [p for p in out if not p.resolved_key or p.resolved_key[0] in (None, *CB_PIPELINES)]
        return out

    @property
    def disagree(self) -> bool:
        return len({p.resolved_key for p in self.speaking}) > 1

    @property
    def source(self) -> str:
        """The model source as the user wrote it, for messages."""
        m = self.spec.model if self.spec else None
        if m is None:
            return "the model"
        if m.hostPath is not None:
            return f"hostPath {m.hostPath.path}"
        if m.pvc is not None:
            return f"claim {m.pvc.claimName}" + (f" path {m.pvc.path}" if m.pvc.path else "")
        if m.huggingFace is not None:
            return f"huggingFace {m.huggingFace.repo}@{m.huggingFace.revision}"
        return "the model"

    @property
    def draft_source(self) -> str:
        """The speculative draft's hostPath as the user wrote it, for messages."""
        sp = self.spec.speculative if self.spec else None
        host = sp.draftModel.hostPath if sp is not None and sp.draftModel is not None else None
        return f"draft model hostPath {host.path}" if host is not None else "the draft model"

    @property
    def why_unresolved(self) -> str:
        """Why no current pod says its pipeline yet (reason of PipelineResolved/Fallback Unknown): the
        Ready reason when it names a Pending or Failed cause, else Loading."""
        _, reason, _ = evaluate(READY_CHAIN, self)
        said = (api.Phase.PENDING, api.Phase.FAILED, api.Phase.SCALED_TO_ZERO, api.Phase.ACTIVATING)
        return reason if R.phase_of("False", reason) in said else R.LOADING_REASON


def _ts(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _one(pods: Sequence[PodFacts]) -> PodFacts | None:
    return min(pods, key=lambda p: p.name) if pods else None


def disagreement(pods: Sequence[PodFacts]) -> str:
    parts = []
    for p in sorted(pods, key=lambda p: p.name):
        if (key := p.resolved_key) is None:
            continue
        resolved, fallback, reason = key
        state = p.report.state.value if p.report else "?"
        parts.append(f"{p.name}: {resolved or '-'} ({reason}{', fallback' if fallback else ''}; {state})")
    return "pods disagree: " + "; ".join(parts)


# ============================================================================ Ready rules


def spec_invalid(f: Facts) -> Finding | None:
    return (R.INVALID_SPEC, f.spec_error or "invalid spec") if f.spec is None else None


def apply_refused(f: Facts) -> Finding | None:
    e = f.apply_error
    if e is None or e.generation != f.generation:
        return None
    if e.reason != R.APPLY_FAILED:  # the operator's own refusal: its message names the cause
        return e.reason, e.message
    return R.APPLY_FAILED, f"the apiserver refused {e.target} (HTTP {e.code}): {e.message}"


def child_missing(f: Facts) -> Finding | None:
    if not f.missing_children:
        return None
    kinds = " and ".join(f"{k} {f.name}" for k in f.missing_children)
    return R.CHILD_MISSING, f"{kinds} missing (deleted?): the operator re-creates it"


def scaled_to_zero(f: Facts) -> Finding | None:
    if f.desired != 0:
        return None
    if not f.scales_to_zero:
        return R.SCALED_TO_ZERO, "spec.replicas is 0"
    idle = f.spec.autoscaling.idleSeconds if f.spec and f.spec.autoscaling else 0
    return (
        R.SCALED_TO_ZERO,
        f"idle: KEDA scaled it to zero after {idle}s without demand (autoscaling.minReplicas 0); the gateway holds "
        "the next request and KEDA brings a replica back for it",
    )


# the kubelet's waiting reasons of a pod that is just starting: Activating covers them; any other (an image pull
# failing, a config error) is named by container_waiting instead
_STARTING = frozenset({R.CONTAINER_CREATING, R.POD_INITIALIZING})


def activating(f: Facts) -> Finding | None:
    """A serving that was at zero starts its first replica again: Activating, not Loading. Failures, an
    unschedulable pod and a waiting reason other than a normal start are named by their own rules instead."""
    if not (f.scales_to_zero and f.was_idle and f.ready_replicas == 0 and f.desired > 0):
        return None
    if any(p.waiting is not None and p.waiting[0] not in _STARTING for p in f.current):
        return None
    return (
        R.ACTIVATING,
        f"demand at zero replicas: KEDA scaled to {f.desired}; 0/{f.desired} replicas ready, the gateway holds the "
        "requests until one is",
    )


def failure_of(f: Facts, p: PodFacts) -> Finding | None:
    """Why one pod of the current spec fails (not ready), if it does: OOM kill, a failed report, a kubelet
    reason that waiting will not resolve."""
    if p.ready:
        return None
    if (problem := p.node_problem) is not None:
        return R.NODE_NOT_READY, f"{p.name}: {problem}"
    if p.oom_limit is not None:
        return R.OOM_KILLED, (
            f"{p.name}: the runtime was killed for memory (OOMKilled; memory limit {p.oom_limit}): raise "
            "spec.resources.limits.memory or lower spec.scheduler.cacheSizeGB"
        )
    if p.failed and p.report is not None:
        reason = p.report.pipeline.reason.value
        return (R.RUNTIME_FAILED if reason in _NOT_A_FAILURE else reason), (
            f"{p.name}: {p.report.pipeline.message or 'the runtime reported failure'}"
        )
    if p.waiting and p.waiting[0] in BROKEN_WAITING:
        return p.waiting[0], f"{p.name}: {p.waiting[1]}".rstrip(": ")
    return None


def degraded(f: Facts) -> Finding | None:
    """Some current pods serve while others fail: Degraded (traffic flows, with fewer replicas), not Failed."""
    if not f.ready_replicas:
        return None
    failing = [(p, found) for p in sorted(f.current, key=lambda p: p.name) if (found := failure_of(f, p))]
    if not failing:
        return None
    reason, message = failing[0][1]
    return R.DEGRADED_REASON, (
        f"{f.ready_replicas}/{f.desired} replicas ready; {len(failing)} failing, first: {reason}: {message}"
    )


def node_not_ready(f: Facts) -> Finding | None:
    """No replica serves and pods of the current spec sit on a faulty node (NotReady, unreachable, gone): the
    node is named, never a model load."""
    on_bad = sorted((p for p in f.current if p.node_fault is not None), key=lambda p: p.name)
    if f.ready_replicas:
        return None
    if on_bad:
        p = on_bad[0]
        return R.NODE_NOT_READY, (
            f"{len(on_bad)} of {len(f.current)} pods on a faulty node, first {p.name}: {p.node_fault}; Kubernetes "
            "evicts them after their toleration of the node's taint and starts replacements on the remaining nodes"
        )
    if marked := _one([p for p in f.current if p.marked_not_ready]):  # the node is back, the kubelet not yet
        return R.NODE_NOT_READY, f"{marked.name}: {marked.node_problem}"
    return None


def rescheduled(f: Facts) -> Finding | None:
    """Pods taken off their node by a node fault or a drain are terminating, and their replacements are not all
    ready yet: the eviction is named (Degraded while some replicas serve), not a plain model load."""
    if not f.evicted:
        return None
    name, why = f.evicted[0]
    starting = sorted(p.name for p in f.current if not p.ready)
    what = f"{name} {why}" + (f" (and {len(f.evicted) - 1} more)" if len(f.evicted) > 1 else "")
    if starting:
        what += f"; replacement {', '.join(starting[:3])} starting"
        if stuck := _one([p for p in f.current if p.unschedulable]):
            what += f" ({stuck.name} unschedulable: {stuck.unschedulable})"
    if f.ready_replicas:
        return R.DEGRADED_REASON, f"{f.ready_replicas}/{f.desired} replicas ready; {what}"
    return R.POD_RESCHEDULED, f"0/{f.desired} replicas ready; {what}"


def oom_killed(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.oom_limit is not None and not p.ready])
    return failure_of(f, p) if p is not None else None


def runtime_failed(f: Facts) -> Finding | None:
    failed = [p for p in f.current if p.failed]
    if not (p := _one(failed)) or p.report is None:
        return None
    reason = p.report.pipeline.reason.value
    reason = R.RUNTIME_FAILED if reason in _NOT_A_FAILURE else reason
    msg = p.report.pipeline.message or "the runtime reported failure"
    if f.pinned_cb and reason == R.PAGED_ATTENTION_NOT_SUPPORTED:
        legacy = f.requested.value.removesuffix("_CB")
        msg = (
            f"pipelineType {f.requested.value} is pinned and the model does not support PagedAttention; it is "
            f"not downgraded (use AUTO or {legacy} to allow the legacy pipeline): {msg}"
        )
    elif reason == R.MODEL_NOT_FOUND:
        msg = f"{f.source}: {msg}"
    return reason, f"{len(failed)} pod(s) failed: {msg}"


def model_missing(f: Facts) -> Finding | None:
    """A missing claim (scheduler), hostPath (kubelet mount Event) or subPath (kubelet waiting)."""
    for p in sorted(f.current, key=lambda p: p.name):
        if claim := podview.missing_claim(p.unschedulable):
            return (
                R.MODEL_NOT_FOUND,
                f'claim "{claim}" not found in namespace {f.namespace} ({f.source}): {p.unschedulable}',
            )
        if p.mount_failure and "hostPath type check failed" in p.mount_failure:
            # the draft's volume is mounted `Directory` too (render.draft_volume): name the one that is missing
            source = f.draft_source if f'volume "{DRAFT_VOLUME}"' in p.mount_failure else f.source
            return (
                R.MODEL_NOT_FOUND,
                f"{source} does not exist on the node (or is not a directory): {p.mount_failure}",
            )
        if p.waiting and p.waiting[0] in BROKEN_WAITING and "subPath" in p.waiting[1]:
            return R.MODEL_NOT_FOUND, f"{f.source}: {p.name}: {p.waiting[1]}"
    return None


def volume_mount_failed(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.mount_failure])
    return (R.VOLUME_MOUNT_FAILED, f"{p.name}: {p.mount_failure}") if p else None


def download_failed(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.init.phase == InitPhase.FAILED])
    if p is None:
        return None
    tries = f" ({p.init.restarts + 1} attempts)" if p.init.restarts else ""
    return R.MODEL_DOWNLOAD_FAILED, f"{p.name}: {f.source}{tries}: {p.init.message}"


def init_broken(f: Facts) -> Finding | None:
    """An init container the kubelet cannot start (e.g. its token Secret is missing): its reason."""
    p = _one([p for p in f.current if p.init.phase == InitPhase.WAITING and p.init.reason in BROKEN_WAITING])
    return (p.init.reason, f"{p.name}: init container model-download: {p.init.message}") if p else None


def container_broken(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.waiting and p.waiting[0] in BROKEN_WAITING])
    if p is None or p.waiting is None:
        return None
    return p.waiting[0], f"{p.name}: {p.waiting[1]}".rstrip(": ")


def all_ready(f: Facts) -> Finding | None:
    if f.ready_replicas >= f.desired and not f.disagree:
        return R.ALL_REPLICAS_READY, f"{f.ready_replicas}/{f.desired} replicas ready"
    return None


def readback_failed(f: Facts) -> Finding | None:
    """Pods Ready by their probes whose /v1/status stayed unreadable beyond the grace. No "since" in the
    message: it would be this leader's own first failed read, and a new leader would rewrite every such
    status with its own (the condition's lastTransitionTime tells since when, and survives a failover)."""
    p = _one([p for p in f.current if p.container_ready and p.report is None and p.readback_error])
    if p is None:
        return None
    return R.READBACK_FAILED, f"{p.name} is Ready but its report cannot be read: {p.readback_error}"


def pods_refused(f: Facts) -> Finding | None:
    if f.current or not f.replica_failure:
        return None
    return R.FAILED_CREATE, f"the Deployment cannot create runtime pods: {f.replica_failure}"


def unschedulable(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.unschedulable])
    if p is None or f.ready_replicas:
        return None
    return R.UNSCHEDULABLE, p.unschedulable or ""


def no_pods(f: Facts) -> Finding | None:
    if f.current:
        return None
    return R.PODS_NOT_CREATED, "waiting for the Deployment to create pods of the current spec"


def downloading(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.init.phase == InitPhase.RUNNING])
    if p is None:
        return None
    again = f" (attempt {p.init.restarts + 1})" if p.init.restarts else ""
    return R.MODEL_DOWNLOADING, f"{p.name}: downloading {f.source}{again}"


def init_waiting(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.init.phase == InitPhase.WAITING and p.init.reason])
    return (p.init.reason, f"{p.name}: init container model-download: {p.init.message}".rstrip(": ")) if p else None


def container_waiting(f: Facts) -> Finding | None:
    p = _one([p for p in f.current if p.waiting])
    if p is None or p.waiting is None or f.ready_replicas:
        return None
    return p.waiting[0], f"{p.name}: {p.waiting[1]}".rstrip(": ")


def pods_disagree(f: Facts) -> Finding | None:
    return (R.PODS_DISAGREE, disagreement(f.speaking)) if f.disagree else None


def loading(f: Facts) -> Finding | None:
    msg = f"{f.ready_replicas}/{f.desired} replicas ready"
    if stuck := [p for p in f.current if p.unschedulable]:
        msg += f"; {len(stuck)} unschedulable: {stuck[0].unschedulable}"
    if unread := _one([p for p in f.current if p.readback_error and p.report is None]):
        # since when, as this leader measured it: a pod loading is written again soon anyway (unlike a
        # persistent ReadbackFailed, whose message therefore carries no time)
        since = f" (since {_ts(unread.failing_since)})" if unread.failing_since else ""
        msg += f"; {unread.name}: {unread.readback_error}{since}"
    return R.LOADING_REASON, msg


READY_CHAIN: Chain = (
    (FALSE, spec_invalid),
    (FALSE, apply_refused),
    (FALSE, child_missing),
    (FALSE, scaled_to_zero),
    (FALSE, degraded),
    (FALSE, node_not_ready),
    (FALSE, oom_killed),
    (FALSE, runtime_failed),
    (FALSE, model_missing),
    (FALSE, volume_mount_failed),
    (FALSE, download_failed),
    (FALSE, init_broken),
    (FALSE, container_broken),
    (TRUE, all_ready),
    (FALSE, rescheduled),
    (UNKNOWN, readback_failed),
    (FALSE, pods_refused),
    (FALSE, unschedulable),
    (FALSE, activating),
    (FALSE, no_pods),
    (FALSE, downloading),
    (FALSE, init_waiting),
    (FALSE, container_waiting),
    (FALSE, pods_disagree),
    (FALSE, loading),  # always answers
)


# ============================================================================ PipelineResolved rules


def spec_unknown(f: Facts) -> Finding | None:
    return (R.INVALID_SPEC, f.spec_error or "invalid spec") if f.spec is None else None


def pipeline_failed(f: Facts) -> Finding | None:
    p = _one([p for p in f.speaking if p.failed])
    if p is None or p.report is None:
        return None
    return p.report.pipeline.reason.value, p.report.pipeline.message


def pipeline_resolved(f: Facts) -> Finding | None:
    p = _one(f.speaking)
    if p is None or p.report is None or p.report.pipeline.resolved is None:
        return None
    return p.report.pipeline.reason.value, p.report.pipeline.message or f"running {p.report.pipeline.resolved.value}"


def not_resolved(f: Facts) -> Finding | None:
    return f.why_unresolved, "no pod of the current spec has resolved its pipeline yet"


PIPELINE_RESOLVED_CHAIN: Chain = (
    (UNKNOWN, spec_unknown),
    (FALSE, pods_disagree),
    (FALSE, pipeline_failed),
    (TRUE, pipeline_resolved),
    (UNKNOWN, not_resolved),
)


# ============================================================================ Fallback rules


def pinned_cb(f: Facts) -> Finding | None:
    """A pinned *_CB never falls back: False whatever the pods do (running CB or refused)."""
    if not f.pinned_cb:
        return None
    p = _one([p for p in f.speaking if p.report and p.report.pipeline.resolved in CB_PIPELINES])
    if p is not None and not f.disagree:
        return R.CONTINUOUS_BATCHING, f"running the {f.requested.value} pipeline as pinned"
    return R.PINNED_PIPELINE, f"pipelineType {f.requested.value} is pinned: never downgraded"


def fell_back(f: Facts) -> Finding | None:
    fb = [p for p in f.speaking if p.resolved_key and p.resolved_key[1]]
    if not (p := _one(fb)) or p.report is None:
        return None
    pl = p.report.pipeline
    resolved = pl.resolved.value if pl.resolved else "-"
    some = f"{len(fb)} of {len(f.speaking)} pods: " if f.disagree else ""
    return pl.reason.value, f"{some}requested {f.requested.value}, running {resolved}: {pl.message}"


def fallback_disagree(f: Facts) -> Finding | None:
    return (R.PODS_DISAGREE, f"no pod fell back; {disagreement(f.speaking)}") if f.disagree else None


def no_fallback(f: Facts) -> Finding | None:
    p = _one(f.speaking)
    if p is None or p.report is None or p.report.pipeline.resolved is None:
        return None
    return p.report.pipeline.reason.value, f"running the {p.report.pipeline.resolved.value} pipeline"


def fallback_unknown(f: Facts) -> Finding | None:
    return f.why_unresolved, "no pod of the current spec has resolved its pipeline yet"


FALLBACK_CHAIN: Chain = (
    (UNKNOWN, spec_unknown),
    (FALSE, pinned_cb),
    (TRUE, fell_back),
    (FALSE, fallback_disagree),
    (FALSE, no_fallback),
    (UNKNOWN, fallback_unknown),
)

# --------------------------------------------------------------------------- Speculative (with spec.speculative)
# decided from status.speculative (status.speculative_status: what the current pods told)


def speculative_unsaid(sp: api.SpeculativeStatus) -> Finding | None:
    return (R.LOADING_REASON, "no pod of this spec has said yet") if sp.resolved is None else None


def speculative_fell_back(sp: api.SpeculativeStatus) -> Finding | None:
    return (sp.reason, sp.message or "") if sp.fallback else None


def speculative_runs(sp: api.SpeculativeStatus) -> Finding:
    return sp.reason, f"{sp.resolved} runs"


SPECULATIVE_CHAIN: ChainOf[api.SpeculativeStatus] = (
    (UNKNOWN, speculative_unsaid),
    (FALSE, speculative_fell_back),
    (TRUE, speculative_runs),
)

READY, PIPELINE_RESOLVED, FALLBACK = "Ready", "PipelineResolved", "Fallback"  # condition types

CHAINS: dict[str, Chain] = {  # in this order in status.conditions
    READY: READY_CHAIN,
    PIPELINE_RESOLVED: PIPELINE_RESOLVED_CHAIN,
    FALLBACK: FALLBACK_CHAIN,
}


def evaluate(chain: ChainOf[T], facts: T) -> tuple[api.ConditionStatus, str, str]:
    """(status, reason, message) of the first rule that answers."""
    for status, rule in chain:
        if (found := rule(facts)) is not None:
            return status, found[0], found[1]
    raise AssertionError("a chain must end with a rule that always answers")
