"""A request body -> an engine GenRequest: validation, pipeline checks, prompt assembly, the prompt-size
pre-check, tokenization (by the caller, the batch encoder), context limits and the generation config.

`stage` runs on the event loop for a small body and in the bounded pool otherwise; `build` after
tokenization. Both raise ApiError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..openai import assistant, grammar, prompt, support
from ..openai.assistant import OutputPlan, ToolError
from ..openai.errors import ApiError, unknown_model
from ..openai.grammar import GrammarJob
from ..openai.request import ChatRequest, CompletionRequest, RequestError, parse
from ..openai.sampling import generation_fields
from ..openai.tools import Function
from ..report import State


@dataclass
class Staged:
    body: ChatRequest | CompletionRequest
    prompt: str
    images: list
    constraint: dict[str, str] | None  # StructuredOutputConfig keyword arguments
    plan: OutputPlan = field(default_factory=OutputPlan)  # how the output is read: tool calls, reasoning (chat only)
    job: GrammarJob | None = None  # a grammar to build off the loop (grammars.py); its result becomes `constraint`


def stage(app, raw: bytes, chat: bool) -> Staged:
    """(body, prompt text, images, constraint) of a valid request for this model, or ApiError."""
    try:
        body = parse(raw, chat)
    except RequestError as exc:
        raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
    if body.model is not None and body.model != app.cfg.served_name:
        raise unknown_model(body.model, app.cfg.served_name)
    engine = app.engine
    if engine is None or app.report.state != State.READY:
        raise ApiError(
            503, f"the model is not ready (state {app.report.state})", "server_error", code="model_not_ready"
        )
    if engine.fatal is not None:
        raise ApiError(503, f"the pipeline failed: {engine.fatal}", "server_error", code="pipeline_failed")
    support.check(body, app.support)
    constraint: dict[str, str] | None = None
    job: GrammarJob | None = None
    plan = OutputPlan()
    if isinstance(body, ChatRequest):
        built = grammar.constraint(body.response_format)  # json_object at once; a json_schema is a job
        constraint, job = (None, built) if isinstance(built, GrammarJob) else (built, None)
        plan = output_plan(app, body)
        text, images = chat_prompt(app, engine, body, plan)
        plan = plan.for_prompt(text)
        if plan.forced is not None:
            job = plan.grammar_job()
    else:
        text, images = body.text, []
    precheck(app, text, "messages" if chat else "prompt")
    return Staged(body, text, images, constraint, plan, job)


def output_plan(app, body: ChatRequest) -> OutputPlan:
    """How this request's output is read (tool_choice, parallel_tool_calls, the serving's parsers); 400 for
    tools or tool turns this model cannot handle."""
    turn = prompt.tool_turn(body.messages)
    if turn is not None and not app.parsers.renders_tools:
        raise ApiError(
            400,
            "this model's chat template does not render tool calls or tool results",
            param=f"messages[{turn}]",
            code="unsupported_value",
        )
    functions = [Function(name=t.function.name, parameters=t.function.parameters) for t in body.tools or ()]
    choice = body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else body.tool_choice
    try:
        return assistant.plan(app.parsers, functions, choice, body.parallel_tool_calls)
    except ToolError as exc:
        raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None


def chat_prompt(app, engine, body: ChatRequest, plan: OutputPlan | None = None) -> tuple[str, list]:
    from ..images import ImageBudget, ImageError, ImageLimits, decode_data_url, to_tensor

    cfg = app.cfg
    limits = ImageLimits(
        max_images=cfg.max_images, max_pixels=cfg.max_image_pixels, max_decoded_bytes=cfg.max_decoded_image_bytes
    )
    budget = ImageBudget(limits)

    def decode(url: str, param: str) -> Any:
        try:
            return to_tensor(decode_data_url(url, budget))
        except ImageError as exc:
            raise ApiError(exc.status, str(exc), param=param, code=exc.code) from exc

    flat, images = prompt.template_messages(body.messages, engine.is_vlm, limits.max_images, decode)
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if plan and plan.render_tools and body.tools else None
    with_tools = prompt.tool_turn(body.messages) is not None
    return prompt.render(engine.tokenizer.apply_chat_template, flat, tools, with_tools), images


def precheck(app, text: str, param: str) -> None:
    """A prompt whose characters cannot fit the token limit is refused before it is tokenized (no token is
    longer than `app.max_token_chars` characters, so it has at least len/that many tokens)."""
    limit = app.prompt_limit
    if limit is None or not app.max_token_chars:
        return
    if len(text) > limit * app.max_token_chars:
        raise ApiError(
            400,
            f"the prompt has {len(text)} characters: more than the limit of {limit} tokens can hold "
            f"(refused before tokenizing)",
            param=param,
            code="context_length_exceeded",
        )


def build(app, engine, staged: Staged, ids) -> tuple[Any, int]:
    import openvino as ov

    from ..engine import GenRequest

    body = staged.body
    chat = isinstance(body, ChatRequest)
    max_tokens = body.new_tokens()
    max_param = "max_completion_tokens" if chat and body.max_completion_tokens is not None else "max_tokens"

    # ids: the encoder's (chat: the template carries its own special tokens; completions: with BOS)
    prompt_tokens = len(ids)
    limit = app.prompt_limit
    param = "messages" if chat else "prompt"
    if limit is not None and prompt_tokens > limit:
        raise ApiError(
            400,
            f"the prompt has {prompt_tokens} tokens, more than the limit of {limit}",
            param=param,
            code="context_length_exceeded",
        )
    room = (app.max_position - prompt_tokens) if app.max_position else None
    if max_tokens is None:
        max_tokens = app.cfg.default_max_tokens
        if room is not None:
            max_tokens = max(1, min(max_tokens, room))
    elif room is not None and max_tokens > room:
        raise ApiError(
            400,
            f"prompt ({prompt_tokens} tokens) + {max_param} ({max_tokens}) exceeds the "
            f"model's context of {app.max_position} tokens",
            param=max_param,
            code="context_length_exceeded",
        )

    cfg = engine.new_config()
    for name, value in generation_fields(body, max_tokens).items():
        setattr(cfg, name, value)
    refused = engine.speculate(cfg, body.num_assistant_tokens)
    if refused is not None:
        raise ApiError(400, f"num_assistant_tokens: {refused}", param="num_assistant_tokens", code="unsupported")
    if body.n is not None and body.n > 1 and body.sampling and body.seed is None:
        import random

        cfg.rng_seed = random.getrandbits(63)  # the n choices sample with this seed + their index
    if staged.constraint is not None:
        import openvino_genai as g

        cfg.structured_output_config = g.StructuredOutputConfig(**staged.constraint)
    try:  # openvino-genai's own checks, here rather than as a failure at generation time
        cfg.validate()
    except Exception as exc:
        msg = str(exc).strip().splitlines()[-1]
        raise ApiError(400, f"invalid generation parameters: {msg}", code="invalid_value") from exc
    if engine.is_vlm:
        greq = GenRequest(config=cfg, max_new_tokens=max_tokens, prompt=staged.prompt, images=staged.images)
    else:
        greq = GenRequest(config=cfg, max_new_tokens=max_tokens, input_ids=ov.Tensor(ids.reshape(1, -1)))
    greq.logprobs = getattr(body, "logprobs", None) is True
    return greq, prompt_tokens
