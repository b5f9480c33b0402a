"""The generation engine: a core that owns a pipeline and steps it, and a client the HTTP layer talks to, joined
by one of two transports (in the manner of vLLM V1's EngineCore and EngineCoreClient).

request    GenRequest, the events that answer it (Events, deliver), EngineError
pipelines  SchedulerOptions and the construction of the CB and legacy pipelines
core       CBCore (add_request/step loop) and LegacyCore (one generate() at a time): own the pipeline, run on a
           thread of their own with no event loop, and push their events into an Outbox; counters, speculative
           counts, the fatal path
client     EngineClient: the one interface of the HTTP side (submit, cancel, gauges, start/stop/smoke,
           new_config/speculate, speculation counts, the decision record)
inprocess  InProcessClient + LoopSink: the core in this process, a step's events to the event loop in one call
process    ProcessClient + PipeSink: the CB core in an engine-core child, a step's events as one pipe message
wire       what crosses that pipe

          HTTP layer ── EngineClient ─┬─ InProcessClient ── core (CBCore | LegacyCore) ── LoopSink ──▶ event loop
                                      └─ ProcessClient ══ pipe ══ child: CBCore ── PipeSink ══ pipe ══▶ event loop
"""

from .client import EngineClient
from .pipelines import SchedulerOptions, construct_cb, construct_legacy
from .request import EngineError, Events, GenRequest, Tokens, deliver, with_logprobs

__all__ = [
    "EngineClient",
    "EngineError",
    "Events",
    "GenRequest",
    "SchedulerOptions",
    "Tokens",
    "construct_cb",
    "construct_legacy",
    "deliver",
    "with_logprobs",
]
