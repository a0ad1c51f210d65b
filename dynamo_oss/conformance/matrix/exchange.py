"""One cell's request sent with its API's official client, and the raw answer checked against that
client's own types.

Why raw: the openai and anthropic clients build their result objects without validating them, so
an answer with a wrong field type or a missing event would still "parse". Here the bytes on the
wire are read as the client would read them (JSON, or server-sent events), every object is
validated against the client's pydantic types, and the stream's framing is checked (its first and
last events, rising sequence numbers, balanced content blocks). The validated objects then give
the Outcome the properties are judged on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, get_args

import anthropic
import openai
import orjson
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, ValidationError

from dynamo_oss.conformance import outcome as outcomes
from dynamo_oss.conformance.matrix.cells import Cell, chat_request, messages_request, responses_request
from dynamo_oss.conformance.outcome import Outcome


def _by_type(union: Any) -> dict[str, type[BaseModel]]:
    """The event models of one of the clients' unions, by their `type`: an event is validated as the
    model its type names, so a broken one is reported against that model, not every member."""
    members = get_args(get_args(union)[0])
    return {get_args(member.model_fields["type"].annotation)[0]: member for member in members}


_RESPONSE_EVENTS = _by_type(ResponseStreamEvent)
_MESSAGE_EVENTS = _by_type(RawMessageStreamEvent)
_ENDS = ("response.completed", "response.incomplete")


@dataclass
class Answer:
    """What came back: the outcome to judge, and every way the answer broke its API's shape."""

    outcome: Outcome = field(default_factory=Outcome)
    shape: list[str] = field(default_factory=list)
    refused: str | None = None  # the request failed outright (HTTP error or connection)


@dataclass
class Clients:
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic


def clients(base_url: str, api_key: str, timeout_s: float) -> Clients:
    """Both clients against one endpoint; `base_url` ends in /v1, as the openai client takes it."""
    return Clients(
        openai=openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s),
        anthropic=anthropic.Anthropic(
            base_url=base_url.removesuffix("/v1"), api_key=api_key, max_retries=0, timeout=timeout_s
        ),
    )


def exchange(clients: Clients, cell: Cell, model: str, nonce: str) -> Answer:
    try:
        if cell.api == "chat":
            call = clients.openai.chat.completions.with_streaming_response.create
            return _read(call, chat_request(cell, model, nonce), cell.stream, _chat, _chat_stream)
        if cell.api == "responses":
            call = clients.openai.responses.with_streaming_response.create
            return _read(call, responses_request(cell, model, nonce), cell.stream, _response, _response_stream)
        call = clients.anthropic.messages.with_streaming_response.create
        return _read(call, messages_request(cell, model, nonce), cell.stream, _message, _message_stream)
    except (openai.APIError, anthropic.APIError) as err:
        return Answer(refused=f"{type(err).__name__}: {err}"[:300])


def _read(call: Any, request: dict[str, Any], stream: bool, whole: Any, streamed: Any) -> Answer:
    with call(**request) as response:
        if stream:
            return streamed(list(_events(response.iter_lines())))
        return whole(response.read())


def _events(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """Server-sent events as (event name, data), as the clients split them."""
    name, data = None, []
    for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").lstrip())
    if data:
        yield name, "\n".join(data)


def _decoded(
    model: type[BaseModel] | dict[str, type[BaseModel]], data: str | bytes, what: str, shape: list[str]
) -> Any:
    """`data` read as JSON and validated as the client's type; None, and the problem noted, if not."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        shape.append(f"{what}: not JSON: {data[:60]!r}")
        return None
    return _validated(model, raw, what, shape)


def _validated(model: type[BaseModel] | dict[str, type[BaseModel]], raw: Any, what: str, shape: list[str]) -> Any:
    """`raw` as the client's `model` (or, for an event union, as the model its type names)."""
    if isinstance(model, dict):
        kind = raw.get("type") if isinstance(raw, dict) else None
        if kind not in model:
            shape.append(f"{what}: no event of type {kind!r} in the client's types")
            return None
        model = model[kind]
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        shape.append(f"{what}: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return None


def _whole(raw: bytes, model: type[BaseModel], what: str, read: Callable[[Any], Outcome]) -> tuple[Answer, Any]:
    """An answer not streamed: validated as the client's `model`, and its Outcome."""
    answer = Answer()
    parsed = _decoded(model, raw, what, answer.shape)
    if parsed is not None:
        answer.outcome = read(parsed)
    return answer, parsed


def _chat(raw: bytes) -> Answer:
    return _whole(raw, ChatCompletion, "chat.completion", outcomes.from_chat)[0]


def _chat_stream(events: list[tuple[str | None, str]]) -> Answer:
    answer = Answer()
    if not events or events[-1][1] != "[DONE]":
        answer.shape.append("the stream does not end with data: [DONE]")
    chunks = [
        _decoded(ChatCompletionChunk, data, "chat.completion.chunk", answer.shape)
        for _, data in events
        if data != "[DONE]"
    ]
    finishes = [choice.finish_reason for chunk in chunks if chunk for choice in chunk.choices if choice.finish_reason]
    if len(finishes) != 1:
        answer.shape.append(f"{len(finishes)} chunks carry a finish_reason, expected 1")
    answer.outcome = outcomes.from_chat_stream(chunk for chunk in chunks if chunk)
    return answer


def _response(raw: bytes) -> Answer:
    answer, response = _whole(raw, Response, "response", outcomes.from_response)
    if response is not None and response.status != "completed":
        answer.shape.append(f"status is {response.status!r}, expected 'completed'")
    return answer


def _response_stream(events: list[tuple[str | None, str]]) -> Answer:
    answer = Answer()
    typed = _framed(_RESPONSE_EVENTS, events, "response.created", _ENDS, answer.shape)
    if [event.sequence_number for event in typed] != list(range(len(typed))):
        answer.shape.append("sequence_number does not rise by one from 0")
    answer.outcome = outcomes.from_response_stream(typed)
    return answer


def _framed(
    models: dict[str, type[BaseModel]],
    events: list[tuple[str | None, str]],
    first: str,
    last: tuple[str, ...],
    shape: list[str],
) -> list[Any]:
    """A stream's events as the client's types, each named by its type, the first `first` and the
    last one of `last`."""
    parsed = [(name, _decoded(models, data, f"event {name}", shape)) for name, data in events]
    if any(event is not None and name != event.type for name, event in parsed):
        shape.append("an event's name differs from its data's type")
    typed = [event for _, event in parsed if event is not None]
    kinds = [event.type for event in typed]
    if not kinds or kinds[0] != first or kinds[-1] not in last:
        shape.append(f"the stream begins with {kinds[:1]} and ends with {kinds[-1:]}")
    return typed


def _message(raw: bytes) -> Answer:
    return _whole(raw, Message, "message", outcomes.from_message)[0]


def _message_stream(events: list[tuple[str | None, str]]) -> Answer:
    """Anthropic's stream, validated event by event and folded into the Message it describes."""
    answer = Answer()
    typed = _framed(
        _MESSAGE_EVENTS,
        [(name, data) for name, data in events if name != "ping"],
        "message_start",
        ("message_stop",),
        answer.shape,
    )
    try:
        snapshot = _folded(typed)
    except ValueError as err:
        answer.shape.append(str(err))
        return answer
    message = _validated(Message, snapshot, "the streamed message", answer.shape)
    if message is not None:
        answer.outcome = outcomes.from_message(message)
    return answer


def _folded(events: Iterable[Any]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    open_blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.type == "message_start":
            message = event.message.model_dump(mode="json")
        elif event.type == "content_block_start":
            if event.index != len(message.get("content", [])) or event.index in open_blocks:
                raise ValueError(f"content_block_start at index {event.index} out of order")
            open_blocks[event.index] = event.content_block.model_dump(mode="json")
            message["content"].append(open_blocks[event.index])
        elif event.type == "content_block_delta":
            _apply(open_blocks, event.index, event.delta.model_dump(mode="json"))
        elif event.type == "content_block_stop":
            block = open_blocks.pop(event.index, None)
            if block is None:
                raise ValueError(f"content_block_stop for index {event.index}, which is not open")
            if block["type"] == "tool_use":
                block["input"] = orjson.loads(block.pop("partial_json", "") or "{}")
        elif event.type == "message_delta":
            message.update({k: v for k, v in event.delta.model_dump(mode="json").items() if v is not None})
            message["usage"] = {**message.get("usage", {}), **event.usage.model_dump(mode="json", exclude_none=True)}
    if open_blocks:
        raise ValueError(f"content blocks {sorted(open_blocks)} were never stopped")
    return message


_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "input_json_delta": "partial_json",
}


def _apply(open_blocks: dict[int, dict[str, Any]], index: int, delta: dict[str, Any]) -> None:
    block = open_blocks.get(index)
    if block is None:
        raise ValueError(f"a {delta['type']} for index {index}, which is not open")
    name = _DELTA_FIELDS.get(delta["type"])
    if name is None:
        raise ValueError(f"a {delta['type']}, which no content block of gpt-oss's carries")
    block[name] = block.get(name, "") + delta[name]
