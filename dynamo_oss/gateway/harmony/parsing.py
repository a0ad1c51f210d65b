"""An answer read from the completion's token ids by openai-harmony's own parser: which message, on
which channel, to whom.

The gateway asks Dynamo's frontend for each chunk's token ids (`nvext.extra_fields:
["completion_token_ids"]`, completion.py) and parses those, never the text: a message's bounds,
channel and recipient come only from harmony's special tokens, so text a model copies from a
document (`<|call|>` written as ordinary tokens) stays text. The prompt ends `<|start|>assistant`,
so the ids begin inside the first message's header.

A message to a recipient the request did not declare is not a call (OpenAI's API returns only
calls to tools the request offered): it is written as what its channel holds, reasoning on
`analysis` and the answer's text otherwise, so no client runs a tool it never offered.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from openai_harmony import HarmonyError, Role, StreamableParser, StreamState

from dynamo_oss.gateway.harmony.decoding import MessageText
from dynamo_oss.gateway.harmony.rendering import encoding

START, MESSAGE = 200006, 200008
HARMONY_ENDS = {200007: "<|end|>", 200012: "<|call|>", 200002: "<|return|>"}  # a message's end, in harmony
ENDS = {**HARMONY_ENDS, 199999: "<|endoftext|>"}  # and gpt-oss's end of text, a stop token too
FIRST_SPECIAL = 199998  # o200k_harmony's special tokens are the ids from here up
ASSISTANT = "assistant"  # the recipient of a tool's answer, never a call

Event = tuple[str, object]  # ("begin", Header), ("text", str) or ("end", ending)


@dataclass
class Header:
    """A message's header: its channel, its recipient (a declared tool's `namespace.name`), content type."""

    channel: str
    recipient: str | None
    content_type: str | None
    undeclared: str | None = None  # a recipient the request did not declare, which is no call


class AnswerParser:
    """Feed the completion's token ids; get back ("begin", Header), ("text", str) and ("end", ending).

    `ending` is the token that closed the message (`<|end|>`, `<|call|>`, `<|return|>`), or ""
    when the completion stopped without one (a length cut: `finish()` closes the open message).
    `reasoning_tokens` counts the tokens of analysis messages' text, as they were generated.
    """

    def __init__(self, declared: Collection[str]) -> None:
        self.declared = declared
        self.parser = _new_parser()
        self.text: MessageText | None = None  # the open message's text; None outside a message's content
        self.channel: str | None = None
        self.reasoning_tokens = 0

    def feed(self, token_ids: list[int]) -> list[Event]:
        events: list[Event] = []
        for token in token_ids:
            text = self.text
            if text is not None and token not in ENDS:  # the common case: one more token of the open message
                if token < FIRST_SPECIAL and self.channel == "analysis":
                    self.reasoning_tokens += 1
                # a special token inside a message's text is that text, as harmony reads it
                delta = text.push(token)
                if delta:
                    events.append(("text", delta))
            else:
                events += self._structural(token)
        return events

    def finish(self) -> list[Event]:
        """The completion ended: close the open message, if any."""
        if self.text is None:
            return []
        self.text = None
        return [("end", "")]

    def _structural(self, token: int) -> list[Event]:
        """A token outside a message's text, or the one that ends it: harmony's parser reads it."""
        if self.text is not None:  # one of ENDS
            self.text, self.channel = None, None
            if token not in HARMONY_ENDS or not self._process(token):
                self.parser = _new_parser()  # the end of text: whatever follows is a new header
            return [("end", ENDS[token])]
        if not self._process(token) or token != MESSAGE or self.parser.state != StreamState.CONTENT:
            return []
        self.text, self.channel = MessageText(), self.parser.current_channel or "final"
        return [("begin", self._header())]

    def _process(self, token: int) -> bool:
        """One token through harmony's parser, outside a message's text. Where harmony cannot read it (a
        message begun without `<|start|>`, or text between two messages, which a model ignoring its end
        token writes), a parser at a new header reads it instead; False when that one cannot either (it
        is dropped)."""
        try:
            self.parser.process(token)
            return True
        except HarmonyError:
            self.parser = _new_parser()
        try:
            self.parser.process(token)
        except HarmonyError:
            self.parser = _new_parser()
            return False
        return True

    def _header(self) -> Header:
        recipient = self.parser.current_recipient
        content_type = self.parser.current_content_type
        if recipient is None or recipient == ASSISTANT or recipient in self.declared:
            return Header(channel=self.channel or "final", recipient=recipient, content_type=content_type)
        return Header(channel=self.channel or "final", recipient=None, content_type=None, undeclared=recipient)


def _new_parser() -> StreamableParser:
    """A parser inside an assistant message's header, as after the prompt's `<|start|>assistant`."""
    return StreamableParser(encoding(), role=Role.ASSISTANT)
