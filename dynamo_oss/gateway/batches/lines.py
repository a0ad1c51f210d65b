"""A batch file's lines as requests, and their answers as the lines of the output and error files.

Each input line is `{"custom_id", "method": "POST", "url", "body"}` (OpenAI's batch input format), to the
batch's endpoint (a Responses line is stored only if it says `store: true`: its answer is in the batch's
files). A line that is not one (not JSON, another endpoint, a custom_id seen before, a body that asks to
stream) is not sent: its error goes to the error file, and the batch's other lines are served. Every
answer line is `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`: an answer of
200 goes to the output file, any other to the error file, with `response: null` and an `error` for a line that
was never sent.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dynamo_oss.gateway.batches.records import TokenUsage
from dynamo_oss.gateway.batches.store import Answer
from dynamo_oss.gateway.ids import new_id

UNSENDABLE = "invalid_request"  # the error code of a line the gateway did not send


class LineRequest(BaseModel):
    """One line of a batch input file."""

    model_config = ConfigDict(extra="forbid")

    custom_id: str = Field(min_length=1, max_length=512)
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


class Line(BaseModel):
    """A line read: its place in the file, and the request it holds (None: the error says why it is not one)."""

    number: int
    custom_id: str | None
    body: bytes | None = None
    error: str | None = None


def read_lines(data: bytes, endpoint: str) -> list[Line]:
    """The file's non-blank lines, numbered from 0 in the order they come, each a request to `endpoint` or why not."""
    lines: list[Line] = []
    seen: set[str] = set()
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        lines.append(_line(len(lines), raw, endpoint, seen))
    return lines


def _line(number: int, raw: bytes, endpoint: str, seen: set[str]) -> Line:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        return Line(number=number, custom_id=None, error=f"Line {number + 1} is not JSON ({error}).")
    custom_id = parsed.get("custom_id") if isinstance(parsed, dict) else None
    custom_id = custom_id if isinstance(custom_id, str) else None
    try:
        request = LineRequest.model_validate(parsed)
    except ValidationError as error:
        where = ".".join(str(part) for part in error.errors()[0]["loc"]) or "the line"
        return Line(
            number=number,
            custom_id=custom_id,
            error=f"Line {number + 1}: invalid '{where}': {error.errors()[0]['msg']}. A batch line is "
            '{"custom_id": ..., "method": "POST", "url": ..., "body": {...}}.',
        )
    if request.url != endpoint:
        return Line(
            number=number,
            custom_id=custom_id,
            error=f"Line {number + 1}: its url is {request.url[:200]!r}, but this batch's endpoint is {endpoint!r}; "
            "every line of a batch goes to the batch's endpoint.",
        )
    if request.custom_id in seen:
        return Line(
            number=number,
            custom_id=custom_id,
            error=f"Line {number + 1}: custom_id {request.custom_id!r} is used by an earlier line; each line's "
            "custom_id must be unique in its batch.",
        )
    seen.add(request.custom_id)
    for field in ("stream", "background"):
        if request.body.get(field):
            return Line(
                number=number,
                custom_id=custom_id,
                error=f"Line {number + 1}: invalid 'body.{field}': a batch request is answered whole, by the batch; "
                f"leave out '{field}'.",
            )
    if endpoint == "/v1/responses":  # a batch's answers are in its files: kept as responses only if asked
        request.body.setdefault("store", False)
    return Line(number=number, custom_id=custom_id, body=orjson.dumps(request.body))


def answered_line(line: Line, status: int, body: dict[str, Any], usage: TokenUsage) -> Answer:
    """A sent line's answer (`status` and the body the endpoint answered with, and what it used)."""
    data = {
        "id": new_id("batch_req"),
        "custom_id": line.custom_id,
        "response": {"status_code": status, "request_id": new_id("req"), "body": body},
        "error": None,
    }
    return Answer(line.number, status != 200, orjson.dumps(data), usage)


def unsent_line(line: Line, code: str, message: str) -> Answer:
    """A line never sent: not a request (`UNSENDABLE`), or not reached before the batch ended."""
    data = {
        "id": new_id("batch_req"),
        "custom_id": line.custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
    return Answer(line.number, True, orjson.dumps(data))


def too_large(answer: Answer, message: str) -> Answer:
    """`answer` replaced by its error, keeping its line's custom_id and the status it was answered with."""
    sent = orjson.loads(answer.data)
    status = (sent.get("response") or {}).get("status_code")
    data = {
        "id": sent["id"],
        "custom_id": sent["custom_id"],
        "response": None,
        "error": {"code": "answer_too_large", "message": f"{message} (answered {status})"},
    }
    return Answer(answer.line, True, orjson.dumps(data), answer.usage)
