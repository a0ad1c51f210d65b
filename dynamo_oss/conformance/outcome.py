"""What an endpoint answered, reduced to what the checks look at, whichever API and mode served it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel


class Outcome(BaseModel):
    content: str = ""
    reasoning: str = ""  # the chain of thought, wherever the API put it
    reasoning_field: str = ""  # chat: the `reasoning` property OpenAI's gpt-oss rules name (message or deltas)
    items: list[dict[str, Any]] = []  # Responses: the output items as sent
    events: list[dict[str, Any]] = []  # Responses, streamed: every event as sent
    tool_calls: list[tuple[str, str]] = []  # (function name, JSON arguments)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache
    reference_prompt_tokens: set[int] = set()  # harmony's count (with and without a date line)

    def texts(self) -> dict[str, str]:
        """Every piece of text the client sees, by where it appeared."""
        texts = {"content": self.content, "reasoning": self.reasoning}
        texts.update({f"tool call {name} arguments": args for name, args in self.tool_calls})
        return texts


def _extra(item: Any, name: str) -> str:
    """A field the openai client does not model (reasoning_content) from its extras."""
    value = getattr(item, name, None) or (item.model_extra or {}).get(name)
    return value or ""


def from_chat(completion: Any) -> Outcome:
    choice = completion.choices[0]
    message = choice.message
    return Outcome(
        content=message.content or "",
        reasoning=_extra(message, "reasoning_content") or _extra(message, "reasoning"),
        reasoning_field=_extra(message, "reasoning"),
        tool_calls=[(call.function.name, call.function.arguments) for call in message.tool_calls or []],
        finish_reason=choice.finish_reason,
        prompt_tokens=completion.usage.prompt_tokens if completion.usage else None,
        cached_tokens=_cached(completion.usage),
    )


def _cached(usage: Any) -> int | None:
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    return details.cached_tokens if details else None


def from_chat_stream(chunks: Iterable[Any]) -> Outcome:
    """Assemble a stream as a client would: text deltas joined, tool-call deltas by index."""
    outcome = Outcome()
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        if chunk.usage:
            outcome.prompt_tokens = chunk.usage.prompt_tokens
            outcome.cached_tokens = _cached(chunk.usage)
        for choice in chunk.choices:
            delta = choice.delta
            outcome.content += delta.content or ""
            outcome.reasoning += _extra(delta, "reasoning_content") or _extra(delta, "reasoning")
            outcome.reasoning_field += _extra(delta, "reasoning")
            for call in delta.tool_calls or []:
                name, arguments = calls.setdefault(call.index, ["", ""])
                calls[call.index] = [
                    name + (call.function.name or "" if call.function else ""),
                    arguments + (call.function.arguments or "" if call.function else ""),
                ]
            if choice.finish_reason:
                outcome.finish_reason = choice.finish_reason
    outcome.tool_calls = [(name, arguments) for name, arguments in (calls[i] for i in sorted(calls))]
    return outcome


def from_response(response: Any) -> Outcome:
    """A Responses API result: reasoning, message and function_call output items."""
    outcome = Outcome(
        prompt_tokens=response.usage.input_tokens if response.usage else None,
        items=[item.model_dump(mode="json", exclude_unset=True) for item in response.output],
    )
    for item in response.output:
        if item.type == "reasoning":
            parts = [*(item.content or []), *(item.summary or [])]
            outcome.reasoning += "".join(part.text for part in parts)
        elif item.type == "message":
            outcome.content += "".join(getattr(part, "text", "") for part in item.content)
        elif item.type == "function_call":
            outcome.tool_calls.append((item.name, item.arguments))
    return outcome


def from_response_stream(events: Iterable[Any]) -> Outcome:
    """A streamed Responses result: the events as sent, and the response the last one carries."""
    events = list(events)
    raw = [event.model_dump(mode="json", exclude_unset=True) for event in events]
    final = next((event.response for event in reversed(events) if hasattr(event, "response")), None)
    outcome = from_response(final) if final is not None else Outcome()
    outcome.events = raw
    return outcome


def from_message(message: Any) -> Outcome:
    """An Anthropic Messages result: thinking blocks are the reasoning, tool_use blocks the calls."""
    outcome = Outcome(
        finish_reason=message.stop_reason,
        prompt_tokens=message.usage.input_tokens,
        cached_tokens=message.usage.cache_read_input_tokens,
    )
    for block in message.content:
        if block.type == "thinking":
            outcome.reasoning += block.thinking
        elif block.type == "text":
            outcome.content += block.text
        elif block.type == "tool_use":
            outcome.tool_calls.append((block.name, json.dumps(block.input)))
    return outcome
