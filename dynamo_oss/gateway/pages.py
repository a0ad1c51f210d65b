"""A page of a list as OpenAI's API answers one (`object: list`, `data`, `first_id`, `last_id`, `has_more`),
read from the request's `order`, `after` and `limit`: input items, files and batches alike."""

from __future__ import annotations

from typing import Any

from dynamo_oss.gateway.errors import ApiError


def page(
    items: list[dict[str, Any]], query: dict[str, list[str]], noun: str, default_limit: int, max_limit: int
) -> dict[str, Any]:
    """The page of `items` (oldest first, each with an `id`) the query asks for: `order` (desc by default),
    `after` an id, `limit` from 1 to `max_limit`; a 400 naming the parameter that is off (`noun` names an item)."""
    order = query.get("order", ["desc"])[0]
    if order not in ("asc", "desc"):
        raise ApiError(400, f"Invalid 'order': {order!r}. Expected 'asc' or 'desc'.", param="order")
    try:
        limit = int(query.get("limit", [str(default_limit)])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= max_limit:
        raise ApiError(400, f"Invalid 'limit': expected an integer from 1 to {max_limit}.", param="limit")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after", [None])[0]
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise ApiError(400, f"Invalid 'after': no {noun} has id '{after}'.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }
