"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: answered by the gateway
from the graph's response store, never passed to Dynamo's frontend (which keeps no responses).

A response is found only for the API key that created it: any other key, and a response past the
graph's retention, get the same 404 as one never stored, so no key learns what another stored.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from dynamo_oss.gateway.errors import RETRY_AFTER_S, ApiError
from dynamo_oss.gateway.routes import Checks
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.gateway.responses.store import RESPONSE_ID_PATTERN, ResponseStore, StoredResponse, StoreUnavailable

PREFIX = b"/v1/responses/"
METHODS = frozenset({b"GET", b"DELETE"})  # what the paths under PREFIX take
_PATH = re.compile(r"^/v1/responses/([^/]+)(/input_items)?/?$")
_ID = re.compile(RESPONSE_ID_PATTERN)
MAX_PAGE = 100  # OpenAI's largest `limit` for input items
DEFAULT_PAGE = 20


def unavailable(error: StoreUnavailable) -> ApiError:
    return ApiError(
        503,
        f"The response store is unavailable ({error}); retry shortly.",
        code="store_unavailable",
        retry_after=RETRY_AFTER_S,
    )


async def find(store: ResponseStore, response_id: str, key: str | None, param: str | None) -> StoredResponse:
    """The response `key` stored under `response_id`, or a 404 naming it (`param`: the request field
    that named it, None for a path)."""
    record = None
    if _ID.fullmatch(response_id):
        try:
            record = await store.get(response_id)
        except StoreUnavailable as error:
            raise unavailable(error) from None
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
    return record


class StoredResponsesRoute:
    """Stored responses by id: the Response object, its input items, or its deletion."""

    api = None

    def __init__(self, store: ResponseStore | None) -> None:
        self.store = store

    async def answer(
        self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller
    ) -> tuple[int, dict[str, Any]]:
        key = caller.key
        path, _, query = url.decode(errors="replace").partition("?")
        match = _PATH.match(path)
        if match is None or method not in (b"GET", b"DELETE") or (match.group(2) and method != b"GET"):
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
        record = await find(self.store, response_id, key, None)
        if match.group(2):
            return 200, _page(record.input, parse_qs(query))
        if method == b"GET":
            return 200, record.response
        try:
            await self.store.delete(response_id)
        except StoreUnavailable as error:
            raise unavailable(error) from None
        return 200, {"id": response_id, "object": "response", "deleted": True}


def _page(items: list[dict[str, Any]], query: dict[str, list[str]]) -> dict[str, Any]:
    """OpenAI's list of input items: `order` (desc by default), `after` an item id, `limit` 1-100."""
    order = query.get("order", ["desc"])[0]
    if order not in ("asc", "desc"):
        raise ApiError(400, f"Invalid 'order': {order!r}. Expected 'asc' or 'desc'.", param="order")
    try:
        limit = int(query.get("limit", [str(DEFAULT_PAGE)])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(400, f"Invalid 'limit': expected an integer from 1 to {MAX_PAGE}.", param="limit")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after", [None])[0]
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise ApiError(400, f"Invalid 'after': no input item of this response has id '{after}'.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }
