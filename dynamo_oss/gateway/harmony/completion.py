"""The plain completion an API the gateway owns asks of Dynamo's frontend, and its stream read back.

Each API renders its conversation into harmony token ids (rendering.py), so routing,
disaggregation and KV reuse stay Dynamo's. Dynamo's frontend gets a plain completion of those
ids, streamed whether or not the client streams, so one reader serves both; each API only says
how the completion's text is written back (its `Builder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

from dynamo_oss.engines.harmony.grammar import forced_call_grammar
from dynamo_oss.gateway.errors import ApiError, stream_cut
from dynamo_oss.gateway.protocol.formats import ChatResponseFormat, ResponsesTextFormat
from dynamo_oss.gateway.protocol.responses import NamedToolChoice, ToolChoice
from dynamo_oss.gateway.harmony.rendering import Prompt
from dynamo_oss.gateway.latency import StreamTiming
from dynamo_oss.gateway.structured import guided_grammar
from dynamo_oss.gateway.usage import Usage

COMPLETIONS_URL = b"/v1/completions"
TOKEN_IDS = {"extra_fields": ["completion_token_ids"]}  # each chunk's token ids, which parsing.py reads


def check_context(prompt: Prompt, max_tokens: int | None, context: int, input_field: str, limit_field: str) -> None:
    """The prompt and the tokens asked for must fit the model's context; the error names the API's fields."""
    wanted = len(prompt.token_ids) + (max_tokens or 0)
    if context and (wanted > context or len(prompt.token_ids) >= context):
        raise ApiError(
            400,
            f"This model's maximum context length is {context} tokens. However, your input is "
            f"{len(prompt.token_ids)} tokens and {max_tokens or 0} more are asked for the output. Please "
            f"reduce the length of the input or of {limit_field}.",
            param=input_field,
            code="context_length_exceeded",
        )


@dataclass
class Generation:
    """What a completion is asked for besides its prompt, whichever API asked."""

    model: str
    sampling: dict[str, Any]  # Dynamo's completion fields the request set: max_tokens, temperature, ...
    tool_choice: ToolChoice = "auto"
    text_format: ChatResponseFormat | ResponsesTextFormat | None = None
    nvext: dict[str, list[str]] | None = None  # the client's, holding only what validation.py lets through


def completion_request(generation: Generation, prompt: Prompt) -> dict[str, Any]:
    """The plain completion Dynamo's frontend runs for the rendered prompt: streamed whether or not
    the client streams, so one reader serves both, with each chunk's token ids, which the answer is
    parsed from. A required or named tool choice guides the completion to a call
    (`forced_call_grammar`); otherwise a structured output's format guides its final channel
    (structured.py)."""
    completion: dict[str, Any] = {
        "model": generation.model,
        "prompt": prompt.token_ids,
        "stream": True,
        "stream_options": {"include_usage": True},
        "nvext": {**(generation.nvext or {}), **TOKEN_IDS},
        **{field: value for field, value in generation.sampling.items() if value is not None},
    }
    forced = _forced_calls(generation.tool_choice, prompt)
    if forced:  # a tool call the choice forces: a format shapes only an answer to the user
        completion["guided_grammar"] = forced_call_grammar(forced)
    elif (grammar := guided_grammar(generation.text_format, list(prompt.tools))) is not None:
        completion["guided_grammar"] = grammar
    return completion


def _forced_calls(choice: ToolChoice, prompt: Prompt) -> dict[str, dict[str, Any]]:
    """The calls a required or named tool choice allows, harmony recipient -> argument schema:
    every tool offered, or the named one (none for any other choice)."""
    if isinstance(choice, NamedToolChoice):
        recipient = next((r for r, tool in prompt.tools.items() if tool.name == choice.name), None)
        if recipient is None:
            raise ApiError(
                400,
                f"Invalid 'tool_choice.name': no tool named '{choice.name}' is offered in 'tools'.",
                param="tool_choice.name",
            )
        return {recipient: prompt.function_schemas[recipient]}
    return dict(prompt.function_schemas) if choice == "required" else {}


class Builder(Protocol):
    """One API's answer, built from the completion's token ids as they stream."""

    prompt: Prompt  # what the completion was asked for
    final: dict[str, Any] | None  # the whole answer, once finished: the body of an answer not streamed
    done: bool  # the answer ended before the completion did (a stop sequence): the rest is not read
    billed: Usage | None  # the answer's usage, once finished (routes.Transform.billed)

    def start(self) -> bytes:
        """The events that open a stream (b"" for an answer not streamed)."""
        ...

    def feed(self, token_ids: list[int]) -> bytes:
        """The events for the completion's next token ids."""
        ...

    def finish(self, finish_reason: str | None, usage: dict[str, Any] | None) -> bytes:
        """The events that close the answer, once the completion has ended."""
        ...

    def error(self, error: dict[str, Any]) -> bytes:
        """The event that ends a stream the graph could not finish: `error` is OpenAI's error object
        (Dynamo's, when a worker failed mid-stream; the gateway's own when the frontend went away)."""
        ...


class MissingTokenIds(RuntimeError):
    """Dynamo's frontend streamed a completion's text without its token ids, which the answer is parsed from."""


class FailedMidAnswer(ConnectionError):
    """Dynamo's frontend ended a completion with an error (a worker died) before a client that does not
    stream had its answer: retryable, as the frontend going away is."""


class _Choice(msgspec.Struct):
    text: Any = None
    finish_reason: Any = None


class _Extensions(msgspec.Struct):
    completion_token_ids: list[int] | None = None


class _Chunk(msgspec.Struct):
    """What the answer reads of one of Dynamo's completion chunks. Decoded to these fields only: the chunk's
    id, model, object and the like are skipped, never built (a chunk a token: its decoding is per-token work)."""

    choices: list[_Choice] | None = None
    usage: Any = None
    error: Any = None
    nvext: _Extensions | None = None


CHUNK = msgspec.json.Decoder(_Chunk)


class CompletionAnswer:
    """The completion's SSE chunks in; the API's events out as they come (text/event-stream), or,
    for a client that does not stream, its one answer object at the end (application/json)."""

    def __init__(self, builder: Builder, streaming: bool) -> None:
        self.builder = builder
        self.streaming = streaming
        self.content_type = b"text/event-stream" if streaming else b"application/json"
        self.buffer = b""
        self.started = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.failed = False  # the frontend's stream ended with an error event
        self.generated = 0  # the completion's tokens so far
        self.timing = StreamTiming()  # when its first tokens came, for the graph's latency (latency.py)

    @property
    def done(self) -> bool:
        return self.builder.done

    @property
    def billed(self) -> Usage | None:
        return self.builder.billed

    @property
    def spent(self) -> int:
        return len(self.builder.prompt.token_ids) + self.generated

    def feed(self, body: bytes) -> bytes:
        """One read's events: their token ids go to the builder in one call, which writes one delta for each
        message's text in them (a read of many events costs a call and a delta, not one a token)."""
        if self.builder.done or self.failed:
            return b""
        out = b"" if self.started else self._start()
        events = (self.buffer + body if self.buffer else body).split(b"\n\n")
        self.buffer = events.pop()
        token_ids: list[int] = []
        for event in events:
            if not event.startswith(b"data: {"):
                continue  # [DONE], comments
            chunk = CHUNK.decode(event[6:])
            if isinstance(chunk.error, dict):  # a worker failed mid-stream: Dynamo's retryable error
                return out + self._tokens(token_ids) + self._fail(chunk.error)
            if chunk.usage:
                self.usage = chunk.usage
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            ids = chunk.nvext.completion_token_ids if chunk.nvext is not None else None
            if ids is None and choice.text:
                raise MissingTokenIds("Dynamo's frontend returned no completion_token_ids for a completion's text")
            if ids:
                token_ids += ids
        return out + self._tokens(token_ids)

    def _tokens(self, token_ids: list[int]) -> bytes:
        if not token_ids or self.builder.done:
            return b""  # and whatever follows an answer that ended early
        if not self.generated:
            self.timing.first()
        self.generated += len(token_ids)
        self.timing.tokens = self.generated
        return self.builder.feed(token_ids)

    def _start(self) -> bytes:
        self.started = True
        return self.builder.start()

    def _fail(self, error: dict[str, Any]) -> bytes:
        self.failed = True
        if not self.streaming:
            raise FailedMidAnswer(str(error.get("message") or "a worker failed mid-answer"))
        return self.builder.error(error)

    def end(self) -> bytes:
        if self.failed:
            return b""
        out = b"" if self.started else self._start()
        if not self.builder.done:
            out += self.builder.finish(self.finish_reason, self.usage)
        return out if self.streaming else orjson.dumps(self.builder.final)

    def cut(self) -> bytes:
        if self.failed:
            return b""  # the client has its error event already
        head = b"" if self.started else self._start()
        return head + self.builder.error(stream_cut()["error"])
