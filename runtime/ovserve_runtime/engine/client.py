"""The engine client: the one interface the HTTP layer, the loader and the metrics use to generate.

Two implementations, one per transport, each composing a core (core.py) rather than specialising one:
inprocess.InProcessClient holds the core in this process and hands its events to the event loop through a
LoopSink; process.ProcessClient holds the pipe to an engine-core child process, which holds the core and
writes each step's events to the pipe (a PipeSink). What the HTTP side needs is here, whichever runs:
submit, cancel, preparing (burst gathering), attach (the event loop), the gauges (waiting, running, KV cache),
start/stop, the smoke generation, the speculative mode and its counts, and the decision record (`observed`,
`speculative`, filled in by the loader).

The generation config of every request is built here (new_config, speculate), on the HTTP side, from the
pipeline's base config and the speculative fields of the running mode; it crosses to the core as it is (in
process) or as plain values (process.config_to_dict).
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ..report import PipelineType
from .request import EngineError, GenRequest


class EngineClient(abc.ABC):
    """The HTTP layer's view of a generation engine, whichever transport carries it."""

    continuous_batching: bool
    in_process: bool  # the pipeline runs in this process (not in an engine-core child)

    def __init__(self, kind: PipelineType, tokenizer: Any, capacity: int) -> None:
        self.kind = kind  # the resolved PipelineType
        self.is_vlm = kind in (PipelineType.VLM, PipelineType.VLM_CB)
        self.tokenizer = tokenizer
        self.capacity = capacity  # requests generating at once (CB: max_num_seqs, legacy: 1)
        self.on_fatal: Callable[[str], None] | None = None  # the server's: the pipeline broke (any thread)
        self.token_table = None  # detok.TokenTable, built by the loader
        # the decision record's engine part, set by the loader
        self.observed = None  # decisions.Observed, read back after the smoke generation
        self.speculative = None  # report.SpeculativeReport
        self.speculation: dict[str, Any] = {}  # GenerationConfig fields of the running speculative mode
        self.spec_counted = False  # a draft proposing a fixed number: proposed tokens are known

    # --- the transport ---------------------------------------------------------------------------
    @abc.abstractmethod
    def base_config(self) -> Any:
        """What new_config copies from the pipeline's generation config (eos_token_id, stop_token_ids)."""

    @property
    @abc.abstractmethod
    def fatal(self) -> str | None:
        """Why the pipeline failed while serving, or None."""

    @property
    @abc.abstractmethod
    def waiting(self) -> int: ...

    @property
    @abc.abstractmethod
    def running(self) -> int: ...

    @property
    @abc.abstractmethod
    def step_s(self) -> float | None:
        """A moving average of the step time, where known (the progress watchdog scales with it)."""

    @abc.abstractmethod
    def cache_usage(self) -> float | None:
        """KV-cache usage in percent; None where there is no figure (legacy, a broken engine)."""

    @abc.abstractmethod
    def cache_bytes(self) -> int | None:
        """KV-cache bytes allocated (continuous batching: PipelineMetrics.cache_size_in_bytes)."""

    @abc.abstractmethod
    def speculation_counts(self) -> tuple[int, int, int]:
        """(decode steps, proposed, accepted) of speculating requests so far."""

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop: requests submitted from it get their events delivered there in batches."""

    @abc.abstractmethod
    def preparing(self, count: int) -> None:
        """The server admitted requests it has not submitted yet (`count`); a core that gathers a burst before
        its first prefill waits for them (the engine-core process does)."""

    @abc.abstractmethod
    def submit(self, req: GenRequest) -> None:
        """Take a request (numbering it); raises EngineError once the pipeline has failed."""

    @abc.abstractmethod
    def cancel(self, req: GenRequest) -> None:
        """From the event loop when the client went away: the core frees the slot between steps."""

    # --- generation config, on the HTTP side ---------------------------------------------------
    def new_config(self):
        import openvino_genai as g

        base = self.base_config()
        c = g.GenerationConfig()
        c.eos_token_id = base.eos_token_id
        c.stop_token_ids = set(base.stop_token_ids)
        c.apply_chat_template = False  # the server applies the chat template itself
        for k, v in self.speculation.items():  # openvino-genai needs them on every request of a speculating pipeline
            setattr(c, k, v)
        return c

    def set_speculation(self, fields: dict[str, Any], counted: bool) -> None:
        """The speculative mode that runs: its GenerationConfig fields (speculative.SpeculativeConfig)."""
        self.speculation, self.spec_counted = dict(fields), counted

    def speculate(self, config, num_assistant_tokens: int | None) -> str | None:
        """Apply a request's num_assistant_tokens; the reason it cannot be honoured, or None."""
        if num_assistant_tokens is None:
            return None
        if "num_assistant_tokens" not in self.speculation:
            if "assistant_confidence_threshold" in self.speculation:
                return "this serving's draft proposes by confidence (--assistant-confidence-threshold), not by count"
            return "speculative decoding does not run on this serving (/v1/status speculative)"
        config.num_assistant_tokens = num_assistant_tokens
        return None

    def smoke(self, timeout: float = 300) -> None:
        """One-token generation through the real serving path (readiness requires it)."""
        done = threading.Event()
        result: dict[str, Any] = {}

        def on_event(kind: str, value: Any) -> None:
            if kind != "tokens":
                result[kind] = value
                done.set()

        cfg = self.new_config()
        cfg.max_new_tokens = 1
        cfg.ignore_eos = True
        if self.is_vlm:
            req = GenRequest(config=cfg, max_new_tokens=1, prompt="hello", on_event=on_event)
        else:
            ids = self.tokenizer.encode("hello").input_ids
            req = GenRequest(config=cfg, max_new_tokens=1, input_ids=ids, on_event=on_event)
        self.submit(req)
        if not done.wait(timeout):
            raise EngineError("smoke generation timed out")
        if "error" in result:
            raise EngineError(result["error"])
