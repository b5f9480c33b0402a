"""Reasoning controls (issue 37): the thinking switch found in chat templates, efforts mapped onto it, and the
bounds of chat_template_kwargs."""

from __future__ import annotations

import json

import pytest
from ovserve_runtime.openai.request import RequestError, parse
from ovserve_runtime.openai.thinking import ThinkingError, detect_switch, template_kwargs

QWEN3 = (
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)
DEEPSEEK = "{% if not thinking is defined %}{% set thinking = false %}{% endif %}{% if thinking %}<think>{% endif %}"
PLAIN = "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.mark.parametrize(
    ("template", "switch"),
    [(QWEN3, "enable_thinking"), (DEEPSEEK, "thinking"), (PLAIN, None), (None, None), ("I am thinking of you", None)],
)
def test_the_switch_is_found_in_the_template(template, switch):
    assert detect_switch(template) == switch


@pytest.mark.parametrize(
    ("default", "switch", "effort", "explicit", "expected"),
    [
        ({}, "enable_thinking", None, None, {}),
        ({}, "enable_thinking", "none", None, {"enable_thinking": False}),
        ({}, "enable_thinking", "minimal", None, {"enable_thinking": False}),
        ({}, "enable_thinking", "low", None, {"enable_thinking": True}),
        ({}, "thinking", "xhigh", None, {"thinking": True}),
        ({"enable_thinking": False}, "enable_thinking", None, None, {"enable_thinking": False}),  # serving default
        ({"enable_thinking": False}, "enable_thinking", "high", None, {"enable_thinking": True}),  # effort over it
        ({"enable_thinking": False, "x": 1}, None, None, {"enable_thinking": True}, {"enable_thinking": True, "x": 1}),
        ({}, "enable_thinking", "high", {"enable_thinking": True}, {"enable_thinking": True}),
    ],
)
def test_efforts_and_kwargs_become_template_variables(default, switch, effort, explicit, expected):
    assert template_kwargs(default, switch, effort, explicit) == expected


@pytest.mark.parametrize(
    ("switch", "effort", "explicit", "says"),
    [
        (None, "high", None, "no thinking switch"),
        ("enable_thinking", "none", {"enable_thinking": True}, "contradicts"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(switch, effort, explicit, says):
    with pytest.raises(ThinkingError, match=says) as exc:
        template_kwargs({}, switch, effort, explicit, effort_param="reasoning.effort")
    assert exc.value.param == "reasoning.effort"


@pytest.mark.parametrize(
    ("kwargs", "ok"),
    [
        ({"enable_thinking": False}, True),
        ({"a": {"nested": [1, 2]}}, True),
        ({f"k{i}": 1 for i in range(17)}, False),
        ({"not a name": 1}, False),
        ({"big": "x" * 5000}, False),
    ],
)
def test_chat_template_kwargs_are_bounded(kwargs, ok):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": kwargs}).encode()
    if ok:
        assert parse(body, True).chat_template_kwargs == kwargs
    else:
        with pytest.raises(RequestError) as exc:
            parse(body, True)
        assert exc.value.param == "chat_template_kwargs"
