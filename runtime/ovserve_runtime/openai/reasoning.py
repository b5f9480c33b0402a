"""Reasoning in model output: `<think>...</think>` split off into `reasoning_content`, streamed and not.

Pure: no openvino, no I/O. Two parsers, as vLLM and OpenVINO GenAI name them:

- `qwen3`: the output may open with `<think>` (Qwen3, QwQ); text before `</think>` is reasoning, the rest
  content. An output that does not open with `<think>` is all content (Qwen3 with thinking switched off).
- `deepseek_r1`: the output starts inside the reasoning whether or not it writes `<think>` (DeepSeek-R1,
  whose template may open the block itself); everything up to `</think>` is reasoning.

Either way, when the prompt itself ends with `<think>` (the chat template opened the block, as Qwen3
Thinking-2507's and DeepSeek-R1's do) the output starts inside the reasoning (`starts_in_reasoning`).
An output cut before `</think>` is all reasoning: with a parser on, thinking never leaks into content.
Whitespace around the markers is trimmed (`<think>\\n...\\n</think>\\n\\n` gives bare text on both sides).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from .textstream import TrimmedText, hold_back

OPEN, CLOSE = "<think>", "</think>"
PARSERS = ("qwen3", "deepseek_r1")


class Split(NamedTuple):
    """Reasoning and content of an output (or of one delta); None where there is none."""

    reasoning: str | None
    content: str | None


def detect(chat_template: str | None) -> str | None:
    """The reasoning parser a chat template calls for, or None: a template that writes `<think>` (Qwen3,
    QwQ, Qwen3 Thinking) gets `qwen3`; one that only strips `</think>` from past turns (DeepSeek-R1, which
    always thinks) gets `deepseek_r1`."""
    if not chat_template:
        return None
    if OPEN in chat_template:
        return "qwen3"
    if CLOSE in chat_template:
        return "deepseek_r1"
    return None


def starts_in_reasoning(parser: str, prompt: str) -> bool:
    """Whether the output of this prompt starts inside the reasoning block."""
    if parser not in PARSERS:
        raise ValueError(f"unknown reasoning parser {parser!r}")
    return parser == "deepseek_r1" or prompt.rstrip().endswith(OPEN)


class _State(Enum):
    START = 0  # before the first non-whitespace text: may open with <think>
    REASONING = 1
    CONTENT = 2


class ReasoningStream:
    """Splits a stream of text deltas into reasoning and content deltas (`feed`, then `finish` once)."""

    def __init__(self, *, in_reasoning: bool) -> None:
        self._state = _State.REASONING if in_reasoning else _State.START
        self._may_open = True  # a leading <think> is skipped even when the template opened the block
        self._buf = ""
        self._lead: list[str] = []  # leading whitespace while the output may still open <think>: pieces
        self._reasoning = TrimmedText(strip_start=True)
        self._content = TrimmedText(strip_start=in_reasoning)

    def feed(self, text: str) -> Split:
        self._buf += text
        reasoning, content = [], []
        while self._buf:
            if self._state is _State.CONTENT:
                content.append(self._content.add(self._buf))
                self._buf = ""
            elif self._may_open and self._pending_open():
                break
            elif self._state is _State.START:
                # not opened with <think>: all content, as it came (leading whitespace included)
                self._state = _State.CONTENT
            else:  # REASONING
                end = self._buf.find(CLOSE)
                if end < 0:
                    keep = hold_back(self._buf, CLOSE)
                    reasoning.append(self._reasoning.add(self._buf[: len(self._buf) - keep]))
                    self._buf = self._buf[len(self._buf) - keep :]
                    break
                reasoning.append(self._reasoning.add(self._buf[:end]))
                self._reasoning.cut()
                self._buf = self._buf[end + len(CLOSE) :]
                self._state = _State.CONTENT
                self._content.cut()
        return Split("".join(reasoning) or None, "".join(content) or None)

    def _pending_open(self) -> bool:
        """At the start: consume a leading <think> (True when the text so far may still become one). Leading
        whitespace is held as pieces (not re-stripped on every delta: linear however long it runs)."""
        stripped = self._buf.lstrip()
        if not stripped:
            self._lead.append(self._buf)
            self._buf = ""
            return True
        if stripped.startswith(OPEN):
            self._buf, self._lead = stripped[len(OPEN) :], []
            self._state = _State.REASONING
            self._may_open = False
            return False
        if OPEN.startswith(stripped):
            return True
        self._may_open = False
        self._buf, self._lead = "".join(self._lead) + self._buf, []
        return False

    def finish(self) -> Split:
        """The rest, at the end of the output: held text goes where its state says (an unterminated
        reasoning block stays reasoning)."""
        buf, self._buf, self._lead = "".join(self._lead) + self._buf, "", []
        if self._state is _State.START:
            self._state = _State.CONTENT
        if self._state is _State.REASONING:
            # a cut `</thi` is reasoning text; trailing whitespace of a cut block is dropped
            reasoning = self._reasoning.add(buf)
            return Split(reasoning or None, None)
        content = self._content.add(buf) + self._content.finish()
        return Split(None, content or None)


def split(text: str, *, in_reasoning: bool) -> Split:
    """The reasoning and content of a whole output (the same as streaming it in any pieces)."""
    stream = ReasoningStream(in_reasoning=in_reasoning)
    a, b = stream.feed(text), stream.finish()
    reasoning = (a.reasoning or "") + (b.reasoning or "")
    content = (a.content or "") + (b.content or "")
    return Split(reasoning or None, content or None)
