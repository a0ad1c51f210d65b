"""A Responses request as a harmony conversation (rendering.py renders it). The Responses models
(protocol/responses.py) are the gateway's shared conversation: the Messages API maps onto them too.

- `instructions`, then leading `system`/`developer` messages: the developer message's
  `# Instructions`; later ones become developer messages of their own.
- `reasoning` items become `analysis` messages, `function_call`/`custom_tool_call` items
  `commentary` calls to their tool, tool outputs the tool's messages to the assistant, assistant
  messages `final` answers.
- `text.format` with a JSON schema is written as harmony's `# Response Formats` section, after the
  instructions (structured.py; the completion's final channel is also constrained to it there).
- `tool_choice: "none"` offers no tools.
"""

from __future__ import annotations

import datetime
import json

from openai_harmony import Author, DeveloperContent, Message, ReasoningEffort, Role

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.harmony.completion import Generation
from dynamo_oss.gateway.harmony.rendering import CUSTOM_INPUT, EFFORTS, FUNCTIONS, Conversation, Toolset, toolset
from dynamo_oss.gateway.harmony.sealing import BoundSeal, UnopenableReasoning
from dynamo_oss.gateway.protocol.responses import (
    Content,
    CustomToolCallItem,
    FunctionCallItem,
    MessageItem,
    NonTextPart,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    ToolOutputItem,
)
from dynamo_oss.gateway.structured import prompt_section


def conversation(request: ResponsesRequest, seal: BoundSeal, today: datetime.date | None = None) -> Conversation:
    """The request's conversation (started `today`, None for the real today); a malformed input is an
    ApiError naming the item at fault."""
    offered = toolset(request.tools) if request.tool_choice != "none" else Toolset()
    leading, rest = _leading_instructions(request)
    formats = prompt_section(request.text.format if request.text else None)
    effort = request.reasoning.effort if request.reasoning else None
    return Conversation(
        instructions="\n\n".join(part for part in [*leading, formats] if part),
        toolset=offered,
        effort=EFFORTS.get(effort or "medium", ReasoningEffort.MEDIUM),
        history=_history(rest, seal),
        date=today,
    )


def generation(request: ResponsesRequest) -> Generation:
    """What the request asks of the completion besides its prompt."""
    sampling = {
        "max_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "ignore_eos": request.ignore_eos,
        "min_tokens": request.min_tokens,
    }
    text_format = request.text.format if request.text else None
    return Generation(request.model, sampling, request.tool_choice, text_format, request.nvext)


def _leading_instructions(request: ResponsesRequest) -> tuple[list[str], list]:
    """`instructions` and the system/developer messages before anything else, as one text; the rest."""
    items = [MessageItem(role="user", content=request.input)] if isinstance(request.input, str) else request.input
    leading = [request.instructions] if request.instructions else []
    start = 0
    while start < len(items) and isinstance(items[start], MessageItem) and items[start].role in ("system", "developer"):
        leading.append(_text(items[start].content, f"input[{start}].content"))
        start += 1
    return leading, list(enumerate(items))[start:]


def _history(items: list, seal: BoundSeal) -> list[Message]:
    messages: list[Message] = []
    calls: dict[str, str] = {}  # call_id -> recipient, so an output goes back from the right tool
    for index, item in items:
        where = f"input[{index}]"
        if isinstance(item, MessageItem):
            text = _text(item.content, f"{where}.content")
            if item.role == "assistant":
                messages.append(Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final"))
            elif item.role == "user":
                messages.append(Message.from_role_and_content(Role.USER, text))
            else:
                messages.append(
                    Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new().with_instructions(text))
                )
        elif isinstance(item, ReasoningItem):
            text = _reasoning_text(item, where, seal)
            if text:
                messages.append(Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis"))
        elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
            recipient = f"{item.namespace or FUNCTIONS}.{item.name}"
            calls[item.call_id] = recipient
            arguments = item.arguments if isinstance(item, FunctionCallItem) else json.dumps({CUSTOM_INPUT: item.input})
            call = Message.from_role_and_content(Role.ASSISTANT, arguments).with_channel("commentary")
            messages.append(call.with_recipient(recipient).with_content_type("<|constrain|>json"))
        elif isinstance(item, ToolOutputItem):
            if item.call_id not in calls:
                raise ApiError(
                    400,
                    f"Invalid '{where}.call_id': no function_call or custom_tool_call with call_id "
                    f"'{item.call_id}' comes before this output in the input.",
                    param=f"{where}.call_id",
                    code="invalid_tool_output",
                )
            output = _text(item.output, f"{where}.output")
            author = Author.new(Role.TOOL, calls[item.call_id])
            reply = Message.from_author_and_content(author, output).with_channel("commentary")
            messages.append(reply.with_recipient("assistant"))
    return messages


def _reasoning_text(item: ReasoningItem, where: str, seal: BoundSeal) -> str:
    if item.encrypted_content is not None:
        try:
            return seal.open(item.encrypted_content)
        except UnopenableReasoning:
            raise ApiError(
                400,
                f"Invalid '{where}.encrypted_content': it was not issued by this deployment, or it "
                "was altered. Send reasoning items back exactly as they were received.",
                param=f"{where}.encrypted_content",
                code="invalid_encrypted_content",
            ) from None
    parts = item.content if item.content is not None else item.summary
    return "".join(part.text for part in parts)


def _text(content: Content, where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, NonTextPart):
            raise ApiError(
                400,
                f"Invalid '{where}[{index}].type': '{part.type}'. gpt-oss reads text only; send input_text parts.",
                param=f"{where}[{index}].type",
                code="unsupported_value",
            )
        texts.append(part.refusal if isinstance(part, RefusalPart) else part.text)
    return "".join(texts)
