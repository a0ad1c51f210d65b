"""Harmony read back from the text a completion streams: which message, on which channel, to whom.

The gateway renders the prompt itself and asks Dynamo's frontend for a plain completion, whose
text keeps harmony's special tokens (`<|channel|>`, `<|message|>`, ...). This parser cuts that
text into messages as it arrives, so an answer can stream as Responses events. The prompt ends
with `<|start|>assistant`, so the text begins inside the first message's header. A header may
put the recipient before or after the channel (`assistant to=functions.f<|channel|>commentary`
as openai-harmony renders, `<|channel|>commentary to=functions.f` as gpt-oss often writes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, *ENDS)
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*(\w+)")


@dataclass
class Header:
    """A message's header: its channel, its recipient (a tool's `namespace.name`) and content type."""

    channel: str
    recipient: str | None
    content_type: str | None


def parse_header(text: str) -> Header:
    """`assistant<|channel|>commentary to=functions.f <|constrain|>json`, in any of harmony's orders."""
    channel = _CHANNEL.search(text)
    recipient = _RECIPIENT.search(text)
    content_type = text.split(CONSTRAIN, 1)[1].strip() if CONSTRAIN in text else None
    if content_type is None and recipient is not None:
        after = text[recipient.end() :].replace(CHANNEL, " ").split()
        content_type = next((word for word in after if word == "json"), None)
    return Header(
        channel=channel.group(1) if channel else "final",
        recipient=recipient.group(1) if recipient else None,
        content_type=content_type,
    )


class HarmonyText:
    """Feed completion text; get back ("begin", Header), ("text", str) and ("end", ending) events.

    `ending` is the marker that closed the message (`<|end|>`, `<|call|>`, `<|return|>`), or ""
    when the completion stopped without one (a stop token the frontend does not print, or a
    length cut: `finish()` closes the open message).
    """

    def __init__(self) -> None:
        self.header: str | None = ""  # the header being read; None inside a message's content
        self.pending = ""  # text that may be the start of a marker, held until the next piece
        self.open = False

    def feed(self, text: str) -> list[tuple[str, object]]:
        events: list[tuple[str, object]] = []
        text = self.pending + text
        self.pending = ""
        while text:
            if self.header is not None:
                text = self.header + text
                at = text.find(MESSAGE)
                if at < 0:
                    self.header = text
                    break
                header, text = text[:at], text[at + len(MESSAGE) :]
                self.header, self.open = None, True
                events.append(("begin", parse_header(header)))
                continue
            at = text.find("<|")
            if at < 0:
                held = 1 if text.endswith("<") else 0  # perhaps the first character of a marker
                if len(text) > held:
                    events.append(("text", text[: len(text) - held]))
                self.pending = text[len(text) - held :]
                break
            if at:
                events.append(("text", text[:at]))
                text = text[at:]
            marker = next((m for m in MARKERS if text.startswith(m)), None)
            if marker is None:
                if any(m.startswith(text) for m in MARKERS):  # a marker cut between two pieces
                    self.pending = text
                    break
                events.append(("text", "<|"))  # literal text that only looks like one
                text = text[2:]
                continue
            text = text[len(marker) :]
            if marker == START:  # a new message with no end marker before it
                events.append(("end", ""))
                self.header, self.open = "", False
            elif marker in ENDS:
                events.append(("end", marker))
                self.open = False
                self.header = ""
                text = text.removeprefix(START)
            else:
                events.append(("text", marker))  # a header marker inside content: keep it as text
        return events

    def in_content(self) -> bool:
        """Inside a message's text with nothing held back: plain text is that message's, as it is."""
        return self.header is None and not self.pending

    def finish(self) -> list[tuple[str, object]]:
        """The completion ended: close the open message, if any."""
        events: list[tuple[str, object]] = []
        if self.pending and self.open:
            events.append(("text", self.pending))
        self.pending = ""
        if self.open:
            events.append(("end", ""))
            self.open = False
        return events
