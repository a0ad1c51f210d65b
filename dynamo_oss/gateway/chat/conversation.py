"""A Chat Completions request as a harmony conversation (harmony/rendering.py renders it), mapped as
gpt-oss's chat template maps it (assets/template.py), so chat's prompt is the template's, token for
token, with one difference: whatever a client wrote stays text.

- A leading `system` or `developer` message is the developer message's `# Instructions`, a
  `response_format` schema its `# Response Formats` after them; later system and developer
  messages are developer messages of their own.
- user -> user. assistant -> its `reasoning` (or `reasoning_content`) on `analysis`, then its tool
  calls (`commentary` to `functions.NAME`; text beside them is a `commentary` preamble) or its
  text on `final`. tool -> the tool's answer from `functions.NAME` (the call with that id) to the
  assistant.
- Function tools are harmony's `functions` namespace; `tool_choice: "none"` offers none.
"""

from __future__ import annotations

import datetime

from openai_harmony import Author, DeveloperContent, Message, ReasoningEffort, Role

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.harmony.completion import Generation
from dynamo_oss.gateway.harmony.rendering import EFFORTS, FUNCTIONS, Conversation, Toolset, toolset
from dynamo_oss.gateway.protocol.chat import ChatMessage, ChatNamedChoice, ChatNonTextPart, ChatRefusalPart, ChatRequest
from dynamo_oss.gateway.protocol.responses import FunctionTool, NamedToolChoice, ToolChoice
from dynamo_oss.gateway.structured import prompt_section


def conversation(request: ChatRequest, today: datetime.date | None = None) -> Conversation:
    """The request's conversation (started `today`, None for the real today); a malformed message is
    an ApiError naming it."""
    messages = request.messages
    leading = messages[0].role in ("system", "developer")
    instructions = [_text(messages[0], 0)] if leading else []
    instructions.append(prompt_section(request.response_format))
    return Conversation(
        instructions="\n\n".join(part for part in instructions if part),
        toolset=_toolset(request),
        effort=EFFORTS.get(request.effort() or "medium", ReasoningEffort.MEDIUM),
        history=_history(messages, 1 if leading else 0),
        date=today,
    )


def generation(request: ChatRequest) -> Generation:
    """What the request asks of the completion besides its prompt (its stop sequences are the
    gateway's to apply: stream.py)."""
    sampling = {
        "max_tokens": request.max_completion_tokens or request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
        "frequency_penalty": request.frequency_penalty,
        "presence_penalty": request.presence_penalty,
        "top_k": request.top_k,
        "ignore_eos": request.ignore_eos,
        "min_tokens": request.min_tokens,
    }
    return Generation(request.model, sampling, _tool_choice(request), request.response_format, request.nvext)


def _tool_choice(request: ChatRequest) -> ToolChoice:
    """Chat's tool choice as the Responses API's, which the completion is guided by."""
    choice = request.tool_choice
    if not isinstance(choice, ChatNamedChoice):
        return choice or "auto"
    if not any(tool.function.name == choice.function.name for tool in request.tools or []):
        raise ApiError(
            400,
            f"Invalid 'tool_choice.function.name': no function named '{choice.function.name}' is offered in 'tools'.",
            param="tool_choice.function.name",
        )
    return NamedToolChoice(type="function", name=choice.function.name)


def _toolset(request: ChatRequest) -> Toolset:
    if request.tool_choice == "none" or not request.tools:
        return Toolset()
    functions = [
        FunctionTool(
            type="function",
            name=tool.function.name,
            description=tool.function.description,
            parameters=tool.function.parameters,
        )
        for tool in request.tools
    ]
    return toolset(functions, field="tools[{}].function")


def _history(messages: list[ChatMessage], start: int) -> list[Message]:
    calls = {call.id: call.function.name for message in messages for call in message.tool_calls or []}
    history: list[Message] = []
    for index in range(start, len(messages)):
        message = messages[index]
        if message.role in ("system", "developer"):
            instructions = DeveloperContent.new().with_instructions(_text(message, index))
            history.append(Message.from_role_and_content(Role.DEVELOPER, instructions))
        elif message.role == "user":
            history.append(Message.from_role_and_content(Role.USER, _text(message, index)))
        elif message.role == "tool":
            history.append(_tool_answer(message, index, calls))
        else:
            history += _assistant(message, index)
    return history


def _assistant(message: ChatMessage, index: int) -> list[Message]:
    def said(text: str, channel: str) -> Message:
        return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)

    out = []
    reasoning = message.reasoning or message.reasoning_content
    if reasoning:
        out.append(said(reasoning, "analysis"))
    text = _text(message, index)
    if message.tool_calls:
        if text:
            out.append(said(text, "commentary"))  # a preamble beside the calls
        for call in message.tool_calls:
            recipient = f"{FUNCTIONS}.{call.function.name}"
            out.append(
                said(call.function.arguments, "commentary")
                .with_recipient(recipient)
                .with_content_type("<|constrain|>json")
            )
    elif text:
        out.append(said(text, "final"))
    return out


def _tool_answer(message: ChatMessage, index: int, calls: dict[str, str]) -> Message:
    name = calls.get(message.tool_call_id or "")
    if name is None:
        where = f"messages[{index}].tool_call_id"
        raise ApiError(
            400,
            f"Invalid '{where}': no assistant message before it has a tool call with id '{message.tool_call_id}'.",
            param=where,
            code="invalid_tool_output",
        )
    author = Author.new(Role.TOOL, f"{FUNCTIONS}.{name}")
    return (
        Message.from_author_and_content(author, _text(message, index))
        .with_recipient("assistant")
        .with_channel("commentary")
    )


def _text(message: ChatMessage, index: int) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for number, part in enumerate(content):
        if isinstance(part, ChatNonTextPart):
            where = f"messages[{index}].content[{number}].type"
            raise ApiError(
                400,
                f"Invalid '{where}': '{part.type}'. gpt-oss reads text only; send text parts.",
                param=where,
                code="unsupported_value",
            )
        texts.append(part.refusal if isinstance(part, ChatRefusalPart) else part.text)
    return "".join(texts)
