"""A generation request body -> an engine GenRequest: validation, pipeline checks, prompt assembly, the
prompt-size pre-check, tokenization (by the caller, the batch encoder), context limits and the generation config.

It reads what it needs of the serving as a `Context` (and the engine), never the server: `parse_body` and a
stage (`stage_chat`, `stage_completion`) run on the event loop for a small body and in the bounded pool
otherwise; `build` after tokenization. All raise ApiError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..openai import assistant, grammar, prompt, support, thinking
from ..openai.assistant import OutputPlan, ToolError
from ..openai.errors import ApiError, unknown_model
from ..openai.grammar import GrammarJob
from ..openai.request import ChatRequest, CompletionRequest, RequestError, parse
from ..openai.sampling import generation_fields
from ..openai.support import PipelineSupport
from ..openai.tools import Function


@dataclass(frozen=True)
class Context:
    """What preparing a generation request reads of the serving (state.ServingState.prepare_context)."""

    served_name: str
    support: PipelineSupport
    parsers: assistant.Parsers
    prompt_limit: int | None  # tokens; None: no limit known
    max_position: int | None  # the model's context
    max_token_chars: int  # no token is longer (the pre-check before tokenizing)
    default_max_tokens: int
    max_images: int
    max_image_pixels: int
    max_decoded_image_bytes: int
    template_kwargs: dict = field(default_factory=dict)  # the serving's chat template variables (a default)


@dataclass
class Staged:
    body: ChatRequest | CompletionRequest
    prompt: str
    images: list
    constraint: dict[str, str] | None  # StructuredOutputConfig keyword arguments
    plan: OutputPlan = field(default_factory=OutputPlan)  # how the output is read: tool calls, reasoning (chat only)
    job: GrammarJob | None = None  # a grammar to build off the loop (grammars.py); its result becomes `constraint`


def parse_body(raw: bytes, chat: bool, served_name: str) -> ChatRequest | CompletionRequest:
    """The validated body (400 naming the field) for this serving's model (404 for another)."""
    try:
        body = parse(raw, chat)
    except RequestError as exc:
        raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
    if body.model is not None and body.model != served_name:
        raise unknown_model(body.model, served_name)
    return body


def stage_chat(ctx: Context, engine, body: ChatRequest) -> Staged:
    """(body, prompt text, images, constraint, output plan) of a valid chat request for this model, or ApiError."""
    support.check(body, ctx.support)
    built = grammar.constraint(body.response_format)  # json_object at once; a json_schema is a job
    constraint, job = (None, built) if isinstance(built, GrammarJob) else (built, None)
    plan = output_plan(ctx, body)
    text, images = chat_prompt(ctx, engine, body, plan)
    plan = plan.for_prompt(text)
    if plan.forced is not None:
        job = plan.grammar_job()
    precheck(ctx, text, "messages")
    return Staged(body, text, images, constraint, plan, job)


def stage_completion(ctx: Context, engine, body: CompletionRequest) -> Staged:
    """(body, prompt text) of a valid completions request for this model, or ApiError."""
    support.check(body, ctx.support)
    precheck(ctx, body.text, "prompt")
    return Staged(body, body.text, [], None)


def output_plan(ctx: Context, body: ChatRequest) -> OutputPlan:
    """How this request's output is read (tool_choice, parallel_tool_calls, the serving's parsers); 400 for
    tools or tool turns this model cannot handle."""
    turn = prompt.tool_turn(body.messages)
    if turn is not None and not ctx.parsers.renders_tools:
        raise ApiError(
            400,
            "this model's chat template does not render tool calls or tool results",
            param=f"messages[{turn}]",
            code="unsupported_value",
        )
    functions = [Function(name=t.function.name, parameters=t.function.parameters) for t in body.tools or ()]
    choice = body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else body.tool_choice
    try:
        return assistant.plan(ctx.parsers, functions, choice, body.parallel_tool_calls)
    except ToolError as exc:
        raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None


def chat_prompt(ctx: Context, engine, body: ChatRequest, plan: OutputPlan | None = None) -> tuple[str, list]:
    from ..images import ImageBudget, ImageError, ImageLimits, decode_data_url, to_tensor

    limits = ImageLimits(
        max_images=ctx.max_images, max_pixels=ctx.max_image_pixels, max_decoded_bytes=ctx.max_decoded_image_bytes
    )
    budget = ImageBudget(limits)

    def decode(url: str, param: str) -> Any:
        try:
            return to_tensor(decode_data_url(url, budget))
        except ImageError as exc:
            raise ApiError(exc.status, str(exc), param=param, code=exc.code) from exc

    try:  # the variables the template is rendered with: the serving's, the effort's switch, the request's own
        extra = thinking.template_kwargs(
            ctx.template_kwargs, ctx.parsers.thinking_switch, body.reasoning_effort, body.chat_template_kwargs
        )
    except thinking.ThinkingError as exc:
        raise ApiError(400, exc.message, param=exc.param, code="unsupported_value") from None
    flat, images = prompt.template_messages(
        body.messages, engine.is_vlm, limits.max_images, decode, ctx.parsers.developer_role
    )
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if plan and plan.render_tools and body.tools else None
    with_tools = prompt.tool_turn(body.messages) is not None
    return prompt.render(engine.tokenizer.apply_chat_template, flat, tools, with_tools, extra), images


def precheck(ctx: Context, text: str, param: str) -> None:
    """A prompt whose characters cannot fit the token limit is refused before it is tokenized (no token is
    longer than `ctx.max_token_chars` characters, so it has at least len/that many tokens)."""
    limit = ctx.prompt_limit
    if limit is None or not ctx.max_token_chars:
        return
    if len(text) > limit * ctx.max_token_chars:
        raise ApiError(
            400,
            f"the prompt has {len(text)} characters: more than the limit of {limit} tokens can hold "
            f"(refused before tokenizing)",
            param=param,
            code="context_length_exceeded",
        )


def build(ctx: Context, engine, staged: Staged, ids) -> tuple[Any, int]:
    import openvino as ov

    from ..engine import GenRequest

    body = staged.body
    chat = isinstance(body, ChatRequest)
    max_tokens = body.new_tokens()
    max_param = "max_completion_tokens" if chat and body.max_completion_tokens is not None else "max_tokens"

    # ids: the encoder's (chat: the template carries its own special tokens; completions: with BOS)
    prompt_tokens = len(ids)
    limit = ctx.prompt_limit
    param = "messages" if chat else "prompt"
    if limit is not None and prompt_tokens > limit:
        raise ApiError(
            400,
            f"the prompt has {prompt_tokens} tokens, more than the limit of {limit}",
            param=param,
            code="context_length_exceeded",
        )
    room = (ctx.max_position - prompt_tokens) if ctx.max_position else None
    if max_tokens is None:
        max_tokens = ctx.default_max_tokens
        if room is not None:
            max_tokens = max(1, min(max_tokens, room))
    elif room is not None and max_tokens > room:
        raise ApiError(
            400,
            f"prompt ({prompt_tokens} tokens) + {max_param} ({max_tokens}) exceeds the "
            f"model's context of {ctx.max_position} tokens",
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
