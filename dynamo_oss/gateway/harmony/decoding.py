"""A message's text from its token ids, decoded exactly as openai-harmony's StreamableParser decodes it
(0.0.8), without a call into harmony per token.

Why: inside a message's text harmony's parser only decodes, yet it crosses into Rust and re-encodes
every delta into tokens: about 3.5 us a token here, a third of the gateway's CPU per streamed chat
token. Its rule, reproduced here on a cache of each token's bytes (and checked token by token against
harmony's parser in tests/gateway/test_responses_units.py):

- a token's bytes join whatever bytes are held back, and are read as UTF-8;
- an incomplete character at the end is held back for the next token (the text before it goes out);
- an invalid byte sequence is one U+FFFD, and the bytes after it are held back, read with the next token;
- an id harmony cannot decode (past the vocabulary) holds back everything after it until the message ends.

The bytes still held back when a message ends are dropped, as harmony's deltas drop them.
"""

from __future__ import annotations

from openai_harmony import HarmonyError

from dynamo_oss.gateway.harmony.rendering import encoding

REPLACEMENT = "\ufffd"
INCOMPLETE = "unexpected end of data"  # CPython's reason for a UTF-8 sequence cut by the end of the bytes


class _Pieces(dict):
    """Token id -> its text where its bytes are UTF-8 on their own, else its bytes. Filled as tokens come,
    so never more than the vocabulary (an id harmony cannot decode is not kept)."""

    def __missing__(self, token: int) -> str | bytes | None:
        try:
            escaped = encoding().decode([token], errors="surrogateescape")
        except HarmonyError:
            return None  # an id past the vocabulary
        data = escaped.encode("utf-8", "surrogateescape")
        try:
            piece: str | bytes = data.decode()
        except UnicodeDecodeError:
            piece = data
        self[token] = piece
        return piece


PIECES = _Pieces()
STUCK = object()  # held back for good: the message had an id harmony cannot decode


class MessageText:
    """One message's text as its tokens come: `push` returns what harmony's parser gives as its
    `last_content_delta` for the token (None for nothing)."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: bytes | object = b""

    def push(self, token: int) -> str | None:
        piece = PIECES[token]
        if not self.held and piece.__class__ is str:  # the common case: a whole character or more, nothing held
            return piece  # type: ignore[return-value]
        return self._held_back(piece)

    def _held_back(self, piece: str | bytes | None) -> str | None:
        if self.held is STUCK or piece is None:
            self.held = STUCK
            return None
        data = self.held + (piece.encode() if isinstance(piece, str) else piece)  # type: ignore[operator]
        try:
            text = data.decode()
        except UnicodeDecodeError as error:
            text = data[: error.start].decode()
            if error.reason == INCOMPLETE:
                self.held = data[error.start :]
                return text or None
            self.held = data[error.end :]
            return text + REPLACEMENT
        self.held = b""
        return text
