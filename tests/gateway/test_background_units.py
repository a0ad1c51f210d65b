"""Background responses' logic without a graph (background.py, following.py), two gateway processes sharing one
store and plane in memory (tests.support.background): the record's progress and end, the events' numbering, a
dead process's response ended failed and never over a real end, a cancel nobody answers, a follower's end, a
stopping process's work ended failed, the per-key bound over every process; and the event log's messages and a
follower's cursor."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
import pytest

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.responses.background import STOPPED, BackgroundAnswer, BackgroundResponses, Job
from dynamo_oss.gateway.responses.following import _after, cancel, current, follow
from dynamo_oss.gateway.responses.nats_plane import pieces
from dynamo_oss.gateway.responses.plane import Batch
from dynamo_oss.gateway.responses.store import BackgroundRun, MemoryResponseStore, StoredResponse
from tests.support.background import HandFedExchange, MemoryEventLog, MemoryRunners, until
from tests.support.harmony import completion_chunks, harmony_ids, render_request, sealed_with

SEAL = sealed_with(b"b")
ANSWER = "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.<|return|>"
CHUNKS = [
    *completion_chunks(harmony_ids(ANSWER), 1),
    b"data: " + orjson.dumps({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 12}}) + b"\n\n",
]
MESSAGE = 200008  # harmony's <|message|>: the first item begins with the token after it
BEGUN = CHUNKS[: harmony_ids(ANSWER).index(MESSAGE) + 2]  # a chunk a token, to the first item's first token


class Graph:
    """Two gateway processes of one graph: one store, one event log, one set of runners."""

    def __init__(self) -> None:
        self.store, self.log, self.runners = MemoryResponseStore(3600), MemoryEventLog(), MemoryRunners()
        self.first, self.second = self.process(), self.process()

    def process(self) -> BackgroundResponses:
        return BackgroundResponses(self.store, self.log, self.runners, per_key=2)

    def events(self, response_id: str) -> list[dict]:
        stored = b"".join(events for _, events in self.log.batches[response_id])
        return [json.loads(line[6:]) for line in stored.decode().splitlines() if line.startswith("data: ")]


async def accepted(runner: BackgroundResponses, key: str = "alice", stream: bool = True) -> tuple[Job, HandFedExchange]:
    """A background response `runner` accepted, as ResponsesRoute does, its work started on a hand-fed exchange."""
    request = ResponsesRequest(model="m", input="Say hello.", background=True, stream=stream)
    ids = ItemIds(new_id("resp"))
    answer = BackgroundAnswer(request, render_request(request, SEAL, datetime.date(2026, 11, 25)), SEAL, ids)
    record = StoredResponse(
        id=ids.response_id,
        owner=key,
        created_at=time.time(),
        input=[],
        response=answer.builder.response("queued", None),
        background=BackgroundRun(process=runner.process, events=stream),
    )
    job = await runner.create(record, answer, key)
    exchange = HandFedExchange(job, answer)
    runs.add(asyncio.get_running_loop().create_task(job.run(exchange)))
    return job, exchange


runs: set[asyncio.Task] = set()


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def then_settled() -> None:
        await test()
        await asyncio.gather(*runs)

    try:
        asyncio.run(then_settled())
    finally:
        runs.clear()


def test_the_record_shows_each_finished_item_while_it_runs_and_the_log_every_event_numbered() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        response_id = job.record.id
        for chunk in CHUNKS:  # up to the end of the reasoning message
            exchange.give(chunk)
            if b"<|end|>" in chunk or b'"completion_token_ids": [200007]' in chunk:
                break
        progress = await until(lambda: (r := graph.store.records[response_id].response)["output"] and r)
        assert progress["status"] == "in_progress" and [item["type"] for item in progress["output"]] == ["reasoning"]
        assert progress["output"][0]["status"] == "completed"
        for chunk in CHUNKS[CHUNKS.index(chunk) + 1 :]:
            exchange.give(chunk)
        exchange.finish()
        await until(lambda: job.over.is_set())
        record = graph.store.records[response_id]
        events = graph.events(response_id)
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        assert [event["type"] for event in events[:3]] == [
            "response.created",
            "response.queued",
            "response.in_progress",
        ]
        assert events[-1]["type"] == "response.completed" and events[-1]["response"] == record.response
        assert record.response["status"] == "completed" and record.background.last_event == len(events) - 1
        assert graph.first.jobs == {}
        await until(lambda: graph.runners.listed[graph.first.process].responses == {})

    run(test)


def test_a_running_record_whose_process_is_gone_is_ended_failed_and_its_process_stops_at_its_next_write() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        for chunk in BEGUN:
            exchange.give(chunk)
        await until(lambda: graph.store.records[job.record.id].response["status"] == "in_progress")
        found = await graph.store.read(job.record.id)
        assert found is not None and (await current(graph.second, found)).response["status"] == "in_progress"
        graph.runners.lapse(graph.first.process)  # its listing lapsed: dead, or cut off from NATS
        failed = await current(graph.second, found)
        assert failed.response["status"] == "failed" and failed.response["error"] == STOPPED
        assert graph.store.records[job.record.id] == failed
        for chunk in CHUNKS[1:]:  # it was only cut off: its next write finds the record ended, and it stops
            exchange.give(chunk)
        await until(lambda: exchange.left.is_set() and job.over.is_set())
        assert graph.store.records[job.record.id] == failed

    run(test)


def test_a_reader_holding_an_old_revision_never_writes_over_the_end_written_since() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        found = await graph.store.read(job.record.id)
        for chunk in CHUNKS:
            exchange.give(chunk)
        exchange.finish()
        await until(lambda: job.over.is_set())
        await until(lambda: job.record.id not in graph.runners.listed[graph.first.process].responses)
        assert found is not None and (await current(graph.second, found)).response["status"] == "completed"
        assert graph.store.records[job.record.id].response["status"] == "completed"

    run(test)


def test_a_cancel_stops_the_generation_wherever_it_runs_and_one_nobody_answers_is_written_by_the_canceller() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        listened = job.answer()
        for chunk in BEGUN:
            exchange.give(chunk)
        await until(lambda: graph.store.records[job.record.id].response["status"] == "in_progress")
        answered = await cancel(graph.second, await graph.store.read(job.record.id))  # asked of the first process
        assert answered["status"] == "cancelled" and exchange.left.is_set()
        events = graph.events(job.record.id)
        assert (
            events[-1]["type"] == "response.failed" and events[-1]["response"] == answered
        )  # its status says cancelled
        assert graph.store.records[job.record.id].response == answered
        assert await cancel(graph.second, await graph.store.read(job.record.id)) == answered  # ended: unchanged

        unasked, fed = await accepted(graph.first)
        stream = unasked.answer().events  # type: ignore[union-attr]
        for chunk in BEGUN:
            fed.give(chunk)
        await until(lambda: graph.store.records[unasked.record.id].response["status"] == "in_progress")
        graph.runners.reachable = False  # the first process cannot be asked: the canceller writes the end
        cancelled = await cancel(graph.second, await graph.store.read(unasked.record.id))
        assert cancelled["status"] == "cancelled" and not fed.left.is_set()
        for chunk in CHUNKS[1:]:
            fed.give(chunk)
        await until(lambda: fed.left.is_set() and unasked.over.is_set())  # its next write found the record ended
        assert graph.store.records[unasked.record.id].response == cancelled
        last = [piece async for piece in stream][-1]  # the creating client's stream ends with that end
        assert json.loads(last.split(b"data: ", 1)[1])["response"] == cancelled
        assert listened is not None

    run(test)


def test_a_follower_gets_the_events_after_its_cursor_and_the_record_s_end_when_the_log_has_none() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        for chunk in CHUNKS:
            exchange.give(chunk)
        exchange.finish()
        await until(lambda: job.over.is_set())
        everything = graph.events(job.record.id)
        found = await graph.store.read(job.record.id)
        followed = b"".join([events async for events in follow(graph.second, found, 3)])
        numbers = [
            json.loads(line[6:])["sequence_number"] for line in followed.decode().splitlines() if line[:5] == "data:"
        ]
        assert numbers == list(range(4, len(everything)))

        dead, fed = await accepted(graph.first)
        for chunk in BEGUN:
            fed.give(chunk)
        await until(lambda: graph.store.records[dead.record.id].response["status"] == "in_progress")
        graph.runners.lapse(graph.first.process)
        failed = await current(graph.second, await graph.store.read(dead.record.id))
        before = len(graph.events(dead.record.id))
        followed = b"".join(
            [events async for events in follow(graph.second, await graph.store.read(dead.record.id), 1)]
        )
        last = json.loads([line for line in followed.decode().splitlines() if line][-1][6:])
        assert last == {"type": "response.failed", "response": failed.response, "sequence_number": before}
        fed.leave()

    run(test)


def test_a_process_that_stops_ends_what_it_still_runs_failed_and_is_seen_dead_at_once() -> None:
    async def test() -> None:
        graph = Graph()
        job, exchange = await accepted(graph.first)
        for chunk in BEGUN:
            exchange.give(chunk)
        await until(lambda: graph.store.records[job.record.id].response["status"] == "in_progress")
        await graph.first.close()  # after its drain (app.serve), on SIGTERM
        record = graph.store.records[job.record.id]
        assert record.response["status"] == "failed" and record.response["error"] == STOPPED
        assert exchange.left.is_set() and graph.first.process not in graph.runners.listed

    run(test)


def test_a_key_s_background_responses_are_bounded_over_every_process() -> None:
    async def test() -> None:
        graph = Graph()
        _, first = await accepted(graph.first, key="judy")
        _, second = await accepted(graph.second, key="judy")
        with pytest.raises(ApiError) as refused:
            await accepted(graph.first, key="judy")
        assert refused.value.status == 429 and refused.value.param == "background"
        _, other = await accepted(graph.first, key="bob")  # another key's share
        for exchange in (first, second, other):
            exchange.leave()

    run(test)


def test_the_event_log_keeps_whole_events_numbered_and_a_follower_sends_only_those_after_its_cursor() -> None:
    events = [b'event: e\ndata: {"n":%d,"pad":"%s"}\n\n' % (n, b"x" * 40) for n in range(7)]  # 71 bytes each
    cut = pieces(10, b"".join(events), 150)
    assert cut == [
        (10, events[0] + events[1]),
        (12, events[2] + events[3]),
        (14, events[4] + events[5]),
        (16, events[6]),
    ]
    huge = b"event: big\ndata: " + b"y" * 400 + b"\n\n"  # larger than a message: left out, its number skipped
    assert pieces(0, events[0] + huge + events[1], 150) == [(0, events[0]), (2, events[1])]
    ending = b'event: response.completed\ndata: {"type":"response.completed"}\n\n'
    assert _after(Batch(3, b"".join(events[:3]) + ending, 0), 4) == (events[2] + ending, 6, True)
    assert _after(Batch(7, events[0], 0), 4) == (events[0], 7, False)
    assert _after(Batch(0, ending, 0), 5) == (b"", 5, True)
