"""Errors as the OpenAI API writes them: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import json
from http import HTTPStatus

from pydantic import BaseModel, ValidationError

RETRY_AFTER_S = 1  # what a retryable refusal tells the client to wait: restarts and bursts pass in seconds


class ApiError(Exception):
    """A request the gateway refuses, with the field (`param`) it refuses it for; a retryable refusal
    (the graph is at capacity, or has no worker right now) says when to try again."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after  # seconds: the request may succeed if sent again then
        self.headers: list[tuple[bytes, bytes]] = []  # sent with the error (a rate limit's x-ratelimit-*)

    def body(self) -> dict:
        return openai_error(self.status, self.message, self.param, self.code)


class ErrorObject(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


def error_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    error = ErrorObject(message=message, type=error_type(status), param=param, code=code)
    return {"error": error.model_dump()}


def stream_cut() -> dict:
    """The error of a stream whose frontend went away: retryable, in OpenAI's shape."""
    return openai_error(503, "Dynamo's frontend stopped mid-stream; retry the request.", code="frontend_unavailable")


def stream_cut_event() -> bytes:
    """The server-sent event that ends a stream whose frontend went away."""
    return b"data: " + json.dumps(stream_cut()).encode() + b"\n\n"


def from_upstream(status: int, body: object) -> dict:
    """Dynamo's `{"message", "type", "code"}` (or anything else) rewritten as an OpenAI error."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body  # already OpenAI-shaped
    message = body.get("message") if isinstance(body, dict) else None
    return openai_error(status, message or HTTPStatus(status).phrase)


def from_validation(err: ValidationError, body: object) -> ApiError:
    """A typed model's first complaint about a request, as OpenAI words it: the field's path in the
    body as the client wrote it (`input[3].call_id`), and what was expected there."""
    # The deepest complaint: for a field that may be a string or a list, the list's item at fault.
    problem = max(err.errors(), key=lambda e: len(e["loc"]))
    param = _field_path(body, problem["loc"])
    if problem["type"] == "union_tag_invalid":
        context = problem.get("ctx") or {}
        return ApiError(
            400,
            f"Invalid '{param}.type': {context.get('tag')!r}. Expected one of: {context.get('expected_tags')}.",
            param=f"{param}.type",
            code="invalid_type",
        )
    return ApiError(400, f"Invalid '{param}': {problem['msg']}.", param=param, code="invalid_value")


def _field_path(body: object, loc: tuple) -> str:
    """The field's path as OpenAI writes it: `input[3].call_id`."""
    path = ""
    for segment in field_segments(body, loc):
        path = f"{path}[{segment}]" if isinstance(segment, int) else f"{path}.{segment}" if path else segment
    return path or "body"


def field_segments(body: object, loc: tuple) -> list[str | int]:
    """pydantic's location with the union members it tried (tags, type names) left out: only the
    keys and indexes that exist in the body, and a missing field's name at the end."""
    segments: list[str | int] = []
    value = body
    for position, segment in enumerate(loc):
        if isinstance(segment, int) and isinstance(value, list) and segment < len(value):
            segments.append(segment)
            value = value[segment]
        elif isinstance(segment, str) and isinstance(value, dict) and (segment in value or position == len(loc) - 1):
            segments.append(segment)
            value = value.get(segment)
    return segments
