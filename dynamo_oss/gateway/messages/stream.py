"""A completion's harmony, turned into an Anthropic Message: content blocks, their events, usage.

`MessageBuilder` reads the completion's token ids as `AnswerParser` cuts them into messages: the `analysis` channel
becomes a `thinking` block (its signature the text sealed under the graph's key, so the block
handed back is verified and its text rendered again), a message to a tool a `tool_use` block,
anything else a `text` block. Streaming, the events come in the order the SDK accumulates:
`message_start`, per block `content_block_start`, its deltas (`thinking_delta` then one
`signature_delta`; `text_delta`; one `input_json_delta` with the whole input once the call is
complete, so the SDK never parses a partial that will not close), `content_block_stop`, then
`message_delta` with the stop reason and usage, and `message_stop`.

Stop sequences apply to the answer's text, never to the thinking (stops.py): a match ends the
message (`stop_reason: "stop_sequence"`) and the shell stops the generation.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from dynamo_oss.gateway.messages.conversation import Thinking
from dynamo_oss.gateway.messages.errors import stream_error_event
from dynamo_oss.gateway.protocol.messages import MessagesRequest
from dynamo_oss.gateway.stops import StopSequences
from dynamo_oss.gateway.harmony.parsing import ASSISTANT, AnswerParser, Header
from dynamo_oss.gateway.harmony.rendering import Prompt
from dynamo_oss.gateway.harmony.sealing import BoundSeal
from dynamo_oss.gateway.ids import new_id
from dynamo_oss.gateway.usage import Usage

DELTAS = {"text": (b"text_delta", b"text"), "thinking": (b"thinking_delta", b"thinking")}


class MessageBuilder:
    """One Message, built from the completion's text; `streaming` also yields its events."""

    def __init__(
        self, request: MessagesRequest, prompt: Prompt, seal: BoundSeal, thinking: Thinking, streaming: bool
    ) -> None:
        self.request, self.prompt, self.seal, self.thinking, self.streaming = request, prompt, seal, thinking, streaming
        self.id = new_id("msg")
        self.content: list[dict[str, Any]] = []
        self.block: dict[str, Any] | None = None  # the block being written (None: none, or thinking not shown)
        self.open = False  # inside a harmony message, shown or not
        self.text: list[str] = []  # the open message's text so far
        self.delta_head = b""  # the open block's delta events up to the delta's text
        self.harmony = AnswerParser(prompt.tools)
        self.stops = StopSequences(request.stop_sequences or [])
        self.tokens = 0  # the completion's tokens so far
        self.done = False
        self.final: dict[str, Any] | None = None
        self.billed: Usage | None = None

    # the completion's text in, events out
    def start(self) -> bytes:
        return self._event("message_start", message=self._message(None, None, self._usage(None, started=True)))

    def feed(self, token_ids: list[int]) -> bytes:
        self.tokens += len(token_ids)
        out = []
        for kind, value in self.harmony.feed(token_ids):
            if self.done:  # a stop sequence ended the answer: the rest of the read is not the client's
                break
            out.append(self._on(kind, value))
        return b"".join(out)

    def finish(self, finish_reason: str | None, usage: dict[str, Any] | None) -> bytes:
        self.harmony.finish()
        out = [self._close()] if self.open else []
        if self.content and self.content[-1]["type"] == "tool_use" and finish_reason != "length":
            reason = "tool_use"
        else:
            reason = "max_tokens" if finish_reason == "length" else "end_turn"
        out.append(self._end(reason, None, usage))
        return b"".join(out)

    def error(self, error: dict[str, Any]) -> bytes:
        return stream_error_event(str(error.get("message") or "")) if self.streaming else b""

    # harmony messages
    def _on(self, kind: str, value: object) -> bytes:
        if kind == "text":
            return self._text(value)  # type: ignore[arg-type]
        if kind == "begin":
            return self._begin(value)  # type: ignore[arg-type]
        return self._close() if self.open else b""

    def _begin(self, header: Header) -> bytes:
        self.open, self.text = True, []
        if header.recipient and header.recipient != ASSISTANT:  # a call to a tool the request declared
            name = self.prompt.tools[header.recipient].name
            block: dict[str, Any] | None = {"type": "tool_use", "id": new_id("toolu"), "name": name, "input": {}}
        elif header.channel == "analysis":
            block = {"type": "thinking", "thinking": "", "signature": ""} if self.thinking.shown else None
        else:
            block = {"type": "text", "text": ""}
        self.block = block
        if block is None:
            return b""
        index = len(self.content)
        self.content.append(block)
        delta = DELTAS.get(block["type"])
        if delta is not None:
            kind, field = delta
            self.delta_head = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                b'"delta":{"type":"%b","%b":' % (index, kind, field)
            )
        return self._event("content_block_start", index=index, content_block=block)

    def _text(self, text: str) -> bytes:
        if not self.open or not text:
            return b""
        block = self.block
        if block is None or block["type"] != "text":
            self.text.append(text)
            if block is None or block["type"] == "tool_use":
                return b""  # hidden thinking, or a call's input: sent whole when complete
            return self._delta(text) if self.thinking.with_text else b""
        sent, stop = self.stops.push(text)
        self.text.append(sent)
        out = self._delta(sent) if sent else b""
        if stop is not None:  # the answer ends before the stop sequence
            out += self._close()
            return out + self._end("stop_sequence", stop, None)
        return out

    def _delta(self, text: str) -> bytes:
        if not self.streaming:
            return b""
        return b"%b%b}}\n\n" % (self.delta_head, orjson.dumps(text))

    def _close(self) -> bytes:
        block, text = self.block, "".join(self.text)
        self.open, self.block, self.text = False, None, []
        if block is None:
            return b""
        index = self.content.index(block)
        out = b""
        if block["type"] == "thinking":
            block["signature"] = self.seal.seal(text)
            block["thinking"] = text if self.thinking.with_text else ""
            out += self._event(
                "content_block_delta", index=index, delta={"type": "signature_delta", "signature": block["signature"]}
            )
        elif block["type"] == "tool_use":
            block["input"] = _tool_input(text)
            out += self._event(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            )
        else:
            rest = self.stops.flush()
            out += self._delta(rest) if rest else b""
            block["text"] = text + rest
        return out + self._event("content_block_stop", index=index)

    def _end(self, reason: str, stop: str | None, usage: dict[str, Any] | None) -> bytes:
        """The message's last events; a stop sequence ends it before the completion ends."""
        self.done = True
        counted = self._usage(usage, started=False)
        self.final = self._message(reason, stop, counted)
        self.billed = Usage.of_messages(counted)
        return self._event(
            "message_delta", delta={"stop_reason": reason, "stop_sequence": stop}, usage=counted
        ) + self._event("message_stop")

    def _event(self, kind: str, **fields: Any) -> bytes:
        if not self.streaming:
            return b""
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"

    # the message object
    def _message(self, reason: str | None, stop: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": self.content if reason is not None else [],
            "stop_reason": reason,
            "stop_sequence": stop,
            "usage": usage,
        }

    def _usage(self, usage: dict[str, Any] | None, started: bool) -> dict[str, Any]:
        """Anthropic's usage: `input_tokens` are those not read from the cache, which
        `cache_read_input_tokens` counts (known once the completion ends: a message cut by a stop
        sequence has no cache figure). At the start, the whole prompt, as rendered here."""
        prompt = len(self.prompt.token_ids)
        if started:
            return {"input_tokens": prompt, "output_tokens": 0}
        if usage is None:
            return {
                "input_tokens": prompt,
                "output_tokens": self.tokens,
                "output_tokens_details": {"thinking_tokens": self.harmony.reasoning_tokens},
            }
        prompt = int(usage.get("prompt_tokens") or prompt)
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        output = int(usage.get("completion_tokens") or self.tokens)
        return {
            "input_tokens": prompt - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
            "output_tokens_details": {"thinking_tokens": min(self.harmony.reasoning_tokens, output)},
        }


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's input: gpt-oss writes its arguments as a JSON object; anything else (a call the
    length limit cut) is given as the text under `arguments`, never dropped."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments} if arguments else {}
    return value if isinstance(value, dict) else {"arguments": arguments}
