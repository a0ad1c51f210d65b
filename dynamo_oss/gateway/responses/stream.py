"""A completion's harmony, turned into a Responses answer: output items, their events, usage.

`ResponseBuilder` reads the completion's token ids as `AnswerParser` cuts them into messages: the `analysis` channel
becomes a `reasoning` item (its text as `reasoning_text` content, sealed into `encrypted_content`
when asked), a message to a tool a `function_call` (or a `custom_tool_call`, under the name and
namespace the client declared), anything else an assistant `message`. Streaming, every step is an
event with a rising `sequence_number`, in OpenAI's order: `response.created`, `in_progress`, per
item `output_item.added`, its part and deltas, `output_item.done`, then `response.completed` (or
`response.incomplete` when max_output_tokens cut it) carrying the whole response and its usage.

Deltas are the hot path (one for each message's text in a read: a token's where tokens come a read
each): a delta's JSON is a fixed prefix per item plus the escaped text, written without building a
dict. Reasoning tokens are the analysis messages' tokens as the parser counts them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson

from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.harmony.parsing import ASSISTANT, AnswerParser, Header
from dynamo_oss.gateway.harmony.rendering import CUSTOM_INPUT, ClientTool, Prompt
from dynamo_oss.gateway.harmony.sealing import BoundSeal
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.usage import Usage

DELTA_EVENTS = {
    "reasoning": b"response.reasoning_text.delta",
    "message": b"response.output_text.delta",
    "function_call": b"response.function_call_arguments.delta",
}


class ResponseBuilder:
    """One response, built from the completion's text; `streaming` also yields its events."""

    def __init__(
        self,
        request: ResponsesRequest,
        prompt: Prompt,
        seal: BoundSeal,
        streaming: bool,
        stored: bool = False,
        ids: ItemIds | None = None,
    ) -> None:
        self.request, self.prompt, self.seal, self.streaming = request, prompt, seal, streaming
        self.stored = stored  # the response says store: true (set false when the store refused it)
        self.ids = ids or ItemIds(new_id("resp"))  # its items' ids follow its input items'
        self.id = self.ids.response_id
        self.created_at = int(time.time())
        self.sequence = -1  # OpenAI's streams number their events from 0 (response.created)
        self.output: list[dict[str, Any]] = []
        self.item: dict[str, Any] | None = None  # the item being written
        self.text: list[str] = []  # its text so far
        self.delta_head = b""  # its delta events up to the delta's text
        self.harmony = AnswerParser(prompt.tools)
        self.final: dict[str, Any] | None = None  # the whole response, once finished
        self.billed: Usage | None = None  # its usage, once finished
        self.done = False  # a Responses answer ends only with its completion
        self.queued = False  # created before its completion started (a background response)

    # the completion's text in, events out
    def queue(self) -> bytes:
        """A background response's first events, as it is accepted and before its completion starts:
        `response.created` and `response.queued`, both with the response queued."""
        self.queued = True
        snapshot = self.response("queued", None)
        return self._event("response.created", response=snapshot) + self._event("response.queued", response=snapshot)

    def start(self) -> bytes:
        snapshot = self.response("in_progress", None)
        created = b"" if self.queued else self._event("response.created", response=snapshot)
        return created + self._event("response.in_progress", response=snapshot)

    def feed(self, token_ids: list[int]) -> bytes:
        return b"".join([self._on(kind, value) for kind, value in self.harmony.feed(token_ids)])

    def finish(self, finish_reason: str | None, usage: dict[str, Any] | None) -> bytes:
        return self.close_output(finish_reason, usage) + self.completed()

    def close_output(self, finish_reason: str | None, usage: dict[str, Any] | None) -> bytes:
        """The last item's closing events; the whole response is `final` from then on."""
        cut = finish_reason == "length"
        self.harmony.finish()
        # The message the completion stopped in: whole, unless max_tokens cut it.
        out = self._close(complete=not cut) if self.item is not None else b""
        self.final = self.response("incomplete" if cut else "completed", usage)
        self.billed = Usage.of_responses(self.final["usage"]) if self.final["usage"] else None
        return out

    def completed(self) -> bytes:
        """The event carrying the whole response (`response.completed` or `response.incomplete`)."""
        assert self.final is not None
        return self._event(f"response.{self.final['status']}", response=self.final)

    def stop(self, status: str, error: dict[str, Any] | None) -> bytes:
        """The answer ends before its completion did (`cancelled`, or `failed` with `error`): the item being
        written closes incomplete, and `response.failed` ends the stream with the response as it stands
        (OpenAI's streams have no event of their own for a cancelled response; its status says which)."""
        out = self._close(complete=False) if self.item is not None else b""
        self.final = {**self.response(status, None), "error": error}
        return out + self._event("response.failed", response=self.final)

    def snapshot(self) -> dict[str, Any]:
        """The response while it is being written, with the items finished so far (a background
        response's record, read while it runs)."""
        finished = self.output if self.item is None else self.output[:-1]
        return {**self.response("in_progress", None), "output": list(finished)}

    @property
    def finished_items(self) -> int:
        return len(self.output) - (self.item is not None)

    def error(self, error: dict[str, Any]) -> bytes:
        """The stream could not finish (a worker failed, the frontend went away): an `error` event ends it."""
        code = error.get("code")
        return self._event(
            "error", code=None if code is None else str(code), message=error.get("message") or "", param=None
        )

    # harmony messages
    def _on(self, kind: str, value: object) -> bytes:
        if kind == "text":
            return self._text(value)  # type: ignore[arg-type]
        if kind == "begin":
            return self._begin(value)  # type: ignore[arg-type]
        return self._close(complete=True) if self.item is not None else b""

    def _begin(self, header: Header) -> bytes:
        index = len(self.output)
        if header.recipient and header.recipient != ASSISTANT:  # a call to a tool the request declared
            item = self._call_item(self.prompt.tools[header.recipient])
        elif header.channel == "analysis":
            item = {
                "id": self.ids.next("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
        else:
            item = {
                "id": self.ids.next("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
        self.item, self.text = item, []
        self.output.append(item)
        out = self._event("response.output_item.added", output_index=index, item=item)
        part = _part(item["type"], "")
        if part is not None:
            out += self._event(
                "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
            )
        kind = DELTA_EVENTS.get(item["type"])
        if kind is not None:
            content_index = b'"content_index":0,' if item["type"] != "function_call" else b""
            logprobs = b'"logprobs":[],' if item["type"] == "message" else b""
            self.delta_head = (
                b"event: "
                + kind
                + b'\ndata: {"type":"'
                + kind
                + b'","item_id":"'
                + item["id"].encode()
                + b'","output_index":%d,' % index
                + content_index
                + logprobs
                + b'"delta":'
            )
        return out

    def _call_item(self, tool: ClientTool) -> dict[str, Any]:
        if tool.kind == "custom":
            item: dict[str, Any] = {
                "id": self.ids.next("ctc"),
                "type": "custom_tool_call",
                "call_id": new_id("call"),
                "name": tool.name,
                "input": "",
            }
        else:
            item = {
                "id": self.ids.next("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": new_id("call"),
                "name": tool.name,
                "arguments": "",
            }
        if tool.namespace:
            item["namespace"] = tool.namespace
        return item

    def _text(self, text: str) -> bytes:
        if self.item is None or not text:
            return b""
        self.text.append(text)
        if not self.streaming or self.item["type"] == "custom_tool_call":
            return b""  # a custom tool's input is the string inside its JSON arguments: sent whole at the end
        self.sequence += 1
        return b'%b%b,"sequence_number":%d}\n\n' % (self.delta_head, orjson.dumps(text), self.sequence)

    def _close(self, complete: bool) -> bytes:
        item, text, index = self.item, "".join(self.text), len(self.output) - 1
        assert item is not None
        self.item = None
        status = "completed" if complete else "incomplete"
        out = b""
        if item["type"] == "reasoning":
            out += self._event(
                "response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0, text=text
            )
            item["content"] = [_part(item["type"], text)]
            if self.request.wants_sealed_reasoning():
                item["encrypted_content"] = self.seal.seal(text)
        elif item["type"] == "message":
            out += self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            item["content"] = [_part(item["type"], text)]
        elif item["type"] == "function_call":
            item["arguments"] = text
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=text,
            )
        else:
            item["input"] = _custom_input(text)
            if item["input"]:
                out += self._event(
                    "response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=item["input"]
                )
            out += self._event(
                "response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=item["input"]
            )
        if "content" in item:
            out += self._event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=item["content"][0],
            )
        if "status" in item:
            item["status"] = status
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _event(self, kind: str, **fields: Any) -> bytes:
        if not self.streaming:
            return b""
        self.sequence += 1
        payload = orjson.dumps({"type": kind, **fields, "sequence_number": self.sequence})
        return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

    # the response object
    def response(self, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
        request = self.request
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": request.model,
            "output": self.output if status not in ("queued", "in_progress") else [],
            "usage": self._usage(usage) if usage is not None else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "parallel_tool_calls": request.parallel_tool_calls,
            "previous_response_id": request.previous_response_id,
            "background": bool(request.background),
            "reasoning": {"effort": request.reasoning.effort if request.reasoning else None, "summary": None},
            "store": self.stored,
            "temperature": request.temperature if request.temperature is not None else 1.0,
            "top_p": request.top_p if request.top_p is not None else 1.0,
            "text": {"format": _format(request)},
            "tool_choice": _plain(request.tool_choice),
            "tools": [tool.model_dump(mode="json", exclude_none=True) for tool in request.tools],
            "truncation": "disabled",
            "metadata": request.metadata or {},
        }

    def _usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        reasoning = self.harmony.reasoning_tokens
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": min(reasoning, completion)},
            "total_tokens": prompt + completion,
        }


def terminal_event(response: dict[str, Any], sequence: int) -> bytes:
    """The event that ends a response's stream, numbered `sequence`, for a response whose stream lacks its
    own (a background response ended by another gateway: cancelled, or failed when its process died)."""
    status = response.get("status")
    kind = f"response.{status}" if status in ("completed", "incomplete") else "response.failed"
    payload = orjson.dumps({"type": kind, "response": response, "sequence_number": sequence})
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


def _format(request: ResponsesRequest) -> dict[str, Any]:
    """The request's `text.format` as it was sent, or the default."""
    fmt = request.text.format if request.text else None
    return fmt.model_dump(mode="json", by_alias=True, exclude_unset=True) if fmt else {"type": "text"}


def _part(item_type: str, text: str) -> dict[str, Any] | None:
    """The content part an item's text goes in (tool calls have none)."""
    if item_type == "reasoning":
        return {"type": "reasoning_text", "text": text}
    if item_type == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return None


def _custom_input(arguments: str) -> str:
    """The string a custom tool was called with: gpt-oss writes `{"input": "..."}`; anything that is
    not that JSON is taken as the input itself."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value[CUSTOM_INPUT] if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str) else arguments


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else value
