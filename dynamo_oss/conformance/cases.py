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
NAMESPACED_CALL = (
    "<|channel|>analysis<|message|>I read the file with the files tool.<|end|>"
    '<|start|>assistant<|channel|>commentary to=files.read_file <|constrain|>json<|message|>{"path": "README.md"}<|call|>'
)
CUSTOM_CALL = (
    "<|channel|>analysis<|message|>I patch the file.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>"
    '{"input": "*** Begin Patch\\n*** End Patch"}<|call|>'
)
RESPONSES_WEATHER = {"type": "function", **WEATHER_TOOL["function"]}
FILES_NAMESPACE = {
    "type": "namespace",
    "name": "files",
    "description": "File tools.",
    "tools": [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        }
    ],
}
PATCH_TOOL = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch (free-form)."}
HOSTED_TOOLS = [
    {"type": "web_search"},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "image_generation"},
]
# A turn handed back as a stateless client keeps it: reasoning, the call, the tool's output.
TOOL_LOOP_INPUT = [
    {"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "I call get_weather."}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
]
REASONING_SENT_BACK = [
    *ASK_WEATHER,
    {
        "role": "assistant",
        "content": None,
        "reasoning": "I need the weather, so I call the tool.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
]

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
    extra_body: dict[str, Any] = field(default_factory=dict)  # fields the openai client has no argument for

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


def has_reasoning_field(outcome: Outcome) -> str | None:
    """OpenAI's rule for gpt-oss providers: the chain of thought as `reasoning` (message and deltas)."""
    if outcome.reasoning_field.strip():
        return None
    where = " (only as reasoning_content)" if outcome.reasoning.strip() else ""
    return "no 'reasoning' property on the message or its deltas" + where


def no_reasoning(outcome: Outcome) -> str | None:
    if outcome.reasoning or outcome.reasoning_field:
        return "reasoning returned although the request said reasoning: {exclude: true}"
    return None


def reasoning_item(outcome: Outcome) -> str | None:
    """The Responses rule: a `reasoning` item whose content holds the raw chain of thought."""
    items = [item for item in outcome.items if item.get("type") == "reasoning"]
    if not items:
        return "no reasoning output item"
    parts = [part for item in items for part in item.get("content") or []]
    if not any(part.get("type") == "reasoning_text" and part.get("text") for part in parts):
        return "the reasoning item has no reasoning_text content"
    if not all(item.get("id") for item in outcome.items):
        return "an output item has no id"
    return None


def sealed_reasoning(outcome: Outcome) -> str | None:
    for item in outcome.items:
        if item.get("type") != "reasoning":
            continue
        sealed = item.get("encrypted_content")
        text = "".join(part.get("text", "") for part in item.get("content") or [])
        if not sealed:
            return "include asked for reasoning.encrypted_content; the reasoning item has none"
        if text and text in sealed:
            return "encrypted_content holds the reasoning in the clear"
        return None
    return "no reasoning output item"


RESPONSE_STREAM_ORDER = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.output_item.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.completed",
)


def stream_events(outcome: Outcome) -> str | None:
    """OpenAI's event sequence: created first, completed last, reasoning and text deltas between,
    each event with a rising sequence_number."""
    kinds = [event.get("type") for event in outcome.events]
    missing = [kind for kind in RESPONSE_STREAM_ORDER if kind not in kinds]
    if missing:
        return f"the stream lacks {', '.join(missing)}"
    if kinds[0] != "response.created" or kinds[-1] != "response.completed":
        return f"the stream begins with {kinds[0]} and ends with {kinds[-1]}"
    numbers = [event.get("sequence_number") for event in outcome.events]
    if any(not isinstance(n, int) for n in numbers) or numbers != sorted(set(numbers)):
        return "sequence_number is missing or does not rise"
    return None


def namespaced_call(outcome: Outcome) -> str | None:
    calls = [item for item in outcome.items if item.get("type") == "function_call"]
    if not calls:
        return "no function_call item for the namespaced tool"
    call = calls[0]
    if (call.get("namespace"), call.get("name")) != ("files", "read_file"):
        return f"the call names namespace {call.get('namespace')!r} and tool {call.get('name')!r}, expected 'files' and 'read_file'"
    return None


def custom_call(outcome: Outcome) -> str | None:
    calls = [item for item in outcome.items if item.get("type") == "custom_tool_call"]
    if not calls:
        kinds = [item.get("type") for item in outcome.items]
        return f"no custom_tool_call item for the custom tool (items: {kinds})"
    if calls[0].get("name") != "apply_patch" or not isinstance(calls[0].get("input"), str):
        return "the custom_tool_call lacks the tool's name or a string input"
    return None


def finish(expected: str) -> Check:
    def check(outcome: Outcome) -> str | None:
        if outcome.finish_reason == expected:
            return None
        return f"finish_reason is {outcome.finish_reason!r}, expected {expected!r}"

    return check


def weather_call(outcome: Outcome) -> str | None:
    if not outcome.tool_calls:
        hint = (
            " (it sits in the reasoning: emitted on the analysis channel and dropped)"
            if ("get_weather" in outcome.reasoning or "functions." in outcome.reasoning)
            else ""
        )
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
        "chat-reasoning-field",
        "the chain of thought only as reasoning_content, not as the 'reasoning' OpenAI's gpt-oss rules name",
        {"messages": GREETING},
        [has_reasoning_field, has_content],
        replay=FINAL,
    ),
    Case(
        "chat-reasoning-field-stream",
        "streamed deltas without 'reasoning'",
        {"messages": GREETING, "stream": True},
        [has_reasoning_field, has_content],
        replay=FINAL,
    ),
    Case(
        "chat-reasoning-exclude",
        "reasoning: {exclude: true} refused or ignored",
        {"messages": GREETING},
        [no_reasoning, has_content],
        replay=FINAL,
        extra_body={"reasoning": {"exclude": True}},
    ),
    Case(
        "chat-reasoning-sent-back",
        "an assistant message's 'reasoning' refused, or dropped from the prompt between tool calls",
        {"messages": REASONING_SENT_BACK, "tools": [WEATHER_TOOL]},
        [prompt_tokens_match_harmony, has_content],
        replay=FINAL,
        prompt={"tools": [WEATHER_TOOL]},
    ),
    Case(
        "responses-final",
        "the Responses API returning harmony text, or no reasoning item (dynamo issue 14069)",
        {"input": "Say hello in one short sentence."},
        [no_harmony_leak, has_content, reasoning_item],
        api="responses",
        replay=FINAL,
    ),
    Case(
        "responses-stream",
        "Responses streams without reasoning events, or out of OpenAI's order",
        {"input": "Say hello in one short sentence.", "stream": True},
        [no_harmony_leak, has_content, reasoning_item, stream_events],
        api="responses",
        replay=FINAL,
    ),
    Case(
        "responses-tool-call",
        "the Responses API dropping function calls",
        {"input": "What is the weather in Paris right now? Use the get_weather tool.", "tools": [RESPONSES_WEATHER]},
        [no_harmony_leak, weather_call, reasoning_item],
        api="responses",
        replay=TOOL_CALL,
    ),
    Case(
        "responses-encrypted-reasoning",
        "include: reasoning.encrypted_content ignored, so a stateless client (Codex) cannot hand the CoT back",
        {
            "input": "What is the weather in Paris right now? Use the get_weather tool.",
            "tools": [RESPONSES_WEATHER],
            "include": ["reasoning.encrypted_content"],
            "store": False,
        },
        [weather_call, sealed_reasoning],
        api="responses",
        replay=TOOL_CALL,
    ),
    Case(
        "responses-tool-output",
        "reasoning, function_call and function_call_output items refused when a client hands a turn back",
        {"input": TOOL_LOOP_INPUT, "tools": [RESPONSES_WEATHER]},
        [no_harmony_leak, has_content],
        api="responses",
        replay=FINAL,
    ),
    Case(
        "responses-hosted-tools",
        "a request failing on a hosted tool the endpoint cannot run (Codex sends web_search)",
        {
            "input": "What is the weather in Paris right now? Use the get_weather tool.",
            "tools": [*HOSTED_TOOLS, RESPONSES_WEATHER],
        },
        [weather_call],
        api="responses",
        replay=TOOL_CALL,
    ),
    Case(
        "responses-namespace-tool",
        "namespace tool groups refused, or calls returned without the client's namespace",
        {"input": "Read README.md with read_file.", "tools": [RESPONSES_WEATHER, FILES_NAMESPACE]},
        [no_harmony_leak, namespaced_call],
        api="responses",
        replay=NAMESPACED_CALL,
    ),
    Case(
        "responses-custom-tool",
        "custom (free-form) tools refused, or their calls returned as function calls",
        {"input": "Fix the typo with apply_patch.", "tools": [PATCH_TOOL]},
        [no_harmony_leak, custom_call],
        api="responses",
        replay=CUSTOM_CALL,
    ),
]
