"""A Messages request as the conversation the Responses API renders: one harmony rendering for both.

The Responses models are the gateway's shared conversation (`harmony/conversation.py` renders
them with openai-harmony), so a Messages request is mapped onto them rather than rendered again:
- `system` (and `system` messages) become the developer message's instructions;
- a user message's text a user message, each `tool_result` block a tool's output to the call
  it answers; an assistant's text a final answer, a `tool_use` block a call to its function, a
  `thinking` block the analysis it was: harmony's rule then keeps or drops it, as for Responses;
- custom tools become functions; Anthropic's own tools (bash, web search, ...) are not offered;
- `tool_choice` any / tool / none become required / the named function / none;
- `output_config.effort`, else the thinking budget, becomes the reasoning effort;
- `output_config.format` a `text.format` JSON schema: the final answer's text block is constrained
  to it, the thinking is not (its schema was checked as the request was typed).

Everything render() would refuse is checked here first, so a client's mistake is named as the
Messages API names it (`messages.2.content.0.tool_use_id`), never as a Responses field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.protocol.formats import ResponsesJsonSchemaFormat
from dynamo_oss.gateway.protocol.messages import (
    CustomTool,
    Message,
    MessagesRequest,
    NonTextBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingDisabled,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from dynamo_oss.gateway.protocol.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    MessageItem,
    NamedToolChoice,
    ReasoningItem,
    ReasoningOptions,
    ResponsesRequest,
    TextOptions,
    TextPart,
    ToolChoice,
)
from dynamo_oss.gateway.harmony.sealing import BoundSeal, UnopenableReasoning
from dynamo_oss.gateway.validation import parameters_problem

EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
# A thinking budget below the first bound asks for low effort, below the second medium, else high.
BUDGET_BOUNDS = (4096, 16384)


@dataclass(frozen=True)
class Thinking:
    """How the analysis channel is written back: as thinking blocks, with or without their text."""

    shown: bool  # thinking blocks at all (not with `thinking: {"type": "disabled"}`)
    with_text: bool  # their text too (not with `display: "omitted"`: the signature alone carries it)


@dataclass(frozen=True)
class Conversation:
    request: ResponsesRequest
    thinking: Thinking


def conversation(request: MessagesRequest, seal: BoundSeal) -> Conversation:
    """The Responses request that renders into the same harmony prompt, and how to write thinking back."""
    tools = _tools(request)
    items = _items(request.messages, seal)
    system = _system_text(request)
    output = request.output_config
    text = None
    if output and output.format:
        fmt = ResponsesJsonSchemaFormat.model_construct(
            type="json_schema", name="response", schema_=output.format.schema_
        )
        text = TextOptions(format=fmt)
    responses = ResponsesRequest(
        model=request.model,
        input=items,
        instructions=system or None,
        tools=tools,
        tool_choice=_tool_choice(request),
        parallel_tool_calls=not getattr(request.tool_choice, "disable_parallel_tool_use", False),
        reasoning=ReasoningOptions(effort=_effort(request)),
        max_output_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        text=text,
        stream=request.stream,
        nvext=request.nvext,
    )
    shown = not isinstance(request.thinking, ThinkingDisabled)
    display = getattr(request.thinking, "display", None)
    return Conversation(responses, Thinking(shown=shown, with_text=display != "omitted"))


def _system_text(request: MessagesRequest) -> str:
    if isinstance(request.system, list):
        return "\n\n".join(block.text for block in request.system)
    return request.system or ""


def _tools(request: MessagesRequest) -> list[FunctionTool]:
    tools, names = [], set()
    for index, tool in enumerate(request.tools):
        if not isinstance(tool, CustomTool):
            continue
        if tool.name in names:
            raise ApiError(
                400,
                f"tools.{index}.name: a second tool named '{tool.name}'; tool names must be unique.",
                param=f"tools.{index}.name",
            )
        names.add(tool.name)
        problem = parameters_problem(tool.input_schema)
        if problem is not None:
            raise ApiError(400, f"tools.{index}.input_schema: {problem}.", param=f"tools.{index}.input_schema")
        tools.append(
            FunctionTool(type="function", name=tool.name, description=tool.description, parameters=tool.input_schema)
        )
    return tools


def _tool_choice(request: MessagesRequest) -> ToolChoice:
    choice = request.tool_choice
    if isinstance(choice, ToolChoiceNone):
        return "none"
    if isinstance(choice, ToolChoiceAny):
        return "required"
    if isinstance(choice, ToolChoiceTool):
        if not any(isinstance(tool, CustomTool) and tool.name == choice.name for tool in request.tools):
            raise ApiError(
                400, f"tool_choice.name: no tool named '{choice.name}' is offered in 'tools'.", param="tool_choice.name"
            )
        return NamedToolChoice(type="function", name=choice.name)
    return "auto"


def _effort(request: MessagesRequest) -> str:
    if request.output_config and request.output_config.effort:
        return EFFORTS[request.output_config.effort]
    thinking = request.thinking
    if isinstance(thinking, ThinkingDisabled):
        return "low"
    if isinstance(thinking, ThinkingEnabled):
        low, medium = BUDGET_BOUNDS
        return "low" if thinking.budget_tokens < low else "medium" if thinking.budget_tokens < medium else "high"
    return "medium"


def _items(messages: list[Message], seal: BoundSeal) -> list:
    if messages[-1].role == "assistant":
        where = f"messages.{len(messages) - 1}"
        raise ApiError(
            400,
            f"{where}: this model does not support assistant message prefill; the conversation "
            "must end with a user message.",
            param=where,
        )
    items: list = []
    calls: set[str] = set()  # tool_use ids so far, which a tool_result must answer
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if isinstance(message.content, str):
            items.append(MessageItem(role=message.role, content=message.content))
            continue
        texts: list[str] = []
        for number, block in enumerate(message.content):
            at = f"{where}.content.{number}"
            if isinstance(block, TextBlock):
                texts.append(block.text)
                continue
            if texts:  # text before another kind of block: a message of its own, in order
                items.append(MessageItem(role=message.role, content="".join(texts)))
                texts = []
            items.append(_item(message.role, block, at, calls, seal))
        if texts:
            items.append(MessageItem(role=message.role, content="".join(texts)))
    return items


def _item(role: str, block: object, at: str, calls: set[str], seal: BoundSeal) -> object:
    if isinstance(block, NonTextBlock):
        raise ApiError(
            400,
            f"{at}.type: '{block.type}' blocks are not supported: gpt-oss reads text only, and "
            "this endpoint runs no server tools.",
            param=f"{at}.type",
        )
    if role == "assistant" and isinstance(block, ToolUseBlock):
        calls.add(block.id)
        return FunctionCallItem(
            type="function_call", call_id=block.id, name=block.name, arguments=json.dumps(block.input)
        )
    if role == "assistant" and isinstance(block, ThinkingBlock):
        return _reasoning(_opened(block.signature, f"{at}.signature", seal, block.thinking))
    if role == "assistant" and isinstance(block, RedactedThinkingBlock):
        return _reasoning(_opened(block.data, f"{at}.data", seal, None))
    if role == "user" and isinstance(block, ToolResultBlock):
        if block.tool_use_id not in calls:
            raise ApiError(
                400,
                f"{at}.tool_use_id: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block.tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in an earlier assistant message.",
                param=f"{at}.tool_use_id",
            )
        output = _result_text(block, at)
        return FunctionCallOutputItem(
            type="function_call_output",
            call_id=block.tool_use_id,
            output=f"Error: {output}" if block.is_error else output,
        )
    kind = getattr(block, "type", "?")
    raise ApiError(
        400,
        f"{at}.type: '{kind}' blocks may not appear in a{'n' if role == 'assistant' else ''} {role} message.",
        param=f"{at}.type",
    )


def _opened(token: str, where: str, seal: BoundSeal, shown: str | None) -> str:
    """The chain of thought a signature (or redacted block) carries, sealed by this deployment; the
    block's text, when sent, must be that text unaltered."""
    try:
        text = seal.open(token)
    except UnopenableReasoning:
        text = None
    if text is None or (shown and shown != text):
        raise ApiError(
            400,
            f"{where}: Invalid `signature` in `thinking` block: it was not issued by this "
            "deployment, or the block was altered. Send thinking blocks back exactly as received.",
            param=where,
        )
    return text


def _reasoning(text: str) -> ReasoningItem:
    return ReasoningItem(type="reasoning", content=[TextPart(type="reasoning_text", text=text)])


def _result_text(block: ToolResultBlock, at: str) -> str:
    if isinstance(block.content, str):
        return block.content
    texts = []
    for number, part in enumerate(block.content):
        if isinstance(part, NonTextBlock):
            raise ApiError(
                400,
                f"{at}.content.{number}.type: '{part.type}' blocks are not supported: gpt-oss reads text only.",
                param=f"{at}.content.{number}.type",
            )
        texts.append(part.text)
    return "".join(texts)
