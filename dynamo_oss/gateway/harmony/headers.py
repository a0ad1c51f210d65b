"""A message's header read as openai-harmony's StreamableParser (0.0.8) reads it, for the plain headers gpt-oss
writes (`<|channel|>analysis`, `<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json`),
without harmony.

Why: harmony's parser spends about 25 us on each token outside a message's text (it renders its formatting
tokens afresh for each), some 4 to 6 tokens a message, and 75 us making a parser: together about a tenth of
the gateway's CPU per streamed token. Anything unusual (another role, other special tokens, whitespace
other than spaces, text harmony refuses) is None here, and harmony's parser reads it instead; a test
compares the two over generated headers.
"""

from __future__ import annotations

from dynamo_oss.gateway.harmony.decoding import PIECES

START, CHANNEL, CONSTRAIN, MESSAGE = 200006, 200005, 200003, 200008  # harmony's formatting tokens
FIRST_SPECIAL = 199998  # o200k_harmony's special tokens are the ids from here up
CHANNEL_MARK, CONSTRAIN_MARK = "<|channel|>", "<|constrain|>"
ASSISTANT = "assistant"
PLAIN = frozenset(map(chr, range(0x20, 0x7F)))  # printable ASCII and the space: where harmony's whitespace rules agree


def read_header(tokens: list[int], after_end: bool) -> tuple[str | None, str | None, str | None] | None:
    """(channel, recipient, content type) of the header `tokens` (ending in `<|message|>`), as harmony's parser
    reads it at a message's start: after another message's end (`after_end`, `<|start|>` first), or after the
    prompt's `<|start|>assistant`. None where harmony's parser must read it."""
    if tokens[-1] != MESSAGE:
        return None
    if after_end:
        if tokens[0] != START:
            return None
        tokens = tokens[1:]
    pieces = [
        PIECES[token] if token < FIRST_SPECIAL or token in (CHANNEL, CONSTRAIN) else None for token in tokens[:-1]
    ]
    if not all(piece.__class__ is str for piece in pieces):
        return None
    header = "".join(pieces)  # type: ignore[arg-type]
    if not PLAIN.issuperset(header):
        return None
    channel = None
    at = header.find(CHANNEL_MARK)
    if at >= 0:  # the channel runs to the next space or `<`
        rest = header[at + len(CHANNEL_MARK) :]
        end = min((i for i in (rest.find(" "), rest.find("<")) if i >= 0), default=len(rest))
        if not end:
            return None
        channel, header = rest[:end], header[:at] + rest[end:]
    parts = header.replace(CONSTRAIN_MARK, " " + CONSTRAIN_MARK).split()
    if after_end:  # the role is the header's: only the assistant's is read here
        if not parts or parts[0] != ASSISTANT:
            return None
    if parts and parts[0] == ASSISTANT:
        parts.pop(0)
    recipient = content_type = None
    if parts:
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif not parts:
            recipient = last
        else:
            content_type = last
            raw = parts.pop()
            recipient = raw[3:] if raw.startswith("to=") else raw
    if parts:
        return None
    return channel, recipient, content_type
