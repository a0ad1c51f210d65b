"""Errors as Anthropic's API writes them: `{"type": "error", "error": {"type", "message"}}`.

The gateway's checks and the shell raise and write OpenAI's shape; every answer on /v1/messages is
rewritten here, so the `anthropic` SDK raises its own typed errors (BadRequestError, NotFoundError,
AuthenticationError, ...). Anthropic names a field in the message as a dotted path
(`messages.0.content.1.type: ...`), not in a field of its own.
"""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from dynamo_oss.gateway.errors import ApiError, field_segments

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str) -> dict:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def from_openai(status: int, body: dict) -> dict:
    """An error the gateway wrote in OpenAI's shape (or any JSON object), in Anthropic's."""
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return anthropic_error(status, message if isinstance(message, str) else "The request failed.")


def stream_error_event(message: str) -> bytes:
    """The event that ends a stream the gateway cannot finish: the SDK raises it as an API error."""
    return b"event: error\ndata: " + orjson.dumps(anthropic_error(500, message)) + b"\n\n"


def invalid_request(err: ValidationError, body: object) -> ApiError:
    """pydantic's first complaint, worded as Anthropic words it: `path.to.field: what was wrong`."""
    problem = max(err.errors(), key=lambda e: len(e["loc"]))  # the deepest: the union member at fault
    path = dotted(field_segments(body, problem["loc"]))
    return ApiError(400, f"{path}: {problem['msg']}", param=path)


def dotted(segments: list[str | int]) -> str:
    return ".".join(str(segment) for segment in segments) or "body"
