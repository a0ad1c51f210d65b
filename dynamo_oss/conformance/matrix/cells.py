"""The combinations the matrix runs, and the request each one is on its API.

Why these: harmony's known failures each live in a combination (a tool call lost only when
streamed, `tool_choice: required` ignored only on one API, JSON that breaks only beside a tool),
so every combination is asked, in each API's own words: the same two tools, the same question
and the same schema, whichever API carries them.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Api = Literal["chat", "responses", "messages"]
ToolChoice = Literal["none", "auto", "required", "named"]
Output = Literal["text", "json_schema"]
Effort = Literal["low", "medium", "high"]

APIS: tuple[Api, ...] = ("chat", "responses", "messages")
TOOL_CHOICES: tuple[ToolChoice, ...] = ("none", "auto", "required", "named")
OUTPUTS: tuple[Output, ...] = ("text", "json_schema")
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")
MAX_TOKENS = 2048  # room for a real model's high-effort reasoning before the answer

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
LOCAL_TIME = {
    "name": "get_local_time",
    "description": "The local time in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TOOLS = (WEATHER, LOCAL_TIME)
NAMED_TOOL = LOCAL_TIME  # not the tool the question suggests: a named choice must still win
REPORT = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow"]},
        "temperature_c": {"type": "number"},
        "advice": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "conditions", "temperature_c", "advice"],
    "additionalProperties": False,
}
REPORT_NAME = "weather_report"


def question(nonce: str) -> str:
    """The user's turn; the nonce makes every run's prompt its own (no earlier answer is reused)."""
    return f"[{nonce}] What is the weather in Paris right now, and what should I wear? Use the tools if useful."


class Cell(BaseModel):
    """One combination of the matrix. Both tools are offered in every cell; "none" forbids their use."""

    model_config = ConfigDict(frozen=True)
    api: Api
    stream: bool
    tool_choice: ToolChoice
    output: Output
    effort: Effort

    def label(self) -> str:
        return f"{self.api} {'stream' if self.stream else 'whole'} tools:{self.tool_choice} {self.output} {self.effort}"


def every_cell() -> list[Cell]:
    return [
        Cell(api=api, stream=stream, tool_choice=choice, output=output, effort=effort)
        for api, stream, choice, output, effort in itertools.product(
            APIS, (False, True), TOOL_CHOICES, OUTPUTS, EFFORTS
        )
    ]


def chat_request(cell: Cell, model: str, nonce: str) -> dict[str, Any]:
    choice: Any = {"type": "function", "function": {"name": NAMED_TOOL["name"]}}
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "stream": cell.stream,
        "reasoning_effort": cell.effort,
        "messages": [{"role": "user", "content": question(nonce)}],
        "tools": [{"type": "function", "function": tool} for tool in TOOLS],
        "tool_choice": choice if cell.tool_choice == "named" else cell.tool_choice,
    }
    if cell.stream:
        request["stream_options"] = {"include_usage": True}
    if cell.output == "json_schema":
        request["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": REPORT_NAME, "schema": REPORT, "strict": True},
        }
    return request


def responses_request(cell: Cell, model: str, nonce: str) -> dict[str, Any]:
    choice: Any = {"type": "function", "name": NAMED_TOOL["name"]}
    request: dict[str, Any] = {
        "model": model,
        "max_output_tokens": MAX_TOKENS,
        "stream": cell.stream,
        "store": False,
        "reasoning": {"effort": cell.effort},
        "input": question(nonce),
        "tools": [{"type": "function", **tool} for tool in TOOLS],
        "tool_choice": choice if cell.tool_choice == "named" else cell.tool_choice,
    }
    if cell.output == "json_schema":
        request["text"] = {"format": {"type": "json_schema", "name": REPORT_NAME, "schema": REPORT, "strict": True}}
    return request


def messages_request(cell: Cell, model: str, nonce: str) -> dict[str, Any]:
    """Anthropic's words: `any` is required, `tool` a named tool; effort and format in `output_config`."""
    choice = {
        "none": {"type": "none"},
        "auto": {"type": "auto"},
        "required": {"type": "any"},
        "named": {"type": "tool", "name": NAMED_TOOL["name"]},
    }[cell.tool_choice]
    output_config: dict[str, Any] = {"effort": cell.effort}
    if cell.output == "json_schema":
        output_config["format"] = {"type": "json_schema", "schema": REPORT}
    return {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "stream": cell.stream,
        "output_config": output_config,
        "messages": [{"role": "user", "content": question(nonce)}],
        "tools": [
            {"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}
            for tool in TOOLS
        ],
        "tool_choice": choice,
    }
