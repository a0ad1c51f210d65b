"""The Responses API request, as clients send it (Codex CLI, the Agents SDK, the openai client).

Fields the gateway acts on are typed; other fields OpenAI defines (`prompt_cache_key`,
`service_tier`, `client_metadata`, ...) are accepted and ignored, as a client written for
OpenAI's server sends them. Anything that would change the answer and cannot be honoured is
refused with the field named (`invalid_fields`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from dynamo_oss.gateway.protocol.formats import ResponsesTextFormat

TEXT_PART_TYPES = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
HOSTED_TOOL_EXAMPLES = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "local_shell",
    "shell",
    "apply_patch",
    "mcp",
    "tool_search",
)


class Lenient(BaseModel):
    """A part of the request OpenAI may extend: unknown fields are kept and ignored."""

    model_config = ConfigDict(extra="allow")


class TextPart(Lenient):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class RefusalPart(Lenient):
    type: Literal["refusal"]
    refusal: str


class NonTextPart(Lenient):
    """Images, files and audio: gpt-oss reads text only, so these are refused by name."""

    type: Literal["input_image", "input_file", "input_audio"]


Part = Annotated[TextPart | RefusalPart | NonTextPart, Field(discriminator="type")]
Content = str | list[Part]


class MessageItem(Lenient):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: str | None = None


class ReasoningItem(Lenient):
    """The chain of thought handed back: as `content`, or sealed in `encrypted_content` by this
    deployment (`include: ["reasoning.encrypted_content"]`), or only as a summary."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[TextPart] = []
    content: list[TextPart] | None = None
    encrypted_content: str | None = None


class FunctionCallItem(Lenient):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None
    id: str | None = None


class CustomToolCallItem(Lenient):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    namespace: str | None = None
    id: str | None = None


class FunctionCallOutputItem(Lenient):
    """What the client's function returned, for the call with `call_id`."""

    type: Literal["function_call_output"]
    call_id: str
    output: Content


class CustomToolCallOutputItem(Lenient):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: Content


class ItemReference(Lenient):
    """An item of a response stored earlier, by its id: what OpenAI's clients send back, with `store` on,
    instead of the item itself (the Vercel AI SDK does for reasoning, calls and messages alike)."""

    type: Literal["item_reference"] | None = "item_reference"
    id: str


def _item_kind(item: Any) -> str | None:
    """A message may leave out its type (`{"role": "user", "content": "..."}`), and so may an item
    reference (`{"id": "msg_..."}`), as OpenAI's API allows."""
    if not isinstance(item, dict):
        return getattr(item, "type", None) or "item_reference"
    if item.get("type") is None and "role" not in item and "id" in item:
        return "item_reference"
    return item.get("type", "message")


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]
ToolOutputItem = FunctionCallOutputItem | CustomToolCallOutputItem
ToolCallItem = FunctionCallItem | CustomToolCallItem


TOOL_NAME = r"^[A-Za-z0-9_\-]{1,128}$"  # OpenAI's characters for a tool's name


class FunctionTool(Lenient):
    type: Literal["function"]
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomTool(Lenient):
    """A tool taking free-form text (`format` may give a grammar): offered to gpt-oss as a
    function of one string, `input`, and returned as a `custom_tool_call`."""

    type: Literal["custom"]
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    format: dict[str, Any] | None = None


NamespacedTool = Annotated[FunctionTool | CustomTool, Field(discriminator="type")]


class NamespaceTool(Lenient):
    """A group of tools, rendered as a harmony namespace of its own name."""

    type: Literal["namespace"]
    name: str = Field(pattern=TOOL_NAME)
    description: str = ""
    tools: list[NamespacedTool]


class HostedTool(Lenient):
    """A tool OpenAI's servers run (web search, file search, code interpreter, ...). A graph has
    none of them: it is accepted, echoed in the response, and not offered to the model."""

    type: str


def _tool_kind(tool: Any) -> str:
    kind = tool.get("type") if isinstance(tool, dict) else getattr(tool, "type", None)
    return kind if kind in ("function", "custom", "namespace") else "hosted"


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[HostedTool, Tag("hosted")],
    Discriminator(_tool_kind),
]


class NamedToolChoice(Lenient):
    type: Literal["function", "custom"]
    name: str


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice | dict[str, Any]


class ReasoningOptions(Lenient):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None


class TextOptions(Lenient):
    format: ResponsesTextFormat | None = None


class ResponsesRequest(Lenient):
    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[Tool] = []
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    reasoning: ReasoningOptions | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    text: TextOptions | None = None
    include: list[str] = []
    store: bool | None = None
    stream: bool = False
    background: bool | None = None  # answered at once and run to its end without the client (background.py)
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    # Engine options Dynamo's frontend takes beside OpenAI's (benchmarks fix output lengths with them).
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(default=None, ge=0)
    nvext: dict[str, list[str]] | None = None  # Dynamo's extensions a client may set (validation.py), passed on

    def wants_sealed_reasoning(self) -> bool:
        return "reasoning.encrypted_content" in self.include
