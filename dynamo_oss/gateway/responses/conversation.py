"""A Responses request as the harmony prompt gpt-oss reads, rendered by openai-harmony itself.

- `instructions`, then leading `system`/`developer` messages: the developer message's
  `# Instructions`; later ones become developer messages of their own.
- Tools: function tools in the `functions` namespace; a `namespace` group as a harmony namespace
  of its name; a `custom` tool as a function taking one string, `input`. Hosted tools (web search,
  ...) are not offered: nothing here runs them.
- `reasoning` items become `analysis` messages, `function_call`/`custom_tool_call` items
  `commentary` calls to their tool, tool outputs the tool's messages to the assistant, assistant
  messages `final` answers. Which reasoning stays in the prompt is harmony's rule (openai-harmony's
  `auto_drop_analysis`): the chain of thought since the last final answer is kept while the
  assistant is between tool calls, and dropped once a final answer follows it.
- `text.format` with a JSON schema is written as harmony's `# Response Formats` section, after the
  instructions (structured.py; the completion's final channel is also constrained to it there).

Each message is rendered by openai-harmony on its own and remembered: an agent sends its whole
history every turn, and harmony takes about 0.2 ms a message however short, so a long loop would
otherwise pay for its history again and again. The pieces are harmony's own; tests check that
they join into exactly what harmony renders for the whole conversation.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from functools import cache, lru_cache

from openai_harmony import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyEncodingName,
    Message,
    ReasoningEffort,
    RenderOptions,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
    load_harmony_encoding,
)

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.protocol.responses import (
    Content,
    CustomTool,
    CustomToolCallItem,
    FunctionCallItem,
    FunctionTool,
    MessageItem,
    NamespaceTool,
    NonTextPart,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    ToolOutputItem,
)
from dynamo_oss.gateway.responses.sealed_reasoning import ReasoningSeal, UnopenableReasoning
from dynamo_oss.gateway.structured import prompt_section
from dynamo_oss.gateway.validation import check_parameters

FUNCTIONS = "functions"  # harmony's namespace for plain function tools
CUSTOM_INPUT = "input"  # the one argument a custom tool is offered with
EFFORTS = {"none": ReasoningEffort.LOW, "minimal": ReasoningEffort.LOW, "low": ReasoningEffort.LOW,
           "medium": ReasoningEffort.MEDIUM, "high": ReasoningEffort.HIGH, "xhigh": ReasoningEffort.HIGH}  # fmt: skip


@cache
def encoding() -> HarmonyEncoding:
    """o200k_harmony (reads TIKTOKEN_ENCODINGS_BASE, which `dynamo serve` sets for every process)."""
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@dataclass(frozen=True)
class ClientTool:
    """A tool as the client declared it, which a harmony recipient (`namespace.name`) maps back to."""

    kind: str  # "function" or "custom"
    name: str
    namespace: str | None  # the client's namespace group, None for a top-level tool


@dataclass
class Prompt:
    token_ids: list[int]
    tools: dict[str, ClientTool]  # harmony recipient -> the client's tool
    function_schemas: dict[str, dict]  # harmony recipient -> argument schema, for a required tool choice


def render(request: ResponsesRequest, seal: ReasoningSeal, today: datetime.date | None = None) -> Prompt:
    """The prompt's token ids, ending `<|start|>assistant`, and the tools a completion may call."""
    offered = request.tool_choice != "none"
    namespaces, tools, schemas = _namespaces(request) if offered else ([], {}, {})
    leading, rest = _leading_instructions(request)
    system = SystemContent.new().with_conversation_start_date((today or datetime.date.today()).isoformat())
    effort = request.reasoning.effort if request.reasoning else None
    system = system.with_reasoning_effort(EFFORTS.get(effort or "medium", ReasoningEffort.MEDIUM))
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    developer = DeveloperContent.new()
    formats = prompt_section(request.text.format if request.text else None)
    instructions = "\n\n".join(part for part in [*leading, formats] if part)
    if instructions:
        developer = developer.with_instructions(instructions)
    for namespace in namespaces:
        developer = developer.with_tools(namespace)
    if instructions or namespaces:
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    messages += _history(rest, tools, seal)
    has_functions = any(namespace.name == FUNCTIONS for namespace in namespaces)
    token_ids = [token for message in _kept(messages) for token in _rendered(message.to_json(), has_functions)]
    return Prompt(token_ids=token_ids + _assistant_turn(), tools=tools, function_schemas=schemas)


def render_whole(messages: list[Message]) -> list[int]:
    """openai-harmony's rendering of a whole conversation for the assistant's turn: the reference
    the piecewise rendering above is tested against."""
    return encoding().render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT)


def _kept(messages: list[Message]) -> list[Message]:
    """Harmony's auto_drop_analysis (openai-harmony 0.0.8): when the last assistant message is a final
    answer, the analysis messages before the first final answer are dropped."""
    assistant = [m for m in messages if m.author.role == Role.ASSISTANT]
    if not assistant or assistant[-1].channel != "final":
        return messages
    first_final = next(i for i, m in enumerate(messages) if m.author.role == Role.ASSISTANT and m.channel == "final")
    return [m for i, m in enumerate(messages) if not (i < first_final and m.channel == "analysis")]


@lru_cache(maxsize=1024)
def _rendered(message_json: str, has_functions: bool) -> tuple[int, ...]:
    message = Message.from_dict(json.loads(message_json))
    options = RenderOptions(conversation_has_function_tools=has_functions)
    return tuple(encoding().render(message, options))


@cache
def _assistant_turn() -> list[int]:
    return encoding().encode("<|start|>assistant", allowed_special="all")


def _namespaces(request: ResponsesRequest) -> tuple[list[ToolNamespaceConfig], dict[str, ClientTool], dict[str, dict]]:
    functions: list[ToolDescription] = []
    groups: list[ToolNamespaceConfig] = []
    tools: dict[str, ClientTool] = {}
    schemas: dict[str, dict] = {}
    for index, tool in enumerate(request.tools):
        if isinstance(tool, (FunctionTool, CustomTool)):
            functions.append(_described(tool, f"tools[{index}]", FUNCTIONS, None, tools, schemas))
        elif isinstance(tool, NamespaceTool):
            if tool.name == FUNCTIONS:
                raise ApiError(400, f"Invalid 'tools[{index}].name': '{FUNCTIONS}' is the namespace of top-level "
                               "function tools; give the group another name.", param=f"tools[{index}].name")  # fmt: skip
            members = [
                _described(member, f"tools[{index}].tools[{inner}]", tool.name, tool.name, tools, schemas)
                for inner, member in enumerate(tool.tools)
            ]
            groups.append(ToolNamespaceConfig(name=tool.name, description=tool.description or None, tools=members))
    if functions:
        groups.insert(0, ToolNamespaceConfig(name=FUNCTIONS, description=None, tools=functions))
    return groups, tools, schemas


def _described(
    tool: FunctionTool | CustomTool,
    where: str,
    harmony_namespace: str,
    client_namespace: str | None,
    tools: dict[str, ClientTool],
    schemas: dict[str, dict],
) -> ToolDescription:
    recipient = f"{harmony_namespace}.{tool.name}"
    if recipient in tools:
        raise ApiError(400, f"Invalid '{where}.name': a second tool named '{tool.name}'"
                       + (f" in namespace '{client_namespace}'." if client_namespace else "."), param=f"{where}.name")  # fmt: skip
    if isinstance(tool, CustomTool):
        parameters = {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT]}
        description = (tool.description or "") + "\nFree-form tool: pass its whole input as the string `input`."
    else:
        parameters = tool.parameters or {"type": "object", "properties": {}}
        description = tool.description or ""
        check_parameters(parameters, f"{where}.parameters")
    tools[recipient] = ClientTool(kind=tool.type, name=tool.name, namespace=client_namespace)
    schemas[recipient] = parameters
    return ToolDescription.new(tool.name, description.strip(), parameters=parameters)


def _leading_instructions(request: ResponsesRequest) -> tuple[list[str], list]:
    """`instructions` and the system/developer messages before anything else, as one text; the rest."""
    items = [MessageItem(role="user", content=request.input)] if isinstance(request.input, str) else request.input
    leading = [request.instructions] if request.instructions else []
    start = 0
    while start < len(items) and isinstance(items[start], MessageItem) and items[start].role in ("system", "developer"):
        leading.append(_text(items[start].content, f"input[{start}].content"))
        start += 1
    return leading, list(enumerate(items))[start:]


def _history(items: list, tools: dict[str, ClientTool], seal: ReasoningSeal) -> list[Message]:
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
                raise ApiError(400, f"Invalid '{where}.call_id': no function_call or custom_tool_call with call_id "
                               f"'{item.call_id}' comes before this output in the input.", param=f"{where}.call_id",
                               code="invalid_tool_output")  # fmt: skip
            output = _text(item.output, f"{where}.output")
            author = Author.new(Role.TOOL, calls[item.call_id])
            reply = Message.from_author_and_content(author, output).with_channel("commentary")
            messages.append(reply.with_recipient("assistant"))
    return messages


def _reasoning_text(item: ReasoningItem, where: str, seal: ReasoningSeal) -> str:
    if item.encrypted_content is not None:
        try:
            return seal.open(item.encrypted_content)
        except UnopenableReasoning:
            raise ApiError(400, f"Invalid '{where}.encrypted_content': it was not issued by this deployment, or it "
                           "was altered. Send reasoning items back exactly as they were received.",
                           param=f"{where}.encrypted_content", code="invalid_encrypted_content") from None  # fmt: skip
    parts = item.content if item.content is not None else item.summary
    return "".join(part.text for part in parts)


def _text(content: Content, where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, NonTextPart):
            raise ApiError(400, f"Invalid '{where}[{index}].type': '{part.type}'. gpt-oss reads text only; send "
                           "input_text parts.", param=f"{where}[{index}].type", code="unsupported_value")  # fmt: skip
        texts.append(part.refusal if isinstance(part, RefusalPart) else part.text)
    return "".join(texts)
