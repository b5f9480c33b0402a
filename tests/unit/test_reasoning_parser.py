"""The reasoning parser (ovserve_runtime.openai.reasoning): `<think>` blocks split into reasoning and
content, the same streamed in any pieces as whole; with a parser on, thinking never reaches content."""

from __future__ import annotations

import itertools
import random

import pytest
from ovserve_runtime.openai import reasoning
from ovserve_runtime.openai.reasoning import Split

# (starts in reasoning, output, reasoning, content)
CASES = [
    # Qwen3: the model opens the block
    (False, "<think>\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
    (False, "  <think>a</think>b", "a", "b"),
    (False, "<think>\n\n</think>\n\nParis.", None, "Paris."),  # empty thinking (enable_thinking off)
    (False, "Paris.", None, "Paris."),  # no block: all content
    (False, "\nParis. <think>x</think>", None, "\nParis. <think>x</think>"),  # a block later is not reasoning
    (False, "<think>cut at max_tok", "cut at max_tok", None),  # never closed: all reasoning
    (False, "<think>cut </thi", "cut </thi", None),
    (False, "<thin", None, "<thin"),
    (False, "", None, None),
    (False, "<think>a</think>", "a", None),
    (False, "<think>a</think>b</think>c", "a", "b</think>c"),
    # the template opened the block (Qwen3 Thinking-2507, DeepSeek-R1)
    (True, "Let me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
    (True, "<think>\nLet me see.</think>Paris.", "Let me see.", "Paris."),  # the model repeats <think>
    (True, "all thinking, cut", "all thinking, cut", None),
    (True, "</think>Paris.", None, "Paris."),
    (True, "a\n\n b </think>\n c \n", "a\n\n b", "c \n"),
    (True, "", None, None),
]


@pytest.mark.parametrize(("opened", "text", "want_reasoning", "want_content"), CASES)
def test_split_whole_output(opened, text, want_reasoning, want_content):
    assert reasoning.split(text, in_reasoning=opened) == Split(want_reasoning, want_content)


@pytest.mark.parametrize(("opened", "text", "want_reasoning", "want_content"), CASES)
def test_any_split_streams_what_split_gives(opened, text, want_reasoning, want_content):
    rng = random.Random(text)
    splits = [[text], list(text)]
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), rng.randint(1, 5))))
        splits.append([text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])])
    for pieces in splits:
        stream = reasoning.ReasoningStream(in_reasoning=opened)
        out = [stream.feed(p) for p in pieces] + [stream.finish()]
        got_r = "".join(s.reasoning or "" for s in out) or None
        got_c = "".join(s.content or "" for s in out) or None
        assert (got_r, got_c) == (want_reasoning, want_content), pieces
        # a delta never carries an empty string, and no delta carries <think> markers into content
        assert all(s.reasoning != "" and s.content != "" for s in out)


def test_reasoning_streams_while_it_is_generated():
    stream = reasoning.ReasoningStream(in_reasoning=False)
    assert stream.feed("<thi") == Split(None, None)
    assert stream.feed("nk>\nStep one") == Split("Step one", None)
    assert stream.feed(". </th") == Split(".", None)
    assert stream.feed("ink>\n\nDone") == Split(None, "Done")
    assert stream.finish() == Split(None, None)


@pytest.mark.parametrize(
    ("template", "parser"),
    [
        ("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}", "qwen3"),
        ("{{- '<think>\\n\\n</think>\\n\\n' }}", "qwen3"),
        ("{% set content = content.split('</think>')[-1] %}", "deepseek_r1"),
        ("{{ messages }}", None),
        (None, None),
    ],
)
def test_detect_from_the_chat_template(template, parser):
    assert reasoning.detect(template) == parser


@pytest.mark.parametrize(
    ("parser", "prompt", "opened"),
    [
        ("qwen3", "<|im_start|>assistant\n<think>\n", True),
        ("qwen3", "<|im_start|>assistant\n", False),
        ("qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("deepseek_r1", "<|Assistant|>", True),
    ],
)
def test_starts_in_reasoning_follows_the_prompt(parser, prompt, opened):
    assert reasoning.starts_in_reasoning(parser, prompt) is opened


def test_unknown_parser_is_refused():
    with pytest.raises(ValueError):
        reasoning.starts_in_reasoning("hermes", "")
