"""POST /v1/chat/completions: Dynamo's own, with gpt-oss's reasoning where OpenAI asks providers to put it.

OpenAI's rule for gpt-oss providers (OpenRouter's convention): the chain of thought is a
`reasoning` property on the message and on each streamed delta, left out when the request says
`reasoning: {"exclude": true}`. Dynamo writes `reasoning_content` (vLLM's and DeepSeek's name,
which many clients read), so both are written. Requests may carry OpenRouter's `reasoning`
options, which Dynamo refuses: `effort` becomes `reasoning_effort`; and an assistant message
sent back with `reasoning` reaches the prompt as `reasoning_content`, which the template renders.
A `response_format` guides the final channel only (structured.py), not the reasoning; a required
or named `tool_choice` guides the completion to a call after the reasoning (tool_choice.py).

The stream is rewritten at the byte level, only in events that carry reasoning or usage: every
other chunk passes as it came, so the chat path keeps close to pass-through cost per token. Every
stream asks Dynamo for its usage, which its key is billed by (usage.py); a client that did not ask
for it gets the stream without the usage chunk.
"""

from __future__ import annotations

import json
from json.decoder import scanstring
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from dynamo_oss.gateway.errors import from_validation
from dynamo_oss.gateway.routes import Checks, EventStream, Upstream, WholeBody, parse_json
from dynamo_oss.gateway.structured import constrain_chat
from dynamo_oss.gateway.tool_choice import force_chat_call
from dynamo_oss.gateway.usage import Usage, ask_for_usage

REASONING_KEY = '"reasoning_content":'


class ReasoningOptions(BaseModel):
    """OpenRouter's `reasoning` request field, as OpenAI's gpt-oss guide asks providers to take it."""

    model_config = ConfigDict(extra="forbid")
    exclude: bool = False
    effort: str | None = None
    enabled: bool | None = None
    max_tokens: int | None = None


class ChatRoute:
    api = "chat"

    async def prepare(self, url: bytes, body: bytes, checks: Checks, key: str | None) -> Upstream:
        request = parse_json(body)
        # A structured output puts its schema in the prompt: taken in first, so the prompt is counted whole.
        formatted = isinstance(request, dict) and constrain_chat(request)
        await checks.check(self.api, request, len(body))
        assert isinstance(request, dict)  # the checks refuse anything else
        exclude, changed = _take_reasoning_options(request)
        changed |= formatted
        changed |= force_chat_call(request)  # once its tools are checked
        changed |= _reasoning_sent_back(request.get("messages") or [])
        hide_usage = bool(request.get("stream")) and ask_for_usage(request)
        if changed or hide_usage:
            body = json.dumps(request).encode()
        transform = ReasoningStream(exclude, hide_usage) if request.get("stream") else ReasoningJson(exclude)
        return Upstream(url=url, body=body, transform=transform)


def _take_reasoning_options(request: dict[str, Any]) -> tuple[bool, bool]:
    """(exclude the reasoning?, was the request changed?)"""
    if "reasoning" not in request:
        return False, False
    raw = request.pop("reasoning")
    try:
        options = ReasoningOptions.model_validate(raw if raw is not None else {})
    except ValidationError as err:
        raise from_validation(err, {"reasoning": raw}) from None
    if options.effort and "reasoning_effort" not in request:
        request["reasoning_effort"] = options.effort
    return options.exclude, True


def _reasoning_sent_back(messages: list) -> bool:
    changed = False
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant" and "reasoning" in message:
            reasoning = message.pop("reasoning")
            if isinstance(reasoning, str) and not message.get("reasoning_content"):
                message["reasoning_content"] = reasoning
            changed = True
    return changed


class ReasoningStream(EventStream):
    """Streamed chunks: `"reasoning":X` written before each `"reasoning_content":X`, or both left
    out (and a chunk left empty by that dropped) when the request excludes reasoning; the usage
    chunk read for the bill, and left out when `hide_usage` (the client did not ask for it)."""

    def __init__(self, exclude: bool, hide_usage: bool = False) -> None:
        super().__init__()
        self.exclude = exclude
        self.hide_usage = hide_usage

    def feed(self, body: bytes) -> bytes:
        whole = self.whole_events(body)
        if b'"reasoning_content"' not in whole and b'"usage"' not in whole:
            return whole
        return b"".join([self._event(event) for event in whole.split(b"\n\n")[:-1]])

    def _event(self, event: bytes) -> bytes:
        """One whole event and its separator, rewritten (b"" for the usage chunk left out)."""
        if b'"usage"' in event and self._bill(event):
            return b""
        if b'"reasoning_content"' not in event:
            return event + b"\n\n"
        if self.exclude:
            chunk = json.loads(event[6:])
            for choice in chunk.get("choices") or []:
                (choice.get("delta") or {}).pop("reasoning_content", None)
            if all(_empty(choice) for choice in chunk.get("choices") or []) and not chunk.get("usage"):
                return b": reasoning left out\n\n"  # an SSE comment: the event is gone, the framing stays whole
            return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
        return _with_reasoning(event.decode()).encode() + b"\n\n"

    def _bill(self, event: bytes) -> bool:
        """Read the usage an event carries; True when it is the usage chunk the client did not ask for."""
        chunk = json.loads(event[6:])
        usage = chunk.get("usage")
        if not usage:
            return False
        self.billed = Usage.of_openai(usage)
        return self.hide_usage and not chunk.get("choices")


def _empty(choice: dict) -> bool:
    return not choice.get("delta") and choice.get("finish_reason") is None


def _with_reasoning(text: str) -> str:
    """`..."reasoning_content":"x"...` -> `..."reasoning":"x","reasoning_content":"x"...`, each occurrence."""
    out, position = [], 0
    while (at := text.find(REASONING_KEY, position)) >= 0:
        start = at + len(REASONING_KEY)
        out.append(text[position:at])
        if text.startswith('"', start):  # a string, not null
            _, end = scanstring(text, start + 1)
            out.append('"reasoning":' + text[start:end] + ",")
        out.append(REASONING_KEY)
        position = start
    out.append(text[position:])
    return "".join(out)


class ReasoningJson(WholeBody):
    """A whole chat completion: each message gets `reasoning` beside `reasoning_content`, or neither."""

    def __init__(self, exclude: bool) -> None:
        super().__init__()
        self.exclude = exclude

    def rewrite(self, body: bytes) -> bytes:
        completion = json.loads(body)
        if completion.get("usage"):
            self.billed = Usage.of_openai(completion["usage"])
        for choice in completion.get("choices") or []:
            message = choice.get("message") or {}
            reasoning = message.pop("reasoning_content", None)
            if reasoning is not None and not self.exclude:
                message["reasoning"] = message["reasoning_content"] = reasoning
        return json.dumps(completion).encode()
