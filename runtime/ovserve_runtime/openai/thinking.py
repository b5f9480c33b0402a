"""Reasoning controls: `reasoning_effort` (chat), `reasoning.effort` (responses) and `chat_template_kwargs`, as the
variables the model's chat template is rendered with.

A template with a thinking switch reads a variable: Qwen3 and SmolLM3 `enable_thinking`, DeepSeek-V3.1
`thinking`. `detect_switch` finds it in the template source. An effort maps onto it: `none` and `minimal` turn
thinking off, the others on (openvino-genai 2026.4 has no thinking-token budget, so low, medium, high and
xhigh think alike: documented). A template without a switch cannot honour an effort: 400 naming the field.

`chat_template_kwargs` are passed to the template as they are (bounded: MAX_KWARGS keys, MAX_KWARGS_BYTES of
JSON); the serving's default (--chat-template-kwargs, spec.serving.chatTemplateKwargs) comes first, the request
overrides it key by key. An effort that contradicts the request's own value for the switch is refused.

Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..report import Decision, Source

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
OFF_EFFORTS = ("none", "minimal")
MAX_KWARGS = 16
MAX_KWARGS_BYTES = 4096
KWARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# switch variables, most specific first: the template must read the variable, not only mention the word
_SWITCHES = (
    ("enable_thinking", re.compile(r"\benable_thinking\b")),
    ("thinking", re.compile(r"\bthinking\s+is\s+(?:not\s+)?defined\b|\bif\s+(?:not\s+)?thinking\b")),
)


class ThinkingError(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def detect_switch(chat_template: str | None) -> str | None:
    """The template variable that turns thinking on and off, or None."""
    for name, pattern in _SWITCHES:
        if chat_template and pattern.search(chat_template):
            return name
    return None


def template_kwargs(
    default: dict[str, Any],
    switch: str | None,
    effort: str | None,
    explicit: dict[str, Any] | None,
    effort_param: str = "reasoning_effort",
) -> dict[str, Any]:
    """The variables one request renders its template with (ThinkingError naming the field)."""
    out = dict(default)
    if effort is not None:
        if switch is None:
            raise ThinkingError(
                f"{effort_param} {effort!r}: this model's chat template has no thinking switch "
                "(enable_thinking or thinking), so reasoning cannot be turned on or off",
                effort_param,
            )
        on = effort not in OFF_EFFORTS
        mine = (explicit or {}).get(switch)
        if mine is not None and bool(mine) != on:
            raise ThinkingError(
                f"{effort_param} {effort!r} contradicts chat_template_kwargs.{switch}={mine!r}", effort_param
            )
        out[switch] = on
    out.update(explicit or {})
    return out


def decision(default: dict[str, Any], switch: str | None) -> dict[str, Decision]:
    """The serving's template variables as an entry of the decision record (chatTemplateKwargs)."""
    detail = (
        f"thinking switch: {switch}"
        if switch
        else "no thinking switch in the chat template: reasoning_effort is refused"
    )
    return {
        "chatTemplateKwargs": Decision(
            value=json.dumps(default, sort_keys=True) if default else "none",
            source=Source.REQUESTED if default else Source.AUTOMATIC,
            requested=json.dumps(default, sort_keys=True) if default else None,
            detail=detail,
        )
    }
