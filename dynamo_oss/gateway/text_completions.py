"""POST /v1/completions: Dynamo's own, passed on as it answers, with the usage every API's answer carries.

Dynamo's frontend reports no reasoning tokens for a plain completion (it parses no channels
there), so the gateway counts them: a completion of a harmony prompt (one ending
`<|start|>assistant`, as the Responses API asks for its answers) is harmony text, whose analysis
channel is gpt-oss's reasoning. Its text is tokenized again with gpt-oss's encoding, streamed or
not, so an answer is billed the same either way; a completion of a plain-text prompt has none.

Every stream asks Dynamo for its usage, which its key is billed by (usage.py); a client that did
not ask for it gets the stream without the usage chunk. Other chunks pass as they came.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from dynamo_oss.gateway.harmony.completion import COMPLETIONS_URL
from dynamo_oss.gateway.harmony.parsing import AnswerParser
from dynamo_oss.gateway.harmony.rendering import encoding
from dynamo_oss.gateway.routes import Checks, EventStream, Upstream, WholeBody, checked_request
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.gateway.usage import Usage, ask_for_usage


class CompletionsRoute:
    api = "completions"

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        request = await checked_request(checks, self.api, body)
        if not request.get("stream"):
            return Upstream(url=COMPLETIONS_URL, body=body, transform=CompletionJson())
        hide_usage = ask_for_usage(request)
        if hide_usage:
            body = json.dumps(request).encode()
        return Upstream(url=COMPLETIONS_URL, body=body, transform=CompletionStream(hide_usage))


def reasoning_tokens(text: str) -> int:
    """Tokens on the analysis channel of a completion's text (0 for text that is not harmony). The
    text is the completion's own, tokenized again with harmony's markers read as the tokens they were."""
    parser = AnswerParser(declared=())
    parser.feed(encoding().encode(text, allowed_special="all"))
    return parser.reasoning_tokens


def with_reasoning(usage: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """A completion's usage with its reasoning tokens, counted from its choices' `texts` where Dynamo
    gave none (at most its completion tokens: a text tokenized again may differ from what was generated)."""
    details = usage.get("completion_tokens_details") or {}
    if details.get("reasoning_tokens") is None:
        counted = sum(reasoning_tokens(text) for text in texts)
        details = {**details, "reasoning_tokens": min(counted, int(usage.get("completion_tokens") or 0))}
    return {**usage, "completion_tokens_details": details}


class CompletionStream(EventStream):
    """Streamed chunks as they came, but the usage chunk: the reasoning tokens added to it, or left out
    when `hide_usage` (the client did not ask for it). Chunks are kept as bytes and their text read
    only for the bill, and only from a harmony completion: a plain-text one costs a search a read."""

    def __init__(self, hide_usage: bool) -> None:
        super().__init__()
        self.hide_usage = hide_usage
        self.unread: list[bytes] = []  # whole events whose text is not in `texts` yet
        self.harmony = False  # a message marker went by: the text may have reasoning
        self.texts: dict[int, list[str]] = {}  # each choice's text, by index

    def feed(self, body: bytes) -> bytes:
        whole = self.whole_events(body)
        self.unread.append(whole)
        self.harmony = self.harmony or b"<|message|>" in whole
        if b'"usage":{' not in whole:  # the usage chunk's, or continuous usage (JSON escapes a quote in text)
            return whole
        return b"".join([self._event(event) for event in whole.split(b"\n\n")[:-1]])

    def _event(self, event: bytes) -> bytes:
        """One whole event and its separator (b"" for the usage chunk left out)."""
        if b'"usage":{' not in event:
            return event + b"\n\n"
        chunk = orjson.loads(event[6:])
        chunk["usage"] = with_reasoning(chunk["usage"], self._texts() if self.harmony else [])
        self.billed = Usage.of_openai(chunk["usage"])
        if self.hide_usage and not chunk.get("choices"):
            return b""
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def _texts(self) -> list[str]:
        for whole in self.unread:
            for event in whole.split(b"\n\n"):
                if event.startswith(b"data: {"):
                    for choice in orjson.loads(event[6:]).get("choices") or []:
                        self.texts.setdefault(int(choice.get("index") or 0), []).append(choice.get("text") or "")
        self.unread = []
        return ["".join(text) for text in self.texts.values()]


class CompletionJson(WholeBody):
    """A whole completion: its usage with the reasoning tokens added."""

    def rewrite(self, body: bytes) -> bytes:
        completion = orjson.loads(body)
        if completion.get("usage"):
            texts = [choice.get("text") or "" for choice in completion.get("choices") or []]
            completion["usage"] = with_reasoning(completion["usage"], texts)
            self.billed = Usage.of_openai(completion["usage"])
        return orjson.dumps(completion)
