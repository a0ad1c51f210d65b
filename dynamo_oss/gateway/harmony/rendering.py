"""A conversation in harmony's terms, rendered into the token ids gpt-oss reads by openai-harmony itself.

Every API maps its request onto a `Conversation` (conversation.py for the Responses API, and the
Messages API through it): the developer message's instructions, the tools as harmony namespaces, the
reasoning effort, and the history as harmony messages. Rendering is openai-harmony's, so whatever
a client wrote is text in the prompt, never one of harmony's control tokens.

- Tools: function tools in the `functions` namespace; a `namespace` group as a harmony namespace
  of its name; a `custom` tool as a function taking one string, `input`. Hosted tools (web search,
  ...) are not offered: nothing here runs them.
- Which reasoning stays in the prompt is harmony's rule (openai-harmony's `auto_drop_analysis`):
  the chain of thought since the last final answer is kept while the assistant is between tool
  calls, and dropped once a final answer follows it.

Each message is rendered by openai-harmony on its own and remembered, in a cache of the tenant's own
(`RenderCache`): an agent sends its whole history every turn, and harmony takes about 0.2 ms a
message however short, so a long loop would otherwise pay for its history again and again. A cache
two tenants shared would render one faster what the other sent before, which tells it what the
other sent. The pieces are harmony's own; tests check that they join into exactly what harmony
renders for the whole conversation. A user's plain text, new in almost every request, is put
together here as harmony renders it, and not cached (its formatting tokens around the text encoded
as text: about 6 us, where harmony takes 0.1 ms for its formatting tokens and its JSON, the cache's
key, costs more than the text's encoding); a test compares the two.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from openai_harmony import (
    DeveloperContent,
    HarmonyEncoding,
    HarmonyEncodingName,
    Message,
    ReasoningEffort,
    RenderOptions,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
    load_harmony_encoding,
)

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.protocol.responses import CustomTool, FunctionTool, NamespaceTool, Tool
from dynamo_oss.gateway.validation import check_parameters

FUNCTIONS = "functions"  # harmony's namespace for plain function tools
CUSTOM_INPUT = "input"  # the one argument a custom tool is offered with
EFFORTS = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
}
OFF_LOOP_BYTES = 64 * 1024  # a request this long renders in a thread, as long prompts are counted
OFF_LOOP_ITEMS = 64  # as does a continuation of more stored items than this
RENDERED_BYTES = 32 * 2**20  # what a tenant's render cache may hold: its messages' JSON and their tokens


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
class Toolset:
    """The tools offered to gpt-oss: harmony's namespaces, and each recipient's tool and argument schema."""

    namespaces: list[ToolNamespaceConfig] = field(default_factory=list)
    tools: dict[str, ClientTool] = field(default_factory=dict)  # harmony recipient -> the client's tool
    schemas: dict[str, dict] = field(default_factory=dict)  # harmony recipient -> argument schema


@dataclass
class Conversation:
    """What an API's request says, in harmony's terms."""

    instructions: str  # the developer message's `# Instructions` ("" for none)
    toolset: Toolset
    effort: ReasoningEffort
    history: list[Message]  # every message after the system and developer messages
    date: datetime.date | None = None  # the conversation's start date (None: today)


@dataclass
class Prompt:
    token_ids: list[int]
    tools: dict[str, ClientTool]  # harmony recipient -> the client's tool
    function_schemas: dict[str, dict]  # harmony recipient -> argument schema, for a required tool choice


class RenderCache:
    """One tenant's rendered messages, the most recently used of them up to RENDERED_BYTES (counted as a
    message's JSON and 8 bytes a token). Rendering may run in a thread (`rendered`) beside the event
    loop, hence the lock."""

    def __init__(self, size: int = RENDERED_BYTES) -> None:
        self.size = size
        self.held = 0
        self._tokens: OrderedDict[tuple[str, bool], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def tokens(self, message: Message, has_functions: bool) -> tuple[int, ...]:
        """The message's tokens, rendered as in a conversation with (or without) function tools."""
        if _plain_user_text(message):  # cheaper to put together than to look up by its JSON
            return _user_text(message)
        key = (message.to_json(), has_functions)
        with self._lock:
            if key in self._tokens:
                self._tokens.move_to_end(key)
                return self._tokens[key]
        tokens = tuple(encoding().render(message, RenderOptions(conversation_has_function_tools=has_functions)))
        with self._lock:
            if key not in self._tokens:
                self._tokens[key] = tokens
                self.held += _weight(key, tokens)
            while self.held > self.size and self._tokens:
                old = self._tokens.popitem(last=False)
                self.held -= _weight(*old)
        return tokens


def _weight(key: tuple[str, bool], tokens: tuple[int, ...]) -> int:
    return len(key[0]) + 8 * len(tokens)


def _user_text(message: Message) -> tuple[int, ...]:
    """Harmony's rendering of a user's plain text, put together as harmony puts it: its text encoded as text."""
    before, after = _user_turn()
    return (*before, *encoding().encode(message.content[0].text, disallowed_special=()), *after)  # type: ignore[union-attr]


def _plain_user_text(message: Message) -> bool:
    """A user's message of one text, without a name, channel, recipient or content type."""
    author, content = message.author, message.content
    return (
        author.role == Role.USER
        and author.name is None
        and len(content) == 1
        and isinstance(content[0], TextContent)
        and message.channel is None
        and message.recipient is None
        and message.content_type is None
    )


def render(conversation: Conversation, cache: RenderCache) -> Prompt:
    """The prompt's token ids, ending `<|start|>assistant`, and the tools a completion may call."""
    date = (conversation.date or datetime.date.today()).isoformat()
    system = SystemContent.new().with_conversation_start_date(date).with_reasoning_effort(conversation.effort)
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    toolset = conversation.toolset
    developer = DeveloperContent.new()
    if conversation.instructions:
        developer = developer.with_instructions(conversation.instructions)
    for namespace in toolset.namespaces:
        developer = developer.with_tools(namespace)
    if conversation.instructions or toolset.namespaces:
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    messages += conversation.history
    has_functions = any(namespace.name == FUNCTIONS for namespace in toolset.namespaces)
    token_ids = [token for message in _kept(messages) for token in cache.tokens(message, has_functions)]
    return Prompt(token_ids=token_ids + _assistant_turn(), tools=toolset.tools, function_schemas=toolset.schemas)


async def rendered(conversation: Callable[[], Conversation], cache: RenderCache, heavy: bool) -> Prompt:
    """`render` of the conversation `conversation()` makes; in a thread when `heavy` (a long body, or a
    long stored conversation), so the event loop keeps streaming everyone else's tokens."""
    if heavy:
        return await asyncio.to_thread(lambda: render(conversation(), cache))
    return render(conversation(), cache)


def toolset(tools: list[Tool], field: str = "tools[{}]") -> Toolset:
    """The request's tools as harmony namespaces (hosted tools are left out: nothing here runs them);
    a second tool of one name, or a schema that is not JSON Schema, is an ApiError naming it, the
    tool at index i being `field.format(i)` in the request."""
    functions: list[ToolDescription] = []
    offered = Toolset()
    for index, tool in enumerate(tools):
        where = field.format(index)
        if isinstance(tool, (FunctionTool, CustomTool)):
            functions.append(_described(tool, where, FUNCTIONS, None, offered))
        elif isinstance(tool, NamespaceTool):
            if tool.name == FUNCTIONS:
                raise ApiError(
                    400,
                    f"Invalid '{where}.name': '{FUNCTIONS}' is the namespace of top-level "
                    "function tools; give the group another name.",
                    param=f"{where}.name",
                )
            members = [
                _described(member, f"{where}.tools[{inner}]", tool.name, tool.name, offered)
                for inner, member in enumerate(tool.tools)
            ]
            description = tool.description or None
            offered.namespaces.append(ToolNamespaceConfig(name=tool.name, description=description, tools=members))
    if functions:
        offered.namespaces.insert(0, ToolNamespaceConfig(name=FUNCTIONS, description=None, tools=functions))
    return offered


def _described(
    tool: FunctionTool | CustomTool, where: str, harmony_namespace: str, client_namespace: str | None, offered: Toolset
) -> ToolDescription:
    recipient = f"{harmony_namespace}.{tool.name}"
    if recipient in offered.tools:
        raise ApiError(
            400,
            f"Invalid '{where}.name': a second tool named '{tool.name}'"
            + (f" in namespace '{client_namespace}'." if client_namespace else "."),
            param=f"{where}.name",
        )
    if isinstance(tool, CustomTool):
        parameters = {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT]}
        description = (tool.description or "") + "\nFree-form tool: pass its whole input as the string `input`."
    else:
        parameters = tool.parameters or {"type": "object", "properties": {}}
        description = tool.description or ""
        check_parameters(parameters, f"{where}.parameters")
    offered.tools[recipient] = ClientTool(kind=tool.type, name=tool.name, namespace=client_namespace)
    offered.schemas[recipient] = parameters
    return ToolDescription.new(tool.name, description.strip(), parameters=parameters)


def _kept(messages: list[Message]) -> list[Message]:
    """Harmony's auto_drop_analysis (openai-harmony 0.0.8): when the last assistant message is a final
    answer, the analysis messages before the first final answer are dropped."""
    assistant = [m for m in messages if m.author.role == Role.ASSISTANT]
    if not assistant or assistant[-1].channel != "final":
        return messages
    first_final = next(i for i, m in enumerate(messages) if m.author.role == Role.ASSISTANT and m.channel == "final")
    return [m for i, m in enumerate(messages) if not (i < first_final and m.channel == "analysis")]


@cache
def _assistant_turn() -> list[int]:
    return encoding().encode("<|start|>assistant", allowed_special="all")


@cache
def _user_turn() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The tokens harmony renders before and after a user's text."""
    before = encoding().encode("<|start|>user<|message|>", allowed_special="all")
    return tuple(before), tuple(encoding().encode("<|end|>", allowed_special="all"))
