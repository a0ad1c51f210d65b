"""The conformance suite: one case per way a gpt-oss endpoint has been seen to go wrong.

Each case is a request, the harmony completion a model would give to it (which Dynamo's
mocker replays when asked, so the suite needs no GPU), and a check of what the endpoint
returned. Checks look at the output's shape, never at exact wording, so they hold for a
real model too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from dynamo_oss.conformance.outcome import Outcome

HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
# What harmony looks like once a server strips the special tokens but not the headers.
STRIPPED_HEADERS = re.compile(r"^analysis|assistantfinal|assistantcommentary|assistantanalysis|<\|constrain\|>json")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}]
GREETING = [{"role": "user", "content": "Say hello in one short sentence."}]
# Long enough to fill several KV blocks, so a prefix-cache hit shows in cached_tokens; {run} is
# replaced by an id per run, so only this run's warm-up can be in the cache.
EFFORT_PROBE = [{"role": "user", "content": "Run {run}. " + "Name the planets of the solar system in order. " * 12}]

FINAL = (
    "<|channel|>analysis<|message|>The user wants a short greeting. I will greet them.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! Nice to meet you.<|return|>"
)
TOOL_CALL = (
    "<|channel|>analysis<|message|>I need the weather, so I call the tool.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
TOOL_CALL_ON_ANALYSIS = (
    '<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)

Check = Callable[[Outcome], str | None]  # None when the outcome passes, else why it fails


@dataclass(frozen=True)
class Case:
    name: str
    why: str  # the failure seen in the wild that this case catches
    body: dict[str, Any]  # the request, less model and the replay annotation
    checks: list[Check]
    api: Literal["chat", "responses"] = "chat"
    replay: str | None = None  # harmony completion the mocker replays for this case
    max_tokens: int = 256
    prompt: dict[str, Any] = field(default_factory=dict)  # reference_prompt() arguments, for token counts
    warmup: dict[str, Any] | None = None  # a request sent first, unjudged

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


def no_harmony_leak(outcome: Outcome) -> str | None:
    for where, text in outcome.texts().items():
        if any(marker in text for marker in HARMONY_MARKERS) or STRIPPED_HEADERS.search(text):
            return f"harmony tokens leak into {where}: {text[:80]!r}"
    return None


def has_content(outcome: Outcome) -> str | None:
    return None if outcome.content.strip() else "no answer in content (the final channel was lost)"


def has_reasoning(outcome: Outcome) -> str | None:
    if outcome.reasoning.strip():
        return None
    return "no reasoning returned (the analysis channel went missing or into content)"


def finish(expected: str) -> Check:
    def check(outcome: Outcome) -> str | None:
        if outcome.finish_reason == expected:
            return None
        return f"finish_reason is {outcome.finish_reason!r}, expected {expected!r}"

    return check


def weather_call(outcome: Outcome) -> str | None:
    if not outcome.tool_calls:
        hint = " (it sits in the reasoning: emitted on the analysis channel and dropped)" if (
            "get_weather" in outcome.reasoning or "functions." in outcome.reasoning
        ) else ""
        return "no tool call returned" + hint
    name, arguments = outcome.tool_calls[0]
    if name != "get_weather":
        return f"tool call names {name!r}, expected 'get_weather'"
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return f"tool call arguments are not JSON: {arguments[:80]!r}"
    if not isinstance(parsed, dict) or "city" not in parsed:
        return f"tool call arguments lack the required 'city': {arguments[:80]!r}"
    return None


def prompt_tokens_match_harmony(outcome: Outcome) -> str | None:
    """The endpoint's prompt_tokens must be harmony's rendering (with or without today's date line)."""
    if outcome.prompt_tokens is None:
        return "no usage.prompt_tokens returned"
    if outcome.prompt_tokens in outcome.reference_prompt_tokens:
        return None
    expected = " or ".join(map(str, sorted(outcome.reference_prompt_tokens)))
    return f"prompt_tokens is {outcome.prompt_tokens}, harmony renders {expected}"


class Inconclusive(Exception):
    """The endpoint does not report what a check needs; the case is skipped, not failed."""


def effort_applied(outcome: Outcome) -> str | None:
    """`Reasoning: high` changes the system message, near the start of the prompt, but not its
    length ("medium" and "high" are one token each); so the same request at the default effort
    goes first, and an endpoint that ignored the effort serves the second prompt from its
    prefix cache almost whole."""
    if outcome.cached_tokens is None or outcome.prompt_tokens is None:
        raise Inconclusive("the endpoint reports no prompt_tokens_details.cached_tokens")
    if outcome.cached_tokens >= outcome.prompt_tokens // 2:
        return (
            f"reasoning_effort ignored: {outcome.cached_tokens} of {outcome.prompt_tokens} prompt tokens came "
            "from the cache of the same request at the default effort"
        )
    return None


CASES: list[Case] = [
    Case(
        "final-answer",
        "harmony tokens leaking into content; the final channel lost",
        {"messages": GREETING},
        [no_harmony_leak, has_content, has_reasoning, finish("stop")],
        replay=FINAL,
    ),
    Case(
        "final-answer-stream",
        "streams that leak headers or end without finish_reason",
        {"messages": GREETING, "stream": True},
        [no_harmony_leak, has_content, has_reasoning, finish("stop")],
        replay=FINAL,
    ),
    Case(
        "tool-call",
        "commentary-channel calls returned as text instead of tool_calls",
        {"messages": ASK_WEATHER, "tools": [WEATHER_TOOL]},
        [no_harmony_leak, weather_call, finish("tool_calls")],
        replay=TOOL_CALL,
    ),
    Case(
        "tool-call-stream",
        "streamed tool calls that end without finish_reason",
        {"messages": ASK_WEATHER, "tools": [WEATHER_TOOL], "stream": True},
        [no_harmony_leak, weather_call, finish("tool_calls")],
        replay=TOOL_CALL,
    ),
    Case(
        "tool-call-on-analysis",
        "tool calls the model emits on the analysis channel, dropped",
        {"messages": ASK_WEATHER, "tools": [WEATHER_TOOL]},
        [no_harmony_leak, weather_call, finish("tool_calls")],
        replay=TOOL_CALL_ON_ANALYSIS,
    ),
    Case(
        "length",
        "finish_reason stop for an answer cut by max_tokens",
        {"messages": GREETING},
        [no_harmony_leak, finish("length")],
        max_tokens=8,  # no replay: the mocker replays only when max_tokens covers the whole answer
    ),
    Case(
        "prompt-tokens",
        "prompt token counts that disagree with harmony's rendering",
        {"messages": [{"role": "system", "content": "You are terse."}, *ASK_WEATHER], "tools": [WEATHER_TOOL]},
        [prompt_tokens_match_harmony],
        replay=TOOL_CALL,
        prompt={"tools": [WEATHER_TOOL]},
    ),
    Case(
        "reasoning-effort",
        "reasoning_effort ignored",
        {"messages": EFFORT_PROBE, "reasoning_effort": "high"},
        [effort_applied, prompt_tokens_match_harmony],
        replay=FINAL,
        prompt={"reasoning_effort": "high"},
        warmup={"messages": EFFORT_PROBE},
    ),
    Case(
        "responses-final",
        "the Responses API returning harmony text instead of reasoning and message items",
        {"input": "Say hello in one short sentence."},
        # OpenAI's Responses API returns no raw reasoning (Dynamo's neither): only the answer is checked.
        [no_harmony_leak, has_content],
        api="responses",
        replay=FINAL,
    ),
    Case(
        "responses-tool-call",
        "the Responses API dropping function calls",
        {"input": "What is the weather in Paris right now? Use the get_weather tool.",
         "tools": [{"type": "function", **WEATHER_TOOL["function"]}]},
        [no_harmony_leak, weather_call],
        api="responses",
        replay=TOOL_CALL,
    ),
]
