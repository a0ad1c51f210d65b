"""Background responses (`background: true`) through the session's keyed mocker graph, with the `openai` client:
answered queued and completed without the client, a dropped stream resumed after its last event, cancelled
while running (the generation stops) and after its end (unchanged), another key's 404s, and the key's
share of the graph held until the work ends and bounded per key. A gateway process killed under one is in
test_endpoint_processes.py, which serves two; the logic without a graph in test_background_units.py."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.keyed import MODEL, openai_client
from tests.support.graphs import BACKGROUND_PER_KEY, ENDLESS, KEYS
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

EVENT = TypeAdapter(ResponseStreamEvent)


@pytest.fixture
def served(keyed_graph: ServedGraph) -> ServedGraph:
    return keyed_graph


def ended(of: openai.OpenAI, response_id: str, timeout_s: float = 30) -> Response:
    """The response once it has left queued and in_progress (polled, as a client of background mode does)."""

    def left() -> Response | None:
        response = of.responses.retrieve(response_id)
        return response if response.status not in ("queued", "in_progress") else None

    return wait_for(left, timeout_s, f"background response {response_id} to end", every_s=0.1)  # type: ignore[return-value]


def running(of: openai.OpenAI, response_id: str) -> Response:
    return wait_for(  # type: ignore[return-value]
        lambda: (response := of.responses.retrieve(response_id)).status == "in_progress" and response,
        30,
        f"background response {response_id} to be in progress",
        every_s=0.05,
    )


def test_a_background_response_is_answered_queued_and_completes_without_its_client(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    created = alice.responses.create(model=MODEL, input="Say hello.", background=True)
    assert created.status == "queued" and created.background is True and created.output == []
    assert created.store is True and created.usage is None
    done = ended(alice, created.id)
    assert done.status == "completed" and done.background is True and done.output[-1].type == "message"
    assert done.usage is not None and done.usage.output_tokens > 0
    assert [item.type for item in alice.responses.input_items.list(created.id).data] == ["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        alice.responses.create(model=MODEL, input="Say hello.", background=True, store=False)
    assert refused.value.body["param"] == "background"  # type: ignore[index]


def test_a_dropped_background_stream_resumed_after_its_last_event_gets_exactly_the_rest(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    first: list[dict] = []
    with httpx.stream(
        "POST",
        f"{served.endpoint}/responses",
        timeout=60,
        headers={"Authorization": f"Bearer {KEYS['alice']}"},
        json={"model": MODEL, "input": "Say hello.", "background": True, "stream": True},
    ) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: "):
                first.append(json.loads(line[6:]))
            if len(first) == 5:
                break  # the client goes away; the work does not
    assert [event["type"] for event in first[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert first[0]["response"]["status"] == "queued" and first[2]["response"]["status"] == "in_progress"
    response_id, last = first[0]["response"]["id"], first[-1]["sequence_number"]
    rest = list(alice.responses.retrieve(response_id, stream=True, starting_after=last))
    assert [event.sequence_number for event in rest] == list(range(last + 1, last + 1 + len(rest)))
    assert rest[-1].type == "response.completed" and rest[-1].response == alice.responses.retrieve(response_id)
    whole = [event.model_dump() for event in alice.responses.retrieve(response_id, stream=True)]
    assert whole == [EVENT.validate_python(event).model_dump() for event in first] + [e.model_dump() for e in rest]
    for raw in first:  # every event the SDK's type, no field left over
        assert EVENT.validate_python(raw).model_dump(exclude_unset=True) == raw
    nothing_more = list(alice.responses.retrieve(response_id, stream=True, starting_after=rest[-1].sequence_number))
    assert nothing_more == []
    unstreamed = alice.responses.create(model=MODEL, input="Say hello.", background=True)
    with pytest.raises(openai.BadRequestError) as refused:  # OpenAI's rule: only one created with stream=true
        list(alice.responses.retrieve(unstreamed.id, stream=True))
    assert refused.value.body["param"] == "stream"  # type: ignore[index]
    ended(alice, unstreamed.id)


def test_cancelling_a_running_background_response_ends_it_cancelled_and_stops_its_generation(
    served: ServedGraph,
) -> None:
    alice = openai_client(served, "alice")
    before = served.frontend_gauges()["dynamo_frontend_output_tokens_total"]
    created = alice.responses.create(model=MODEL, input="Say hello.", background=True, **ENDLESS)
    running(alice, created.id)
    cancelled = alice.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.error is None and cancelled.usage is None
    assert [(item.type, item.status) for item in cancelled.output] == [("reasoning", "incomplete")]  # as far as it got
    assert alice.responses.retrieve(created.id) == cancelled
    assert alice.responses.cancel(created.id) == cancelled  # cancelling twice: the same response
    wait_for(lambda: served.frontend_gauges()["dynamo_frontend_inflight_requests"] == 0, 10, "the generation to stop")
    generated = served.frontend_gauges()["dynamo_frontend_output_tokens_total"] - before
    assert 0 < generated < ENDLESS["max_output_tokens"] / 2, generated


def test_cancelling_an_ended_background_response_returns_it_unchanged_and_a_synchronous_one_is_refused(
    served: ServedGraph,
) -> None:
    alice = openai_client(served, "alice")
    done = ended(alice, alice.responses.create(model=MODEL, input="Say hello.", background=True).id)
    assert alice.responses.cancel(done.id) == done == alice.responses.retrieve(done.id)
    synchronous = alice.responses.create(model=MODEL, input="Say hello.")
    with pytest.raises(openai.BadRequestError) as refused:
        alice.responses.cancel(synchronous.id)
    assert "background=true" in refused.value.message
    assert alice.responses.retrieve(synchronous.id).status == "completed"


def test_another_key_gets_404s_for_a_background_response_its_stream_and_its_cancel(served: ServedGraph) -> None:
    alice, bob = openai_client(served, "alice"), openai_client(served, "bob")
    created = alice.responses.create(model=MODEL, input="Say hello.", background=True, stream=True)
    response_id = next(iter(created)).response.id
    created.close()
    refusals: list[Callable[[], object]] = [
        lambda: bob.responses.retrieve(response_id),
        lambda: list(bob.responses.retrieve(response_id, stream=True, starting_after=0)),
        lambda: bob.responses.cancel(response_id),
    ]
    for refused in refusals:
        with pytest.raises(openai.NotFoundError) as error:
            refused()
        assert response_id in error.value.message
    assert ended(alice, response_id).status == "completed"  # bob's cancel did nothing


def test_background_responses_hold_their_key_s_share_until_they_end_and_are_bounded_per_key(
    served: ServedGraph,
) -> None:
    heidi = openai_client(served, "heidi")  # concurrent_requests=1 (tests.support.graphs.KEY_LIMITS)
    held = heidi.responses.create(model=MODEL, input="Say hello.", background=True, **ENDLESS)
    with pytest.raises(openai.RateLimitError):
        heidi.responses.create(model=MODEL, input="Say hello.", max_output_tokens=8)
    heidi.responses.cancel(held.id)
    assert heidi.responses.create(model=MODEL, input="Say hello.", max_output_tokens=8).status == "incomplete"

    judy = openai_client(served, "judy")
    bounded = [judy.responses.create(model=MODEL, input="Say hello.", background=True, **ENDLESS)]
    bounded += [judy.responses.create(model=MODEL, input="Say hi.", background=True, **ENDLESS)]
    assert len(bounded) == BACKGROUND_PER_KEY
    with pytest.raises(openai.RateLimitError) as refused:
        judy.responses.create(model=MODEL, input="Say hello.", background=True)
    assert refused.value.body["param"] == "background"  # type: ignore[index]
    assert "max_background_per_key" in refused.value.message
    for response in bounded:
        assert judy.responses.cancel(response.id).status == "cancelled"
    again = judy.responses.create(model=MODEL, input="Say hello.", background=True)
    assert ended(judy, again.id).status == "completed"
