"""An answer read from the completion's token ids by openai-harmony's own parser: which message, on
which channel, to whom.

The gateway asks Dynamo's frontend for each chunk's token ids (`nvext.extra_fields:
["completion_token_ids"]`, completion.py) and parses those, never the text: a message's bounds,
channel and recipient come only from harmony's special tokens, so text a model copies from a
document (`<|call|>` written as ordinary tokens) stays text. The prompt ends `<|start|>assistant`,
so the ids begin inside the first message's header. What harmony's parser would read is read
without it where that is the same and cheaper: a message's text (decoding.py) and the plain headers
gpt-oss writes (headers.py); harmony's parser reads every other header, from the tokens held since
the last message's end.

A message to a recipient the request did not declare is not a call (OpenAI's API returns only
calls to tools the request offered): it is written as what its channel holds, reasoning on
`analysis` and the answer's text otherwise, so no client runs a tool it never offered.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from openai_harmony import HarmonyError, Role, StreamableParser, StreamState

from dynamo_oss.gateway.harmony.decoding import MessageText
from dynamo_oss.gateway.harmony.headers import FIRST_SPECIAL, MESSAGE, read_header
from dynamo_oss.gateway.harmony.rendering import encoding

HARMONY_ENDS = {200007: "<|end|>", 200012: "<|call|>", 200002: "<|return|>"}  # a message's end, in harmony
ENDS = {**HARMONY_ENDS, 199999: "<|endoftext|>"}  # and gpt-oss's end of text, a stop token too
MAX_HELD = 64  # tokens outside any message's text held for a header before harmony's parser reads them
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
        self.parser: StreamableParser | None = None  # harmony's, while it reads what headers.py leaves to it
        self.held: list[int] = []  # tokens since the last message's text, not yet read by harmony's parser
        self.after_end = False  # they follow a message's end, not the prompt's `<|start|>assistant`
        self.text: MessageText | None = None  # the open message's text; None outside a message's content
        self.channel: str | None = None
        self.reasoning_tokens = 0

    def feed(self, token_ids: list[int]) -> list[Event]:
        """The events of the next token ids: a message's text they carry is one event, not one a token, so
        a read of many tokens costs a builder one delta to write (a chunk or an event) for each message."""
        events: list[Event] = []
        run = ""  # the open message's text since the last event
        for token in token_ids:
            text = self.text
            if text is not None and token not in ENDS:  # the common case: one more token of the open message
                if token < FIRST_SPECIAL and self.channel == "analysis":
                    self.reasoning_tokens += 1
                # a special token inside a message's text is that text, as harmony reads it
                delta = text.push(token)
                if delta:
                    run += delta
                continue
            if run:
                events.append(("text", run))
                run = ""
            if text is not None:
                events.append(self._end(token))
            elif self.parser is None:
                events += self._hold(token)
            else:
                events += self._harmony_reads(token)
        if run:
            events.append(("text", run))
        return events

    def finish(self) -> list[Event]:
        """The completion ended: close the open message, if any."""
        if self.text is None:
            return []
        self.text = None
        return [("end", "")]

    def _end(self, token: int) -> Event:
        """The open message ends. A header follows: after `<|start|>`, or, past gpt-oss's end of text, read
        as after `<|start|>assistant`."""
        self.text, self.channel, self.parser = None, None, None
        self.after_end = token in HARMONY_ENDS
        return ("end", ENDS[token])

    def _hold(self, token: int) -> list[Event]:
        """A token of the next header. At `<|message|>` the header is read, by headers.py where it can, else by
        harmony's parser from the first token held, as is every token after it until a message begins."""
        self.held.append(token)
        if token == MESSAGE and (header := read_header(self.held, self.after_end)) is not None:
            self.held = []
            return self._begin(*header)
        if token != MESSAGE and len(self.held) <= MAX_HELD:
            return []
        held, self.held = self.held, []
        self.parser = StreamableParser(encoding(), role=None) if self.after_end else _new_parser()
        return [event for token in held for event in self._harmony_reads(token)]

    def _harmony_reads(self, token: int) -> list[Event]:
        if not self._process(token) or token != MESSAGE or self.parser.state != StreamState.CONTENT:
            return []
        return self._begin(self.parser.current_channel, self.parser.current_recipient, self.parser.current_content_type)

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

    def _begin(self, channel: str | None, recipient: str | None, content_type: str | None) -> list[Event]:
        self.text, self.channel = MessageText(), channel or "final"
        if recipient is None or recipient == ASSISTANT or recipient in self.declared:
            header = Header(channel=self.channel, recipient=recipient, content_type=content_type)
        else:
            header = Header(channel=self.channel, recipient=None, content_type=None, undeclared=recipient)
        return [("begin", header)]


def _new_parser() -> StreamableParser:
    """A parser inside an assistant message's header, as after the prompt's `<|start|>assistant`."""
    return StreamableParser(encoding(), role=Role.ASSISTANT)
