"""`item_reference` input items, resolved: each becomes the item it names, as the response that made it
stored it, before the request is rendered.

OpenAI's clients send an earlier response's items back by id when `store` is on (the Vercel AI SDK does
for reasoning, function calls and messages), so the prompt is the one the client would have sent
whole, and the KV router finds the earlier turn's prefix as for `previous_response_id`. An item's id
names its response (ids.py), so one read of the store finds it on any gateway of the graph. An item
is found only for the API key whose response holds it: another key's, a deleted or an expired one
gets the same 404 as one never stored.
"""

from __future__ import annotations

from typing import Any

import orjson

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.ids import response_of
from dynamo_oss.gateway.protocol.responses import ItemReference, ResponsesRequest
from dynamo_oss.gateway.responses.store import ResponseStore, StoredResponse
from dynamo_oss.gateway.responses.stored import find


def references(request: ResponsesRequest) -> bool:
    return not isinstance(request.input, str) and any(isinstance(item, ItemReference) for item in request.input)


async def resolved(
    request: ResponsesRequest, store: ResponseStore | None, key: str | None, max_bytes: int
) -> tuple[list[dict[str, Any]], int]:
    """The request's input items as dicts, each `item_reference` replaced by the stored item it names, and
    the bytes the referenced items come to. A few bytes of references may name megabytes of items: past
    `max_bytes` (what the endpoint takes in a body) they are refused, as the same items sent whole would be."""
    assert not isinstance(request.input, str)
    if store is None:
        raise ApiError(
            400,
            "Invalid 'input': an item_reference names a stored item, and this graph keeps no responses "
            "(gateway.responses.store is false); send the item itself.",
            param="input",
            code="unsupported_parameter",
        )
    records: dict[str, StoredResponse] = {}  # one read per response, however many of its items are named
    items, referenced = [], 0
    for index, item in enumerate(request.input):
        if isinstance(item, ItemReference):
            found = await _stored_item(item.id, f"input[{index}].id", store, key, records)
            referenced += len(orjson.dumps(found))
            if referenced > max_bytes:
                raise ApiError(
                    413,
                    f"Invalid 'input': the items referenced up to input[{index}] come to more than "
                    f"{max_bytes // 2**20} MiB, what this endpoint takes in a request's body; send fewer.",
                    param="input",
                    code="request_too_large",
                )
            items.append(found)
        else:
            items.append(item.model_dump(mode="json", exclude_none=True))
    return items, referenced


async def _stored_item(
    item_id: str, param: str, store: ResponseStore, key: str | None, records: dict[str, StoredResponse]
) -> dict[str, Any]:
    response_id = response_of(item_id)
    record = records.get(response_id) if response_id else None
    if response_id is not None and record is None:
        try:
            record = records[response_id] = await find(store, response_id, key, param)
        except ApiError as error:
            if error.status != 404:
                raise
    found = next((item for item in record.conversation() if item.get("id") == item_id), None) if record else None
    if found is None:
        raise ApiError(
            404,
            f"No item with id '{item_id}' is stored for this API key: its response was never stored "
            f"(store: false), was deleted, or is past this graph's retention of {store.retention_s:g} s; send the "
            "item itself instead.",
            param=param,
            code="item_not_found",
        )
    return found
