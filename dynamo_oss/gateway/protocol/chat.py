"""The Chat Completions request, as clients send it (the openai client, the Agents SDK, aiperf).

Fields the gateway acts on are typed; other fields OpenAI defines (`user`, `metadata`, `store`,
`service_tier`, ...) are accepted and ignored, as a client written for OpenAI's server sends them.
`logprobs` is refused when asked for: the gateway builds the answer from the completion's harmony,
and does not map a completion's log-probabilities onto chat's yet.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynamo_oss.gateway.protocol.formats import ChatResponseFormat
from dynamo_oss.gateway.protocol.responses import TOOL_NAME, Lenient

EFFORT = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ChatTextPart(Lenient):
    type: Literal["text"]
    text: str


class ChatRefusalPart(Lenient):
    type: Literal["refusal"]
    refusal: str


class ChatNonTextPart(Lenient):
    """Images, audio and files: gpt-oss reads text only, so these are refused by name."""

    type: Literal["image_url", "input_audio", "file"]


ChatPart = Annotated[ChatTextPart | ChatRefusalPart | ChatNonTextPart, Field(discriminator="type")]


class ChatFunctionCall(Lenient):
    name: str
    arguments: str


class ChatToolCall(Lenient):
    """A call the assistant made, sent back with its message."""

    id: str
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ChatPart] | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    # The chain of thought of an assistant message sent back: OpenRouter's name, and vLLM's.
    reasoning: str | None = None
    reasoning_content: str | None = None


class ChatFunction(Lenient):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(Lenient):
    type: Literal["function"]
    function: ChatFunction


class ChatNamedFunction(Lenient):
    name: str


class ChatNamedChoice(Lenient):
    type: Literal["function"]
    function: ChatNamedFunction


ChatToolChoice = Literal["none", "auto", "required"] | ChatNamedChoice


class ReasoningOptions(BaseModel):
    """OpenRouter's `reasoning` request field, as OpenAI's gpt-oss guide asks providers to take it."""

    model_config = ConfigDict(extra="forbid")
    exclude: bool = False
    effort: EFFORT | None = None
    enabled: bool | None = None
    max_tokens: int | None = None


class StreamOptions(Lenient):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class ChatRequest(Lenient):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: ChatToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ChatResponseFormat | None = None
    reasoning_effort: EFFORT | None = None
    reasoning: ReasoningOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Engine options Dynamo's frontend takes beside OpenAI's (benchmarks fix output lengths with them).
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(default=None, ge=0)
    top_k: int | None = None
    # Variables of a chat template, Dynamo's two names for them: `reasoning_effort` is taken from them.
    chat_template_args: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    nvext: dict[str, list[str]] | None = None  # Dynamo's extensions a client may set (validation.py)

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("log-probabilities are not returned by this endpoint; leave logprobs out")
        return value

    def effort(self) -> str | None:
        """The reasoning effort asked for: `reasoning_effort`, OpenRouter's `reasoning.effort`, or a
        template variable of that name, in that order."""
        variables = self.chat_template_args or self.chat_template_kwargs or {}
        templated = variables.get("reasoning_effort")
        templated = templated if isinstance(templated, str) else None  # any other value is not an effort
        return self.reasoning_effort or (self.reasoning.effort if self.reasoning else None) or templated

    def stop_sequences(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return [stop for stop in stops if stop]
