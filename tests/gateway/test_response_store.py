"""Stored responses: `store`, `previous_response_id`, GET and DELETE /v1/responses/{id} and its input
items, per-key ownership and retention, against the session's keyed mocker graph, whose gateway
keeps them in the graph's NATS; and a continuation served by a second gateway process and by the
first one after it was killed and restarted. The prompt a continuation renders is checked without
a graph: it begins with the previous turn's prompt, so the KV router finds it cached."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from dynamo_oss.gateway.config import GatewayConfig, NatsConnection
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.harmony.rendering import encoding
from dynamo_oss.gateway.nats_connection import GraphNats
from dynamo_oss.gateway.responses.nats_store import NatsResponseStore
from dynamo_oss.gateway.responses.route import ITEMS, input_items
from dynamo_oss.gateway.responses.store import StoredResponse
from dynamo_oss.gateway.responses.stream import ResponseBuilder
from tests.support.harmony import harmony_ids, render_request, sealed_with
from tests.support.graphs import KEYS, RETENTION_S
from tests.support.keyed import MODEL, RESPONSES_WEATHER, nats_url, openai_client, put_record
from tests.support.ports import free_ports
from tests.support.served import ServedGraph
from tests.support.waiting import alive, wait_for

ITEM = TypeAdapter(ResponseItem)


@pytest.fixture
def served(keyed_graph: ServedGraph) -> ServedGraph:
    """The session's keyed graph: alice and bob are two tenants of it."""
    return keyed_graph


def test_a_stored_response_is_read_listed_and_deleted_by_its_own_key_only(served: ServedGraph) -> None:
    alice, bob = openai_client(served, "alice"), openai_client(served, "bob")
    ask = [{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": "Say hello."}]
    created = alice.responses.create(model=MODEL, input=ask)
    assert created.store is True and created.previous_response_id is None
    read = alice.responses.retrieve(created.id)
    raw = httpx.get(f"{served.endpoint}/responses/{created.id}", headers={"Authorization": f"Bearer {KEYS['alice']}"})
    assert read == created and Response.model_validate(raw.json()).model_dump(exclude_unset=True) == raw.json()
    items = alice.responses.input_items.list(created.id)
    assert [item.role for item in items.data] == ["user", "developer"]  # newest first, as OpenAI lists them
    assert all(item.id.startswith("msg_") and item.content[0].type == "input_text" for item in items.data)
    assert [item.id for item in alice.responses.input_items.list(created.id, order="asc")] == [
        item.id for item in reversed(items.data)
    ]
    for raw_item in httpx.get(
        f"{served.endpoint}/responses/{created.id}/input_items", headers={"Authorization": f"Bearer {KEYS['alice']}"}
    ).json()["data"]:
        assert ITEM.validate_python(raw_item).model_dump(exclude_unset=True) == raw_item
    for refused in (
        lambda: bob.responses.retrieve(created.id),
        lambda: bob.responses.delete(created.id),
        lambda: bob.responses.input_items.list(created.id),
    ):
        with pytest.raises(openai.NotFoundError) as error:
            refused()
        assert created.id in error.value.message
    unstored = alice.responses.create(model=MODEL, input="Say hello.", store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(unstored.id)
    alice.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_continuations_carry_the_conversation_and_its_tool_calls_and_find_its_prefix_cached(
    served: ServedGraph,
) -> None:
    alice = openai_client(served, "alice")
    first = alice.responses.create(model=MODEL, input="Use get_weather for Paris.", tools=[RESPONSES_WEATHER])
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    # The call is in the stored conversation: its output alone is a valid input, which it would not be without it.
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    second = alice.responses.create(
        model=MODEL, input=[output], tools=[RESPONSES_WEATHER], previous_response_id=first.id
    )
    assert second.previous_response_id == first.id and second.output[-1].type == "message"
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens - 2
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2
    with httpx.stream(
        "POST",
        f"{served.endpoint}/responses",
        timeout=60,
        headers={"Authorization": f"Bearer {KEYS['alice']}"},
        json={
            "model": MODEL,
            "input": "And tomorrow?",
            "tools": [RESPONSES_WEATHER],
            "stream": True,
            "previous_response_id": second.id,
        },
    ) as reply:
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["previous_response_id"] == second.id
    assert final["store"] is True and alice.responses.retrieve(final["id"]).output[-1].id == final["output"][-1]["id"]
    third = alice.responses.input_items.list(final["id"])
    assert [item.type for item in third.data] == ["message"]  # its own input only, as OpenAI lists it


def test_bad_previous_response_ids_are_404s_that_name_them_and_reach_no_worker(served: ServedGraph) -> None:
    alice, bob = openai_client(served, "alice"), openai_client(served, "bob")
    owned = alice.responses.create(model=MODEL, input="Say hello.")
    expired = f"resp_{'e' * 32}"
    stale = StoredResponse(
        id=expired,
        owner="alice",
        created_at=time.time() - RETENTION_S - 60,
        input=[],
        response={**owned.model_dump(mode="json"), "id": expired},
    )
    asyncio.run(put_record(nats_url(served), stale))
    before = served.frontend_requests()
    for who, response_id, code in (
        (alice, "resp_unknown", "response_not_found"),
        (alice, "not-an-id", None),
        (bob, owned.id, "response_not_found"),
        (alice, expired, "response_expired"),
    ):
        with pytest.raises(openai.NotFoundError) as error:
            who.responses.create(model=MODEL, input="Go on.", previous_response_id=response_id)
        body = error.value.body
        assert body["param"] == "previous_response_id" and response_id in body["message"], body  # type: ignore[index]
        assert code is None or body["code"] == code, body  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as error:
        alice.responses.retrieve(expired)
    assert f"past this graph's retention of {RETENTION_S} s" in error.value.message
    assert served.frontend_requests() == before


def test_nats_drops_a_response_past_the_bucket_s_retention(served: ServedGraph) -> None:
    """The age limit is NATS's own (the bucket's max_age), not only the gateway's check."""

    async def kept_until_dropped() -> float:
        nats = GraphNats(NatsConnection(url=nats_url(served)))
        store = NatsResponseStore("responses-retention-test", 1, 2**20, nats)
        try:
            await store.put(StoredResponse(id="resp_short", owner=None, created_at=time.time(), input=[], response={}))
            assert await store.get("resp_short") is not None
            started = time.monotonic()
            while await store.get("resp_short") is not None:
                assert time.monotonic() - started < 10, "NATS kept a response past its bucket's max_age"
                await asyncio.sleep(0.1)
            return time.monotonic() - started
        finally:
            await nats.close()

    assert asyncio.run(kept_until_dropped()) < 10


def test_a_continuation_s_prompt_begins_with_the_previous_prompt_and_then_its_output() -> None:
    """Rendered as if the client had sent the whole conversation: harmony drops the first turn's
    reasoning once its final answer is followed by a new message, so turn 2 begins with turn 1's
    prompt; from turn 3 on, a turn begins with the previous prompt and its output (but for
    `<|return|>`, which harmony renders `<|end|>` in history)."""
    seal, today, tokens = sealed_with(b"k"), datetime.date(2026, 11, 25), encoding()
    record, prompts, outputs = None, [], []
    for turn in range(3):
        request = ResponsesRequest(
            model=MODEL,
            input=f"Question {turn}?",
            instructions="Be brief.",
            tools=[RESPONSES_WEATHER],
            previous_response_id=record.id if record else None,
        )
        ids = ItemIds(new_id("resp"))
        inherited, own = (record.conversation() if record else []), input_items(request, ids)
        prompt = render_request(
            request.model_copy(update={"input": ITEMS.validate_python([*inherited, *own])}), seal, today
        )
        completion = (
            f"<|channel|>analysis<|message|>Thinking about {turn}.<|end|><|start|>assistant"
            f"<|channel|>final<|message|>Answer {turn}.<|return|>"
        )
        builder = ResponseBuilder(request, prompt, seal, streaming=False, ids=ids)
        builder.feed(harmony_ids(completion))
        builder.finish("stop", {"prompt_tokens": len(prompt.token_ids), "completion_tokens": 1})
        assert builder.final is not None
        record = StoredResponse(
            id=builder.id, owner=None, created_at=0, inherited=inherited, input=own, response=builder.final
        )
        prompts.append(prompt.token_ids)
        outputs.append(tokens.encode(completion, allowed_special="all"))
    assert prompts[1][: len(prompts[0])] == prompts[0]
    assert prompts[2][: len(prompts[1]) + len(outputs[1]) - 1] == prompts[1] + outputs[1][:-1]


def test_a_continuation_is_served_by_a_second_gateway_and_by_the_first_after_its_restart(
    served: ServedGraph, tmp_path: Path
) -> None:
    """The store is the graph's NATS, not a gateway's memory: shared between gateway processes and
    outliving them. Last in this module: it kills the graph's gateway (the launcher restarts it)."""
    alice = openai_client(served, "alice")
    first = alice.responses.create(model=MODEL, input="Remember the word heron.")
    pid = served.pid_of("gateway")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    env = dict(line.split("=", 1) for line in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if line)
    port = free_ports(1)[0]
    # The graph's gateway's configuration on another port, its metrics port left to the graph's gateway.
    config = GatewayConfig.read(Path(argv[argv.index("--config") + 1]))
    second_config = tmp_path / "second-gateway.json"
    second_config.write_text(config.model_copy(update={"port": port, "metrics_port": None}).model_dump_json())
    argv[argv.index("--config") + 1] = str(second_config)
    with (tmp_path / "second-gateway.log").open("w") as log:
        second = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        endpoint = f"http://127.0.0.1:{port}/v1"
        wait_for(lambda: _answers(endpoint) or second.poll() is not None, 60, "the second gateway to listen")
        assert second.poll() is None, (tmp_path / "second-gateway.log").read_text()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), 10, "the graph's gateway to die")
        on_second = openai_client(served, "alice", endpoint).responses.create(
            model=MODEL, input="Which word?", previous_response_id=first.id
        )
        assert on_second.previous_response_id == first.id and on_second.usage.input_tokens_details.cached_tokens > 0
        wait_for(
            lambda: served.pid_of("gateway") not in (None, pid) and _answers(served.endpoint),
            60,
            "the graph's gateway to be restarted",
        )
        on_first = alice.responses.create(model=MODEL, input="Spell it.", previous_response_id=on_second.id)
        assert on_first.previous_response_id == on_second.id and on_first.status == "completed"
        assert alice.responses.retrieve(on_second.id).id == on_second.id
    finally:
        second.terminate()
        second.wait(30)


def _answers(endpoint: str) -> bool:
    try:
        return httpx.get(f"{endpoint.removesuffix('/v1')}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
