"""POST /v1/responses, owned by the gateway: Dynamo 1.6's own Responses adapter returns no
reasoning, refuses hosted tools and has no namespaces (dynamo issue 14069).

The request is checked and rendered into harmony here (conversation.py); Dynamo's frontend gets
a plain completion of those token ids, so routing, disaggregation and KV reuse are all Dynamo's;
and the completion's text comes back as the Responses answer (stream.py).

Stored responses (store.py): unless a request says `store: false`, its answer is stored before
its last bytes go out, so a client that has read a response can continue from it at once, on any
gateway of the graph. A continuation (`previous_response_id`) is rendered as if the client had
sent the stored conversation and its new input whole, which by harmony's rendering makes the
previous turn's prompt a prefix of the new one: the KV router finds it on the worker that holds it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.protocol.responses import InputItem, NamedToolChoice, ResponsesRequest
from dynamo_oss.gateway.responses.conversation import FUNCTIONS, Prompt, render
from dynamo_oss.gateway.responses.sealed_reasoning import ReasoningSeal
from dynamo_oss.gateway.responses.store import ResponseStore, StoredResponse, StoreUnavailable
from dynamo_oss.gateway.responses.stored import find
from dynamo_oss.gateway.responses.stream import ResponseBuilder, new_id
from dynamo_oss.gateway.routes import Checks, Upstream, parse_json

log = logging.getLogger("dynamo_oss.gateway")

COMPLETIONS_URL = b"/v1/completions"
RENDER_OFF_LOOP_BYTES = 64 * 1024  # a longer input renders in a thread, as long prompts are counted
ITEMS = TypeAdapter(list[InputItem])
ITEM_ID_PREFIXES = {"message": "msg", "reasoning": "rs", "function_call": "fc", "custom_tool_call": "ctc",
                    "function_call_output": "fco", "custom_tool_call_output": "ctco"}  # fmt: skip
_INPUT_INDEX = re.compile(r"input\[(\d+)\]")


class ResponsesRoute:
    api = "responses"

    def __init__(self, seal: ReasoningSeal, store: ResponseStore | None = None) -> None:
        self.seal = seal
        self.store = store  # None: the graph keeps no responses

    async def prepare(self, url: bytes, body: bytes, checks: Checks, key: str | None) -> Upstream:
        raw = parse_json(body)
        context = await checks.check(self.api, raw, len(body))
        try:
            request = ResponsesRequest.model_validate(raw)
        except ValidationError as err:
            raise from_validation(err, raw) from None
        inherited = await self._inherited(request, key)
        stored = self.store is not None and request.store is not False
        own = input_items(request) if stored or inherited else []
        whole = (
            request.model_copy(update={"input": ITEMS.validate_python([*inherited, *own])}) if inherited else request
        )
        try:
            if len(body) > RENDER_OFF_LOOP_BYTES or len(inherited) > 64:
                prompt = await asyncio.to_thread(render, whole, self.seal)
            else:
                prompt = render(whole, self.seal)
        except ApiError as err:
            raise _shifted(err, len(inherited)) from None
        _check_context(prompt, request, context)
        completion = _completion_request(request, prompt)
        if stored:
            assert self.store is not None
            transform: ResponsesAnswer = StoredResponsesAnswer(request, prompt, self.seal, self.store,
                                                               StoredResponseParts(key, inherited, own))  # fmt: skip
        else:
            transform = ResponsesAnswer(request, prompt, self.seal)
        return Upstream(url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=transform)

    async def _inherited(self, request: ResponsesRequest, key: str | None) -> list[dict[str, Any]]:
        """The stored conversation `previous_response_id` continues (404 when `key` has none by that id)."""
        if request.previous_response_id is None:
            return []
        if self.store is None:
            raise ApiError(400, "Invalid 'previous_response_id': this graph keeps no responses "
                           "(gateway.responses.store is false); send the whole conversation as 'input'.",
                           param="previous_response_id", code="unsupported_parameter")  # fmt: skip
        previous = await find(self.store, request.previous_response_id, key, "previous_response_id")
        return previous.conversation()


def input_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as the items a stored response lists (GET .../input_items): each with an
    id, a message's text in content parts, as OpenAI's server returns them."""
    if isinstance(request.input, str):
        items = [{"type": "message", "role": "user", "content": request.input}]
    else:
        items = [item.model_dump(mode="json", exclude_none=True) for item in request.input]
    for item in items:
        item["id"] = item.get("id") or new_id(ITEM_ID_PREFIXES[item["type"]])
        if item["type"] == "message":
            item.setdefault("status", "completed")
            if isinstance(item["content"], str):
                kind = "output_text" if item["role"] == "assistant" else "input_text"
                part = {"type": kind, "text": item["content"]} | ({"annotations": []} if kind == "output_text" else {})
                item["content"] = [part]
    return items


def _shifted(err: ApiError, offset: int) -> ApiError:
    """A render error about the request's own input, numbered as the client numbers it (the stored
    conversation prepended before it is not the client's to see)."""
    if not offset or err.param is None:
        return err

    def renumber(text: str) -> str:
        return _INPUT_INDEX.sub(lambda match: f"input[{int(match.group(1)) - offset}]", text)

    return ApiError(err.status, renumber(err.message), renumber(err.param), err.code, err.retry_after)


def _check_context(prompt: Prompt, request: ResponsesRequest, context: int) -> None:
    wanted = len(prompt.token_ids) + (request.max_output_tokens or 0)
    if context and (wanted > context or len(prompt.token_ids) >= context):
        raise ApiError(400, f"This model's maximum context length is {context} tokens. However, your input is "
                       f"{len(prompt.token_ids)} tokens and {request.max_output_tokens or 0} more are asked for the "
                       "output. Please reduce the length of the input or of max_output_tokens.", param="input",
                       code="context_length_exceeded")  # fmt: skip


def _completion_request(request: ResponsesRequest, prompt: Prompt) -> dict[str, Any]:
    """The plain completion Dynamo's frontend runs for the rendered prompt: streamed whether or not
    the client streams, so one reader serves both (and counts reasoning tokens as they come)."""
    completion: dict[str, Any] = {"model": request.model, "prompt": prompt.token_ids, "stream": True,
                                  "stream_options": {"include_usage": True}}  # fmt: skip
    optional = {"max_tokens": request.max_output_tokens, "temperature": request.temperature, "top_p": request.top_p,
                "ignore_eos": request.ignore_eos, "min_tokens": request.min_tokens, "nvext": request.nvext}  # fmt: skip
    completion.update({key: value for key, value in optional.items() if value is not None})
    guided = _guided_tool_choice(request, prompt)
    if guided is not None:
        completion["guided_json"] = guided
    return completion


def _guided_tool_choice(request: ResponsesRequest, prompt: Prompt) -> dict[str, Any] | None:
    """A required or named tool choice, passed to the engine as Dynamo's own chat path passes it:
    the named tool's argument schema, or an array of {name, parameters} over every tool."""
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        recipient = next((r for r, tool in prompt.tools.items() if tool.name == choice.name), None)
        if recipient is None:
            raise ApiError(400, f"Invalid 'tool_choice.name': no tool named '{choice.name}' is offered in 'tools'.",
                           param="tool_choice.name")  # fmt: skip
        return prompt.function_schemas[recipient]
    if choice == "required" and prompt.tools:
        options = [
            {"type": "object", "properties": {"name": {"type": "string", "enum": [recipient.removeprefix(f"{FUNCTIONS}.")]},
                                              "parameters": prompt.function_schemas[recipient]},
             "required": ["name", "parameters"]}
            for recipient in prompt.tools
        ]  # fmt: skip
        return {"type": "array", "minItems": 1, "items": {"anyOf": options}}
    return None


class ResponsesAnswer:
    """The completion's SSE chunks in; Responses events out as they come (text/event-stream), or,
    for a client that does not stream, one Response object at the end (application/json)."""

    def __init__(self, request: ResponsesRequest, prompt: Prompt, seal: ReasoningSeal, stored: bool = False) -> None:
        self.streaming = request.stream
        self.content_type = b"text/event-stream" if request.stream else b"application/json"
        self.builder = ResponseBuilder(request, prompt, seal, streaming=request.stream, stored=stored)
        self.buffer = b""
        self.started = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, body: bytes) -> bytes:
        out = b"" if self.started else self._start()
        data = self.buffer + body if self.buffer else body
        if data.endswith(b"\n\n") and data.count(b"\n\n") == 1:  # one whole chunk a read: most reads
            self.buffer = b""
            return out + self._chunk(data[:-2])
        events = data.split(b"\n\n")
        self.buffer = events.pop()
        return out + b"".join([self._chunk(event) for event in events])

    def _chunk(self, event: bytes) -> bytes:
        if not event.startswith(b"data: {"):
            return b""  # [DONE], comments
        chunk = orjson.loads(event[6:])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices:
            return b""
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        text = choice.get("text")
        return self.builder.feed(text) if text else b""

    def _start(self) -> bytes:
        self.started = True
        return self.builder.start()

    def end(self) -> bytes:
        out = (b"" if self.started else self._start()) + self.builder.finish(self.finish_reason, self.usage)
        return out if self.streaming else orjson.dumps(self.builder.final)

    def cut(self) -> bytes:
        head = b"" if self.started else self._start()
        return head + self.builder.error("Dynamo's frontend stopped mid-stream; retry the request.")


class StoredResponseParts:
    """What a stored response's record holds besides the Response object itself."""

    def __init__(self, owner: str | None, inherited: list[dict[str, Any]], own: list[dict[str, Any]]) -> None:
        self.owner, self.inherited, self.own = owner, inherited, own


class StoredResponsesAnswer(ResponsesAnswer):
    """A ResponsesAnswer that is stored before its last bytes go out (routes.Settling): a client
    that has the whole response can continue from it at once, on any gateway of the graph."""

    def __init__(
        self, request: ResponsesRequest, prompt: Prompt, seal: ReasoningSeal, store: ResponseStore,
        parts: StoredResponseParts,
    ) -> None:  # fmt: skip
        super().__init__(request, prompt, seal, stored=True)
        self.store, self.parts = store, parts

    async def settle(self) -> bytes:
        builder = self.builder
        out = (b"" if self.started else self._start()) + builder.close_output(self.finish_reason, self.usage)
        assert builder.final is not None
        record = StoredResponse(id=builder.id, owner=self.parts.owner, created_at=time.time(),
                                inherited=self.parts.inherited, input=self.parts.own, response=builder.final)  # fmt: skip
        try:
            await self.store.put(record)
        except StoreUnavailable as error:  # the answer is the client's all the same; it says it was not stored
            log.warning("response %s was not stored: %s", builder.id, error)
            builder.final["store"] = False
        out += builder.completed()
        return out if self.streaming else orjson.dumps(builder.final)
