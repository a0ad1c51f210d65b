"""`item_reference` input items: an earlier response's items sent back by id, as OpenAI's clients do with
`store` on. Each is resolved from the store for the key that made it and rendered as if sent whole;
another key's, an expired, a deleted or an unknown item is a 404 that reaches no worker. Served
through the session's keyed mocker graph (its NATS store), and the resolution checked without one."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import orjson
import pytest

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.ids import ItemIds, response_of
from dynamo_oss.gateway.protocol.responses import ItemReference, ResponsesRequest
from dynamo_oss.gateway.responses.references import resolved
from dynamo_oss.gateway.responses.store import MemoryResponseStore, StoredResponse, Versioned
from tests.support.keyed import MODEL, RESPONSES_WEATHER, nats_url, openai_client, put_record
from tests.support.graphs import KEYS, RETENTION_S
from tests.support.served import ServedGraph


@pytest.fixture
def served(keyed_graph: ServedGraph) -> ServedGraph:
    return keyed_graph


def test_a_tool_loop_by_item_references_is_served_as_if_the_items_were_sent_whole(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    ask = {"role": "user", "content": "Use get_weather for Paris."}
    first = alice.responses.create(model=MODEL, input=[ask], tools=[RESPONSES_WEATHER])
    call = first.output[-1]
    assert call.type == "function_call" and all(response_of(item.id) == first.id for item in first.output)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    whole = [ask, *(item.model_dump(mode="json", exclude_none=True) for item in first.output), output]
    by_reference = [ask, *({"type": "item_reference", "id": item.id} for item in first.output), output]
    sent_whole = alice.responses.create(model=MODEL, input=whole, tools=[RESPONSES_WEATHER], store=False)
    referenced = alice.responses.create(model=MODEL, input=by_reference, tools=[RESPONSES_WEATHER])
    assert referenced.output[-1].type == "message"
    assert referenced.usage.input_tokens == sent_whole.usage.input_tokens  # the same prompt, token for token
    assert referenced.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2
    listed = alice.responses.input_items.list(referenced.id, order="asc")
    assert [item.id for item in listed.data[1:-1]] == [item.id for item in first.output]  # the items, not references
    assert [item.type for item in listed.data] == ["message", *(item.type for item in first.output), output["type"]]
    # A reference without its type, as OpenAI's API allows, and streamed.
    untyped = [ask, *({"id": item.id} for item in first.output), output]
    with httpx.stream(
        "POST",
        f"{served.endpoint}/responses",
        timeout=60,
        headers={"Authorization": f"Bearer {KEYS['alice']}"},
        json={"model": MODEL, "input": untyped, "tools": [RESPONSES_WEATHER], "stream": True},
    ) as reply:
        assert reply.status_code == 200
        last = [line for line in reply.iter_lines() if line.startswith("data: ")][-1]
    assert '"type":"response.completed"' in last and f'"input_tokens":{sent_whole.usage.input_tokens},' in last


def test_references_to_items_a_key_may_not_see_are_404s_that_reach_no_worker(served: ServedGraph) -> None:
    alice, bob = openai_client(served, "alice"), openai_client(served, "bob")
    owned = alice.responses.create(model=MODEL, input="Say hello.")
    deleted = alice.responses.create(model=MODEL, input="Say goodbye.")
    alice.responses.delete(deleted.id)
    ids = ItemIds(f"resp_{'e' * 32}")
    stale = StoredResponse(
        id=ids.response_id,
        owner="alice",
        created_at=time.time() - RETENTION_S - 60,
        input=[{"type": "message", "role": "user", "content": "Hi.", "id": ids.next("msg")}],
        response={**owned.model_dump(mode="json"), "id": ids.response_id},
    )
    asyncio.run(put_record(nats_url(served), stale))
    before = served.frontend_requests()
    for who, item_id in (
        (bob, owned.output[-1].id),  # alice's
        (alice, stale.input[0]["id"]),  # past the retention
        (alice, deleted.output[-1].id),
        (alice, f"msg_{'0' * 32}_0"),  # never stored
        (alice, "msg_made_up"),  # no id this gateway makes
        (alice, f"{owned.output[-1].id[:-1]}9"),  # a response that has no such item
    ):
        reference = [{"type": "item_reference", "id": item_id}, {"role": "user", "content": "Go on."}]
        with pytest.raises(openai.NotFoundError) as error:
            who.responses.create(model=MODEL, input=reference)
        body = error.value.body
        assert body["param"] == "input[0].id" and body["code"] == "item_not_found", body  # type: ignore[index]
        assert item_id in body["message"], body  # type: ignore[index]
    assert served.frontend_requests() == before


def test_references_resolve_to_the_stored_items_reading_each_response_once() -> None:
    ids = ItemIds(f"resp_{'a' * 32}")
    asked = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hi."}],
        "id": ids.next("msg"),
    }
    thought = {
        "type": "reasoning",
        "id": ids.next("rs"),
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Greet."}],
    }
    answer = {
        "type": "message",
        "role": "assistant",
        "id": ids.next("msg"),
        "content": [{"type": "output_text", "text": "Hello."}],
    }
    sealed = {**thought, "encrypted_content": "sealed"}
    record = StoredResponse(
        id=ids.response_id, owner="alice", created_at=time.time(), input=[asked], response={"output": [sealed, answer]}
    )
    store = CountingStore(RETENTION_S)
    asyncio.run(store.put(record))
    refs = [ItemReference(id=item["id"]) for item in (asked, thought, answer)]
    request = ResponsesRequest(model=MODEL, input=[*refs, {"role": "user", "content": "Again."}])
    items, referenced = asyncio.run(resolved(request, store, "alice", 2**20))
    assert items[:3] == [asked, thought, answer]  # the reasoning's text, not its sealed copy
    assert items[3] == {"type": "message", "role": "user", "content": "Again."}
    assert store.reads == 1 and referenced == sum(len(orjson.dumps(item)) for item in items[:3])
    with pytest.raises(ApiError) as error:
        asyncio.run(resolved(request, None, "alice", 2**20))
    assert error.value.status == 400 and "gateway.responses.store" in error.value.message


def test_references_that_name_more_than_a_body_may_hold_are_refused() -> None:
    """A few bytes of references may name megabytes of stored items: no more than a body may hold."""
    ids = ItemIds(f"resp_{'b' * 32}")
    big = {"type": "message", "role": "user", "content": "x" * 10_000, "id": ids.next("msg")}
    store = CountingStore(RETENTION_S)
    record = StoredResponse(id=ids.response_id, owner="alice", created_at=time.time(), input=[big], response={})
    asyncio.run(store.put(record))
    request = ResponsesRequest(model=MODEL, input=[ItemReference(id=big["id"])] * 20)
    with pytest.raises(ApiError) as error:
        asyncio.run(resolved(request, store, "alice", 100_000))
    assert error.value.status == 413 and error.value.param == "input" and "input[9]" in error.value.message
    assert len(asyncio.run(resolved(request, store, "alice", 1_000_000))[0]) == 20


class CountingStore(MemoryResponseStore):
    def __init__(self, retention_s: float) -> None:
        super().__init__(retention_s)
        self.reads = 0

    async def read(self, response_id: str) -> Versioned | None:
        self.reads += 1
        return await super().read(response_id)
