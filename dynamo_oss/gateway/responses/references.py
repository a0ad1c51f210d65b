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

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.ids import response_of
from dynamo_oss.gateway.protocol.responses import ItemReference, ResponsesRequest
from dynamo_oss.gateway.responses.store import ResponseStore, StoredResponse
from dynamo_oss.gateway.responses.stored import find


def references(request: ResponsesRequest) -> bool:
    return not isinstance(request.input, str) and any(isinstance(item, ItemReference) for item in request.input)


async def resolved(request: ResponsesRequest, store: ResponseStore | None, key: str | None) -> list[dict[str, Any]]:
    """The request's input items as dicts, each `item_reference` replaced by the stored item it names."""
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
    items = []
    for index, item in enumerate(request.input):
        if isinstance(item, ItemReference):
            items.append(await _stored_item(item.id, f"input[{index}].id", store, key, records))
        else:
            items.append(item.model_dump(mode="json", exclude_none=True))
    return items


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
            f"(store: false), was deleted, or is past this graph's retention of {store.retention_s:g} s.",
            param=param,
            code="item_not_found",
        )
    return found
