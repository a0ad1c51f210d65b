"""POST /v1/responses, owned by the gateway: Dynamo 1.6's own Responses adapter returns no
reasoning, refuses hosted tools and has no namespaces (dynamo issue 14069).

The request is checked and rendered into harmony here (conversation.py); Dynamo's frontend gets
a plain completion of those token ids, so routing, disaggregation and KV reuse are all Dynamo's;
and the completion's text comes back as the Responses answer (stream.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from pydantic import ValidationError

from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.protocol.responses import NamedToolChoice, ResponsesRequest
from dynamo_oss.gateway.responses.conversation import FUNCTIONS, Prompt, render
from dynamo_oss.gateway.responses.sealed_reasoning import ReasoningSeal
from dynamo_oss.gateway.responses.stream import ResponseBuilder
from dynamo_oss.gateway.routes import Checks, Upstream, parse_json

COMPLETIONS_URL = b"/v1/completions"
RENDER_OFF_LOOP_BYTES = 64 * 1024  # a longer input renders in a thread, as long prompts are counted


class ResponsesRoute:
    api = "responses"

    def __init__(self, seal: ReasoningSeal) -> None:
        self.seal = seal

    async def prepare(self, url: bytes, body: bytes, checks: Checks) -> Upstream:
        raw = parse_json(body)
        context = await checks.check(self.api, raw, len(body))
        try:
            request = ResponsesRequest.model_validate(raw)
        except ValidationError as err:
            raise from_validation(err, raw) from None
        if request.previous_response_id is not None:
            raise ApiError(400, "Invalid 'previous_response_id': this endpoint keeps no responses; send the whole "
                           "conversation as 'input' (with store: false).", param="previous_response_id",
                           code="unsupported_parameter")  # fmt: skip
        if len(body) > RENDER_OFF_LOOP_BYTES:
            prompt = await asyncio.to_thread(render, request, self.seal)
        else:
            prompt = render(request, self.seal)
        _check_context(prompt, request, context)
        completion = _completion_request(request, prompt)
        transform = ResponsesAnswer(request, prompt, self.seal)
        return Upstream(url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=transform)


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

    def __init__(self, request: ResponsesRequest, prompt: Prompt, seal: ReasoningSeal) -> None:
        self.streaming = request.stream
        self.content_type = b"text/event-stream" if request.stream else b"application/json"
        self.builder = ResponseBuilder(request, prompt, seal, streaming=request.stream)
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
