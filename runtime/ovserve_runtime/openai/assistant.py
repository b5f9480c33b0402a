"""The assistant's turn with tools and reasoning: what a request may ask of this model, and its output read back.

Pure: no openvino, no I/O.

- `resolve_parsers`: at startup, the tool and reasoning parsers from the flags and the chat template (AUTO:
  detected; the choice and where it came from are reported).
- `plan`: per request, from `tools`, `tool_choice` and `parallel_tool_calls` (then `for_prompt`: does the
  rendered prompt open `<think>`?): which parsers read the output, and the grammar of a forced call. "none"
  renders no tools and parses none; "auto" parses the model's calls; "required" and a named function force
  them with a grammar in the family's format (finish_reason `tool_calls`). What the model cannot do is a
  ToolError (a 400 naming the field).
- `OutputStream`: the output's text deltas -> OpenAI delta dicts (`reasoning_content`, `content`, `tool_calls`);
  `message`: the whole output -> the assistant message; `finish_reason`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..report import Decision, Source
from . import forced, reasoning, thinking, tools
from .grammar import GrammarJob
from .reasoning import ReasoningStream
from .tools import Function, ToolCallStream

AUTO, NONE = "AUTO", "none"
log = logging.getLogger("ovserve.assistant")
MAX_PARALLEL_CALLS = forced.MAX_PARALLEL_CALLS


class ToolError(ValueError):
    """A request this model cannot serve as asked: 400 naming `param`."""

    def __init__(self, message: str, param: str, code: str = "unsupported_value") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True)
class Parsers:
    """The serving's parsers (None: off) and how each was chosen ("requested" or "automatic")."""

    tool: str | None = None
    reasoning: str | None = None
    renders_tools: bool = False
    tool_source: str = "automatic"
    reasoning_source: str = "automatic"
    tool_detail: str = ""
    reasoning_detail: str = ""
    thinking_switch: str | None = None  # the template variable reasoning_effort sets (openai/thinking.py)
    developer_role: bool = True  # the template names the developer role (else developer messages go as system)


def resolve_parsers(tool_flag: str, reasoning_flag: str, chat_template: str | None) -> Parsers:
    """The parsers for these flag values (AUTO, none or a parser name) and the model's chat template."""
    renders = tools.renders_tools(chat_template)
    if tool_flag == AUTO:
        tool = tools.detect(chat_template)
        tool_src = "automatic"
        if tool is not None:
            tool_detail = f"detected from the chat template ({tool})"
        elif renders:
            tool_detail = "the chat template renders tools in a format no parser here reads"
        else:
            tool_detail = "the chat template renders no tools"
    else:
        tool = None if tool_flag == NONE else tool_flag
        tool_src, tool_detail = "requested", ""
        if tool is not None and not renders:
            tool_detail = "the chat template renders no tools: requests with tools are refused"
    if reasoning_flag == AUTO:
        rsn = reasoning.detect(chat_template)
        rsn_src = "automatic"
        rsn_detail = f"detected from the chat template ({rsn})" if rsn else "the chat template writes no <think>"
    else:
        rsn = None if reasoning_flag == NONE else reasoning_flag
        rsn_src, rsn_detail = "requested", ""
    switch = thinking.detect_switch(chat_template)
    developer = not chat_template or "developer" in chat_template
    return Parsers(tool, rsn, renders, tool_src, rsn_src, tool_detail, rsn_detail, switch, developer)


def decisions(parsers: Parsers) -> dict[str, Decision]:
    """The parsers as entries of the report's decision record (toolParser, reasoningParser)."""
    tool = parsers.tool if parsers.renders_tools or parsers.tool_source == "requested" else None
    return {
        "toolParser": Decision(
            value=tool or NONE,
            source=Source(parsers.tool_source),
            requested=None if parsers.tool_source == "automatic" else (parsers.tool or NONE),
            detail=parsers.tool_detail,
        ),
        "reasoningParser": Decision(
            value=parsers.reasoning or NONE,
            source=Source(parsers.reasoning_source),
            requested=None if parsers.reasoning_source == "automatic" else (parsers.reasoning or NONE),
            detail=parsers.reasoning_detail,
        ),
    }


@dataclass(frozen=True)
class OutputPlan:
    """How one request's output is read: tool calls (parser, offered names), a forced call's grammar, reasoning."""

    tool_parser: str | None = None
    tool_names: frozenset[str] | None = None
    forced: GrammarJob | None = None  # a forced call: its grammar, built off the loop
    reasoning: str | None = None
    in_reasoning: bool = False
    render_tools: bool = False  # the chat template gets the request's tools
    max_calls: int | None = None  # parallel_tool_calls false: calls beyond the first stay text

    @property
    def passthrough(self) -> bool:
        """Nothing to parse: the output is the content as it comes."""
        return self.tool_parser is None and self.reasoning is None

    def for_prompt(self, prompt: str) -> OutputPlan:
        """This plan for the rendered prompt: does the output start inside a reasoning block the prompt opened?"""
        if self.reasoning is None:
            return self
        return replace(self, in_reasoning=reasoning.starts_in_reasoning(self.reasoning, prompt))

    def grammar_job(self) -> GrammarJob | None:
        """The grammar of a forced call, to build off the event loop (grammars.py). When the prompt opened a
        reasoning block, the output closes it first (no thinking before a forced call, as Qwen3 with thinking
        off)."""
        if self.forced is None:
            return None
        return self.forced.model_copy(update={"prefix": reasoning.CLOSE + "\n\n" if self.in_reasoning else ""})


def plan(
    parsers: Parsers,
    functions: Sequence[Function] | None,
    tool_choice: str | dict[str, Any] | None,
    parallel_tool_calls: bool | None,
) -> OutputPlan:
    """The plan of one request (then `for_prompt` once the prompt is rendered); ToolError for what this model
    cannot do."""
    rsn = parsers.reasoning
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    choice = "named" if isinstance(tool_choice, dict) else (tool_choice or "auto")
    if not functions:
        if choice in ("required", "named"):
            raise ToolError(f"tool_choice {choice!r} needs tools", "tool_choice", "invalid_value")
        return OutputPlan(reasoning=rsn)
    if choice == "none":
        return OutputPlan(reasoning=rsn)
    if not parsers.renders_tools:
        raise ToolError("this model's chat template does not render tools: it cannot be given tools", "tools")
    if parsers.tool is None:
        raise ToolError(
            "tool calling is off for this model (no tool parser: --tool-parser / spec.serving.toolParser none, "
            "or a tool format AUTO does not recognise)",
            "tools",
        )
    names = frozenset(f.name for f in functions)
    job = None
    if choice in ("required", "named"):
        chosen = list(functions) if choice == "required" else [f for f in functions if f.name == named]
        if not chosen:
            raise ToolError(f"tool_choice names {named!r}, which is not one of the tools", "tool_choice")
        try:  # the cheap checks here; the grammar itself is built off the loop (grammars.py)
            forced.check_names(chosen)
            parser = forced.forced_parser(parsers.tool)
        except ValueError as exc:
            raise ToolError(f"cannot force a call to these tools: {exc}", "tools") from None
        job = GrammarJob(
            kind="forced",
            param="tools",
            parser=parsers.tool,
            functions=tuple((f.name, f.parameters) for f in chosen),
            parallel=choice == "required" and parallel_tool_calls is not False,
        )
    return OutputPlan(
        tool_parser=parser if job else parsers.tool,
        tool_names=names,
        max_calls=1 if parallel_tool_calls is False else None,
        forced=job,
        reasoning=rsn,
        render_tools=True,
    )


class OutputStream:
    """One output's text deltas as OpenAI delta dicts; reasoning first, then content and tool calls.

    Never raises: the parsers read any output (bounded depth, linear time), and should one still fail (a bug),
    what it held and the rest of the output go out as content: one request's odd output fails nothing else,
    and loses no text."""

    def __init__(self, plan: OutputPlan, *, new_id=tools.new_call_id) -> None:
        self.plan = plan
        self.calls = 0
        self._broken = False  # a parser raised: the rest is content, as it comes
        self._in_tools = False  # the tool parser is running (it has taken the text it was given)
        self._rsn = ReasoningStream(in_reasoning=plan.in_reasoning) if plan.reasoning else None
        self._tools: ToolCallStream | None = (
            tools.stream(plan.tool_parser, plan.tool_names, new_id=new_id, max_calls=plan.max_calls)
            if plan.tool_parser
            else None
        )

    def feed(self, text: str) -> list[dict[str, Any]]:
        if self._broken:
            return [{"content": text}] if text else []
        try:
            return self._feed(text)
        except Exception:
            return self._fall_back(text)

    def finish(self) -> list[dict[str, Any]]:
        if self._broken:
            return []
        try:
            return self._finish()
        except Exception:
            return self._fall_back("")

    def _fall_back(self, text: str) -> list[dict[str, Any]]:
        log.exception("an output parser failed; the rest of this output is content")
        self._broken = True
        held = self._tools.pending() if self._tools is not None else ""
        if self._in_tools:  # the tool parser failed: it holds what it was given, this text included
            text = ""
        return [{"content": held + text}] if held + text else []

    def _feed(self, text: str) -> list[dict[str, Any]]:
        if self._rsn is None:
            return self._content(text, final=False)
        split = self._rsn.feed(text)
        out = [{"reasoning_content": split.reasoning}] if split.reasoning else []
        return out + (self._content(split.content, final=False) if split.content else [])

    def _finish(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._rsn is not None:
            split = self._rsn.finish()
            if split.reasoning:
                out.append({"reasoning_content": split.reasoning})
            if split.content:
                out += self._content(split.content, final=False)
        return out + self._content("", final=True)

    def _content(self, text: str, final: bool) -> list[dict[str, Any]]:
        if self._tools is None:
            return [{"content": text}] if text else []
        self._in_tools = True
        deltas = self._tools.feed(text) if text else []
        if final:
            deltas += self._tools.finish()
        self._in_tools = False
        out = []
        for d in deltas:
            if d.tool_call is not None:
                self.calls += 1
            elif self.plan.forced is not None:
                # a forced call's output is calls only (its grammar): text here is the markup of a call cut at
                # max_tokens; as content, an agent would send that fragment back to the model on its next turn
                continue
            out.append(d.openai())
        return out


def message(plan: OutputPlan, text: str, *, new_id=tools.new_call_id) -> dict[str, Any]:
    """The assistant message of a whole output: content (None when only calls), reasoning_content, tool_calls."""
    stream = OutputStream(plan, new_id=new_id)
    deltas = stream.feed(text) + stream.finish()
    msg: dict[str, Any] = {"role": "assistant"}
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", ())]
    msg["content"] = content if content or not (calls or plan.reasoning) else None
    if plan.reasoning:
        msg["reasoning_content"] = "".join(d.get("reasoning_content") or "" for d in deltas) or None
    if calls:
        msg["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return msg


def finish_reason(plan: OutputPlan, finish: str, calls: int) -> str:
    """`tool_calls` when the output ended (not cut) with calls, else the engine's reason."""
    return "tool_calls" if finish == "stop" and calls else finish


def template_fields(
    index: int,
    role: str,
    tool_calls: Sequence[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    """The keys a message adds to its chat-template input beside role and content: an assistant's `tool_calls`
    (arguments as an object: templates write them with `tojson`), a tool result's `tool_call_id`, an
    assistant's `reasoning_content`. ToolError names a field that cannot be rendered."""
    out: dict[str, Any] = {}
    if tool_calls:
        calls = []
        for j, call in enumerate(tool_calls):
            fn = call.get("function") or {}
            param = f"messages[{index}].tool_calls[{j}].function.arguments"
            text = fn.get("arguments") or "{}"
            if tools.too_deep(text):  # before the recursive decoder: 100,000 levels were a RecursionError, a 500
                raise ToolError(
                    f"the arguments of a tool call nest deeper than {tools.MAX_DEPTH} levels", param, "invalid_value"
                )
            try:
                arguments = json.loads(text)
            except (ValueError, RecursionError):
                raise ToolError("the arguments of a tool call must be a JSON object", param, "invalid_value") from None
            if not isinstance(arguments, dict):
                raise ToolError("the arguments of a tool call must be a JSON object", param, "invalid_value")
            calls.append(
                {"id": call.get("id"), "type": "function", "function": {"name": fn.get("name"), "arguments": arguments}}
            )
        out["tool_calls"] = calls
    if role == "tool":
        if not tool_call_id:
            raise ToolError(
                "a tool message needs the tool_call_id it answers",
                f"messages[{index}].tool_call_id",
                "missing_required_parameter",
            )
        out["tool_call_id"] = tool_call_id
    if reasoning_content is not None and role == "assistant":
        out["reasoning_content"] = reasoning_content
    return out
