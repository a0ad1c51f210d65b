"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items, and for background responses
GET /v1/responses/{id}?stream=true&starting_after=N and POST /v1/responses/{id}/cancel (following.py):
answered by the gateway from the graph's response store, never passed to Dynamo's frontend (which
keeps no responses).

A response is found only for the API key that created it: any other key, and a response past the
graph's retention, get the same 404 as one never stored, so no key learns what another stored.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.pages import page
from dynamo_oss.gateway.responses.background import BackgroundResponses
from dynamo_oss.gateway.responses.following import cancel, current, follow
from dynamo_oss.gateway.routes import Checks, EventStreamAnswer, LocalAnswer
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.gateway.responses.store import RESPONSE_ID_PATTERN, ResponseStore, StoredResponse, Versioned
from dynamo_oss.gateway.stores import StoreUnavailable, unavailable

PREFIX = b"/v1/responses/"
METHODS = frozenset({b"GET", b"DELETE", b"POST"})  # what the paths under PREFIX take
_PATH = re.compile(r"^/v1/responses/([^/]+)(/input_items|/cancel)?/?$")
_TAKES = {None: (b"GET", b"DELETE"), "/input_items": (b"GET",), "/cancel": (b"POST",)}
_ID = re.compile(RESPONSE_ID_PATTERN)
MAX_PAGE = 100  # OpenAI's largest `limit` for input items
DEFAULT_PAGE = 20


async def find(store: ResponseStore, response_id: str, key: str | None, param: str | None) -> StoredResponse:
    """The response `key` stored under `response_id`, or a 404 naming it (`param`: the request field
    that named it, None for a path)."""
    return (await found(store, response_id, key, param)).record


async def found(store: ResponseStore, response_id: str, key: str | None, param: str | None) -> Versioned:
    """As `find`, with the record's revision."""
    versioned = None
    if _ID.fullmatch(response_id):
        try:
            versioned = await store.read(response_id)
        except StoreUnavailable as error:
            raise unavailable("response store", error) from None
    record = versioned.record if versioned is not None else None
    if record is not None and record.owner == key and record.expired(store.retention_s):
        raise ApiError(
            404,
            f"Response '{response_id}' is past this graph's retention of {store.retention_s:g} s "
            "and is no longer stored.",
            param=param,
            code="response_expired",
        )
    if record is None or record.owner != key:
        raise ApiError(
            404,
            f"No response with id '{response_id}' is stored for this API key: it was never "
            f"stored (store: false), was deleted, or is past this graph's retention of "
            f"{store.retention_s:g} s.",
            param=param,
            code="response_not_found",
        )
    assert versioned is not None
    return versioned


class StoredResponsesRoute:
    """Stored responses by id: the Response object (or a background one's events), its input items, its
    deletion, or a background one's cancellation."""

    api = None

    def __init__(self, store: ResponseStore | None, background: BackgroundResponses | None = None) -> None:
        self.store = store
        self.background = background  # None: this gateway runs no background responses (nor brings them up to date)

    async def answer(self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller) -> LocalAnswer:
        key = caller.key
        path, _, query = url.decode(errors="replace").partition("?")
        match = _PATH.match(path)
        if match is None or method not in _TAKES[match.group(2)]:
            raise ApiError(
                404 if match is None else 405,
                f"{method.decode(errors='replace')} {path} is not an endpoint of this server.",
                code="unknown_url",
            )
        if self.store is None:
            raise ApiError(
                404, "This graph keeps no responses (gateway.responses.store is false).", code="response_not_found"
            )
        response_id = match.group(1)
        versioned = await found(self.store, response_id, key, None)
        record = versioned.record
        try:
            if match.group(2) == "/cancel":
                if self.background is None:  # none of its responses is a background one
                    raise ApiError(400, "Cannot cancel a synchronous response: this gateway runs no background ones.")
                return 200, await cancel(self.background, versioned)
            if match.group(2):
                return 200, page(record.input, parse_qs(query), "input item of this response", DEFAULT_PAGE, MAX_PAGE)
            if method == b"GET":
                return await self._read(versioned, parse_qs(query))
        except StoreUnavailable as error:
            raise unavailable("response store", error) from None
        try:
            await self.store.delete(response_id)
        except StoreUnavailable as error:
            raise unavailable("response store", error) from None
        return 200, {"id": response_id, "object": "response", "deleted": True}

    async def _read(self, versioned: Versioned, query: dict[str, list[str]]) -> LocalAnswer:
        """GET: the Response object as it stands, or with `stream=true` a background response's events."""
        record = versioned.record
        if query.get("stream", ["false"])[0].lower() != "true":
            if self.background is not None:
                record = await current(self.background, versioned)
            return 200, record.response
        if self.background is None or record.background is None or not record.background.events:
            raise ApiError(
                400,
                f"Invalid 'stream': response '{record.id}' cannot be streamed again; only background responses "
                "created with stream=true can be.",
                param="stream",
            )
        try:
            after = int(query.get("starting_after", ["-1"])[0])
        except ValueError:
            raise ApiError(400, "Invalid 'starting_after': expected an integer.", param="starting_after") from None
        return EventStreamAnswer(follow(self.background, versioned, after))
