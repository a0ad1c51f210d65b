"""A completion's harmony, turned into a chat completion: the message, its chunks, usage.

`ChatBuilder` reads the completion's token ids as `AnswerParser` cuts them into messages: the
`analysis` channel is the chain of thought, written where OpenAI asks gpt-oss providers to put it
(a `reasoning` property on the message and on each delta, OpenRouter's convention) and as
`reasoning_content` beside it (vLLM's and DeepSeek's name, which many clients read), both left out
when the request says `reasoning: {"exclude": true}`; a message to a declared tool is a tool call,
streamed as OpenAI streams one (its id, name and empty arguments first, then the arguments as they
come); anything else is the answer's `content`. Stop sequences apply to the content only (stops.py).

Deltas are the hot path (one for each message's text in a read: a token's where tokens come a read
each): a chunk is a fixed prefix and suffix around the escaped text, written without building a
dict, in as few Python calls as the text's kind allows.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from dynamo_oss.gateway.harmony.parsing import ASSISTANT, AnswerParser, Header
from dynamo_oss.gateway.harmony.rendering import Prompt
from dynamo_oss.gateway.ids import new_id
from dynamo_oss.gateway.protocol.chat import ChatRequest
from dynamo_oss.gateway.stops import StopSequences
from dynamo_oss.gateway.usage import Usage

CHUNK_TAIL = b',"finish_reason":null,"logprobs":null}]}\n\n'  # after a delta, in every chunk but the last


class ChatBuilder:
    """One chat completion, built from the completion's token ids; `streaming` also yields its chunks."""

    def __init__(self, request: ChatRequest, prompt: Prompt, streaming: bool) -> None:
        self.request, self.prompt, self.streaming = request, prompt, streaming
        self.show_reasoning = not (request.reasoning and request.reasoning.exclude)
        options = request.stream_options
        self.show_usage = bool(options and options.include_usage)
        self.id, self.created = f"chatcmpl-{secrets.token_hex(16)}", int(time.time())
        head = orjson.dumps(
            {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": request.model}
        )
        self.chunk_head = b"data: " + head[:-1] + b',"choices":[{"index":0,"delta":'
        self.harmony = AnswerParser(prompt.tools)
        self.stops = StopSequences(request.stop_sequences())
        self.kind: str | None = None  # what the open message is written as: reasoning, content or a call
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.tokens = 0  # the completion's tokens so far
        self.done = False  # a stop sequence ended the answer before the completion
        self.final: dict[str, Any] | None = None
        self.billed: Usage | None = None

    # the completion's token ids in, chunks out
    def start(self) -> bytes:
        return self._chunk(b'{"role":"assistant","content":""}')

    def feed(self, token_ids: list[int]) -> bytes:
        self.tokens += len(token_ids)
        out = b""  # an event or two a read, mostly: joining a list would cost more than adding to b""
        for kind, value in self.harmony.feed(token_ids):
            if self.done:  # a stop sequence ended the answer: the rest is not the client's
                break
            out += self._text(value) if kind == "text" else self._on(kind, value)  # type: ignore[arg-type]
        return out

    def finish(self, finish_reason: str | None, usage: dict[str, Any] | None) -> bytes:
        self.harmony.finish()
        out = self._content_text(self.stops.flush())
        reason = "length" if finish_reason == "length" else "tool_calls" if self.calls else "stop"
        return out + self._end(reason, usage)

    def error(self, error: dict[str, Any]) -> bytes:
        """The stream could not finish: an error event ends it, as Dynamo's frontend ends a chat stream."""
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n" if self.streaming else b""

    # harmony messages
    def _on(self, kind: str, value: object) -> bytes:
        """A message begins or ends."""
        if kind == "begin":
            return self._begin(value)  # type: ignore[arg-type]
        self.kind = None
        return b""

    def _begin(self, header: Header) -> bytes:
        if header.recipient and header.recipient != ASSISTANT:  # a call to a tool the request declared
            self.kind = "call"
            call = {
                "id": new_id("call"),
                "type": "function",
                "function": {"name": self.prompt.tools[header.recipient].name, "arguments": ""},
            }
            self.calls.append(call)
            return self._chunk(b'{"tool_calls":[' + orjson.dumps({"index": len(self.calls) - 1, **call}) + b"]}")
        self.kind = "reasoning" if header.channel == "analysis" else "content"
        return b""

    def _text(self, text: str) -> bytes:
        if self.kind == "reasoning":
            self.reasoning.append(text)
            if not (self.show_reasoning and self.streaming):
                return b""
            escaped = orjson.dumps(text)
            return b"".join(
                (self.chunk_head, b'{"reasoning":', escaped, b',"reasoning_content":', escaped, b"}", CHUNK_TAIL)
            )
        if self.kind == "call":
            call = self.calls[-1]["function"]
            call["arguments"] += text
            index = len(self.calls) - 1
            return self._chunk(
                b'{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]}' % (index, orjson.dumps(text))
            )
        if not self.stops.stops:  # nothing to hold back
            return self._content_text(text)
        sent, stop = self.stops.push(text)
        out = self._content_text(sent)
        if stop is not None:  # the answer ends before the stop sequence
            out += self._end("stop", None)
        return out

    def _content_text(self, text: str) -> bytes:
        if not text:
            return b""
        self.content.append(text)
        return self._chunk(b'{"content":%b}' % orjson.dumps(text))

    def _end(self, reason: str, usage: dict[str, Any] | None) -> bytes:
        """The answer's last chunks; a stop sequence ends it before the completion ends."""
        self.done = True
        counted = self._usage(usage)
        self.billed = Usage.of_openai(counted)
        self.final = self._completion(reason, counted)
        if not self.streaming:
            return b""
        out = self.chunk_head + b'{},"finish_reason":"%b","logprobs":null}]}\n\n' % reason.encode()
        if self.show_usage:
            usage_head = self.chunk_head[: self.chunk_head.index(b'"choices"')]
            out += usage_head + b'"choices":[],"usage":' + orjson.dumps(counted) + b"}\n\n"
        return out + b"data: [DONE]\n\n"

    def _chunk(self, delta: bytes) -> bytes:
        if not self.streaming:
            return b""
        return self.chunk_head + delta + CHUNK_TAIL

    # the chat completion object
    def _completion(self, reason: str, usage: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None, "refusal": None}
        if self.reasoning and self.show_reasoning:
            message["reasoning"] = message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.request.model,
            "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
            "usage": usage,
        }

    def _usage(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        """OpenAI's usage: the frontend's figures, or, for an answer a stop sequence ended, the prompt
        as rendered here and the tokens read so far; reasoning tokens as the parser counted them."""
        prompt = int((usage or {}).get("prompt_tokens") or len(self.prompt.token_ids))
        completion = int((usage or {}).get("completion_tokens") or self.tokens)
        cached = int(((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": min(self.harmony.reasoning_tokens, completion)},
        }
