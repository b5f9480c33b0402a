"""Chat prompt assembly: the request's messages as the chat template's input.

`template_messages` flattens each message's parts to one string (an image part becomes the VLM pipeline's
`<ov_genai_image_N>` placeholder, its decoded image appended to the request's images); `render` applies the
model's chat template (a plain transcript for a model without one). Pure but for the callables it is given
(image decoding, the tokenizer's template).

Tools: an assistant turn's `tool_calls` (arguments as an object, as templates write them with `tojson`), a tool
turn's `tool_call_id` and an assistant's `reasoning_content` join the template input (assistant.template_fields);
`render` hands the request's tools to the template as `tools=`. A template that cannot render them is a 400,
never a transcript that drops them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .assistant import ToolError, template_fields
from .errors import ApiError
from .request import Message


def image_parts(messages: list[Message]) -> list[tuple[int, int]]:
    return [
        (i, j) for i, m in enumerate(messages) for j, part in enumerate(m.content or ()) if part.type == "image_url"
    ]


def template_messages(
    messages: list[Message],
    is_vlm: bool,
    max_images: int,
    decode: Callable[[str, str], Any],
    developer_role: bool = True,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """(messages for the chat template, images in placeholder order). `decode(url, param)` returns one image
    (it raises ApiError naming `param` itself). Without `developer_role` (a template that never names it, as
    Qwen's and Llama's: they drop a role they do not know without a word), a developer message is a system one."""
    parts_with_images = image_parts(messages)
    if parts_with_images and not is_vlm:
        i, j = parts_with_images[0]
        raise ApiError(
            400,
            "this model is text-only: image_url content is not supported",
            param=f"messages[{i}].content[{j}]",
            code="unsupported_value",
        )
    if len(parts_with_images) > max_images:
        raise ApiError(
            400,
            f"{len(parts_with_images)} images in one request, more than the limit of {max_images}",
            param="messages",
            code="too_many_images",
        )
    flat: list[dict[str, Any]] = []
    images: list[Any] = []
    for i, m in enumerate(messages):
        parts = []
        for j, part in enumerate(m.content or ()):
            if part.type == "text":
                parts.append(part.text)
                continue
            images.append(decode(part.image_url.url, f"messages[{i}].content[{j}].image_url"))
            parts.append(f"<ov_genai_image_{len(images) - 1}>")
        # `name` is not passed: openvino-genai's template input takes role and content (documented)
        role = "system" if m.role == "developer" and not developer_role else m.role
        flat.append({"role": role, "content": "".join(parts)})
        calls = [c.model_dump() for c in m.tool_calls] if m.tool_calls else None
        try:
            flat[-1].update(template_fields(i, m.role, calls, m.tool_call_id, m.reasoning_content))
        except ToolError as exc:
            raise ApiError(400, exc.message, param=exc.param, code=exc.code) from None
    return flat, images


def tool_turn(messages: list[Message]) -> int | None:
    """The index of the first message that only a template rendering tools can render, or None."""
    return next((i for i, m in enumerate(messages) if m.role == "tool" or m.tool_calls), None)


def render(
    apply_chat_template: Callable[..., str],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    with_tools: bool = False,
    extra: dict[str, Any] | None = None,
) -> str:
    """The prompt text: the chat template with the generation prompt (and the template variables `extra`:
    chat_template_kwargs, the thinking switch), or a plain transcript for a model without one. With tools or tool
    turns (`with_tools`), a template that fails is a 400: a transcript would drop them."""
    kw: dict[str, Any] = {}
    if tools:
        kw["tools"] = tools
    if extra:
        kw["extra_context"] = extra
    try:
        return apply_chat_template(messages, add_generation_prompt=True, **kw)
    except Exception as exc:
        if tools or with_tools:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ApiError(
                400, f"the model's chat template cannot render this conversation: {msg}", param="messages"
            ) from None
        # a model without a chat template: a plain transcript
        return transcript(messages)


def transcript(messages: list[dict[str, Any]]) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
