"""The Anthropic Messages API request, as the `anthropic` SDK and Claude Code send it.

Anthropic's API refuses a field it does not define ("Extra inputs are not permitted"), so these
models do too, at every level: a client learns at once that a field did nothing. Fields Anthropic
defines that change nothing here (`cache_control`, `metadata`, `service_tier`, `container`, ...)
are accepted and ignored: prefix caching is automatic, and a graph has one tier. Content gpt-oss
cannot read (images, documents) is typed so that the route can refuse it by name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from dynamo_oss.gateway.protocol.formats import CompilableSchema

# Content blocks Anthropic defines that are not text: refused by name (gpt-oss reads text, and
# nothing here runs Anthropic's server tools, so their results never appear in a conversation).
NON_TEXT_BLOCKS = (
    "image",
    "document",
    "search_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
    "tool_reference",
    "browser_state",
)


class Strict(BaseModel):
    """A part of the request Anthropic defines in full: an unknown field is refused."""

    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A part whose other fields Anthropic defines per variant (tool versions): kept and ignored."""

    model_config = ConfigDict(extra="allow")


class CacheControl(Strict):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class ThinkingBlock(Strict):
    """The chain of thought handed back, with the signature this deployment gave it."""

    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(Strict):
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlock(Strict):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None
    toolset_name: str | None = None


class NonTextBlock(Lenient):
    """Images, documents and server-tool blocks: their shape is Anthropic's, the route refuses them."""

    type: Literal[NON_TEXT_BLOCKS]  # type: ignore[valid-type]


ResultPart = Annotated[TextBlock | NonTextBlock, Field(discriminator="type")]


class ToolResultBlock(Strict):
    """What the client's tool returned, for the tool_use with `tool_use_id`."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ResultPart] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock | NonTextBlock,
    Field(discriminator="type"),
]


class Message(Strict):
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class CustomTool(Strict):
    """A tool the client runs, described by a JSON Schema: offered to gpt-oss as a function."""

    type: Literal["custom"] | None = None
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any]
    cache_control: CacheControl | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[str] | None = None


class AnthropicTool(Lenient):
    """A tool Anthropic defines (`bash_20250124`, `web_search_20250305`, ...): its schema is
    Anthropic's own and its server tools run on Anthropic's servers, so it is not offered to
    gpt-oss; the request is served with the other tools."""

    type: str
    name: str


def _tool_kind(tool: Any) -> str:
    kind = tool.get("type") if isinstance(tool, dict) else getattr(tool, "type", None)
    return "custom" if kind in (None, "custom") else "anthropic"


Tool = Annotated[
    Annotated[CustomTool, Tag("custom")] | Annotated[AnthropicTool, Tag("anthropic")], Discriminator(_tool_kind)
]


class ToolChoiceAuto(Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(Strict):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(Strict):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(Strict):
    type: Literal["none"]


ToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")]


class ThinkingEnabled(Strict):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)
    display: Literal["summarized", "omitted", "updates"] | None = None  # "updates" (a beta): shown, as summarized


class ThinkingAdaptive(Strict):
    type: Literal["adaptive"]
    display: Literal["summarized", "omitted", "updates"] | None = None


class ThinkingDisabled(Strict):
    type: Literal["disabled"]


class ThinkingBetweenTools(Strict):
    type: Literal["between_tools"]


Thinking = Annotated[
    ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled | ThinkingBetweenTools, Field(discriminator="type")
]


class JsonOutputFormat(Strict):
    """The final answer's JSON schema: constrained as the Responses API's `text.format` is."""

    type: Literal["json_schema"]
    schema_: CompilableSchema = Field(alias="schema")


class OutputConfig(Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class Metadata(Strict):
    user_id: str | None = None


class MessagesRequest(Strict):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    tools: list[Tool] = []
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    # Sampling: Anthropic's older models take these, and gpt-oss honours them.
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    # Dynamo's extensions a client may set (annotations: validation.py), as on the OpenAI APIs.
    nvext: dict[str, list[str]] | None = None
    # Accepted and ignored: they change nothing on a graph (one tier, one region, automatic prefix caching).
    metadata: Metadata | None = None
    cache_control: CacheControl | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    speed: Literal["standard", "fast"] | None = None
    inference_geo: str | None = None
    container: str | dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class BetaMessagesRequest(MessagesRequest):
    """A request to the beta Messages API (`/v1/messages?beta=true`, as Claude Code and the SDK's
    `client.beta.messages` call it), which takes a few fields more. Server-side context editing and
    compaction (`context_management`, `compaction`) are not done here: the client sends the whole
    conversation, as it would without them. MCP servers would need the gateway to run their tools,
    so the route refuses any."""

    context_management: dict[str, Any] | None = None
    compaction: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] = []
    thread: dict[str, Any] | None = None
    fallbacks: list[Any] | dict[str, Any] | None = None
    billing_policy: dict[str, Any] | str | None = None
    fallback_credit_token: str | dict[str, Any] | None = None


class CountTokensRequest(MessagesRequest):
    """POST /v1/messages/count_tokens: a Messages request counted, not run, so it asks for no output."""

    max_tokens: int | None = Field(default=None, ge=1)  # type: ignore[assignment]


class BetaCountTokensRequest(BetaMessagesRequest):
    """The same, of the beta Messages API (`?beta=true`, as Claude Code counts)."""

    max_tokens: int | None = Field(default=None, ge=1)  # type: ignore[assignment]
