"""A multipart/form-data body (RFC 7578), as OpenAI's clients upload a file: its fields by name.

Strict and small on purpose: the body is a client's, read whole within the gateway's body limit, and what
it may make this parser do is bounded here (so many parts, so large a part's head); the boundary is read
from the body's first line (a client's body starts with its delimiter: no preamble), and must be one
RFC 2046 allows. The parts are found with bytes.find, so a file of tens of MiB is split in milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dynamo_oss.gateway.errors import ApiError

MAX_PARTS = 16
MAX_PART_HEAD_BYTES = 8 * 1024
MAX_DISPOSITION = 1024  # characters of a part's Content-Disposition
_BOUNDARY = re.compile(rb"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ*-")


@dataclass(frozen=True)
class Part:
    """One field of the form: its value, and the file name it was sent with (None: a plain field)."""

    value: bytes
    filename: str | None

    def text(self, field: str) -> str:
        try:
            return self.value.decode()
        except UnicodeDecodeError:
            raise malformed(f"its {field!r} field is not UTF-8 text") from None


def malformed(why: str) -> ApiError:
    return ApiError(
        400,
        f"The upload is not a multipart/form-data body as the Files API takes: {why}. Send the file as the form's "
        "'file' field and 'purpose' as its own field (as OpenAI's clients and `curl -F file=@FILE -F purpose=batch` do).",
        code="invalid_multipart",
    )


def form_fields(body: bytes) -> dict[str, Part]:
    """The form's fields by name; ApiError 400 naming what is wrong with a body that is not such a form."""
    first_end = body.find(b"\r\n")
    if not body.startswith(b"--") or first_end < 0:
        raise malformed("it does not begin with a boundary line")
    boundary = body[2:first_end]
    if not _BOUNDARY.fullmatch(boundary):
        raise malformed("its first line is not a boundary RFC 2046 allows")
    delimiter = b"\r\n--" + boundary
    fields: dict[str, Part] = {}
    at = first_end + 2
    while True:
        end = body.find(delimiter, at)
        if end < 0:
            raise malformed("it has no closing boundary")
        name, part = _part(body, at, end)
        if name in fields:
            raise malformed(f"it has the field {name[:100]!r} twice")
        fields[name] = part
        after = end + len(delimiter)
        if body.startswith(b"--", after):
            return fields  # the closing delimiter: what follows is an epilogue, ignored
        if not body.startswith(b"\r\n", after):
            raise malformed("a boundary line has more after it")
        if len(fields) >= MAX_PARTS:
            raise malformed(f"it has more than {MAX_PARTS} fields")
        at = after + 2


def _part(body: bytes, start: int, end: int) -> tuple[str, Part]:
    """The part between `start` and the delimiter at `end`: its name and value."""
    head_end = body.find(b"\r\n\r\n", start, min(end, start + MAX_PART_HEAD_BYTES) + 4)
    if head_end < 0:
        raise malformed(f"a part's head is longer than {MAX_PART_HEAD_BYTES // 1024} KiB or has no end")
    disposition = None
    for line in body[start:head_end].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-disposition":
            disposition = value.strip().decode("utf-8", errors="replace")
    if disposition is None or not disposition.lower().startswith("form-data"):
        raise malformed("a part has no Content-Disposition: form-data header")
    if len(disposition) > MAX_DISPOSITION:
        raise malformed(f"a part's Content-Disposition is longer than {MAX_DISPOSITION} characters")
    parameters = _parameters(disposition[len("form-data") :])
    if "name" not in parameters:
        raise malformed("a part's Content-Disposition names no field")
    return parameters["name"], Part(body[head_end + 4 : end], parameters.get("filename"))


def _parameters(text: str) -> dict[str, str]:
    """`; name="value"; other=token` read in one pass (no backtracking: the text is a client's)."""
    found: dict[str, str] = {}
    at, size = 0, len(text)
    while True:
        at = _skip_spaces(text, at)
        if at == size:
            return found
        if text[at] != ";":
            raise malformed("a part's Content-Disposition has something other than parameters after form-data")
        at = _skip_spaces(text, at + 1)
        start = at
        while at < size and text[at] in _NAME:
            at += 1
        key = text[start:at].lower()
        at = _skip_spaces(text, at)
        if not key or at == size or text[at] != "=":
            raise malformed("a part's Content-Disposition has a parameter without a name and a value")
        at = _skip_spaces(text, at + 1)
        if at < size and text[at] == '"':
            value, at = _quoted(text, at + 1)
        else:
            start = at
            while at < size and text[at] not in "; \t":
                at += 1
            value = text[start:at]
        found[key] = value


def _quoted(text: str, at: int) -> tuple[str, int]:
    """A quoted string's value from just after its opening quote, and where it ends."""
    value = []
    while at < len(text):
        char = text[at]
        if char == "\\" and at + 1 < len(text):
            value.append(text[at + 1])
            at += 2
        elif char == '"':
            return "".join(value), at + 1
        else:
            value.append(char)
            at += 1
    raise malformed("a part's Content-Disposition has a quoted value without its closing quote")


def _skip_spaces(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t":
        at += 1
    return at
