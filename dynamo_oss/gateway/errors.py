"""Errors as the OpenAI API writes them: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from http import HTTPStatus

from pydantic import BaseModel

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
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    error = ErrorObject(message=message, type=error_type(status), param=param, code=code)
    return {"error": error.model_dump()}


def from_upstream(status: int, body: object) -> dict:
    """Dynamo's `{"message", "type", "code"}` (or anything else) rewritten as an OpenAI error."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body  # already OpenAI-shaped
    message = body.get("message") if isinstance(body, dict) else None
    return openai_error(status, message or HTTPStatus(status).phrase)
