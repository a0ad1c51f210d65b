"""The Batch API's logic without a graph: the multipart upload as a real client encodes it and as a hostile one
does not, batch lines read into requests or errors, the pacer's window on the graph's latency and its share of
the graph, and the runner on in-memory stores (tests.support.batches): a batch's answers in their files, a
cancel, the window's end, a retry, and a batch taken up by another process after its runner died."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import openai.types
import pytest

from dynamo_oss.gateway.batches import runner as runner_module
from dynamo_oss.gateway.batches.lines import answered_line, read_lines, too_large
from dynamo_oss.gateway.batches.pacing import Pacer
from dynamo_oss.gateway.batches.records import BatchRecord, Counts, TokenUsage, new_batch_id
from dynamo_oss.gateway.batches.route import BatchesRoute
from dynamo_oss.gateway.batches.runner import BatchRunner
from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.fair_share import FairShare
from dynamo_oss.gateway.files.multipart import MAX_PART_HEAD_BYTES, form_fields
from dynamo_oss.gateway.files.store import StoredFile, StoreFull
from dynamo_oss.gateway.latency import RecentLatency, StreamTiming
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.stores import StoreUnavailable
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.graph.schema import BatchTargetsSection, GatewayBatchesSection
from tests.support.background import until
from tests.support.batches import Lines, MemoryBatchStore, MemoryFileStore

CHAT = "/v1/chat/completions"
TARGETS = BatchTargetsSection(ttft_ms=1000, itl_ms=50)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def line(custom_id: str, url: str = CHAT, **body: Any) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": custom_id}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


# The upload


def uploaded(data: bytes, purpose: str = "batch") -> bytes:
    """The body the openai client's HTTP library (httpx) sends for files.create."""
    request = httpx.Request("POST", "http://x/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": purpose})
    return request.read()


def test_an_upload_as_a_client_encodes_it_is_read_field_by_field() -> None:
    data = (line("a") + "\n" + line("b") + "\n").encode()
    fields = form_fields(uploaded(data))
    assert fields["purpose"].value == b"batch" and fields["purpose"].filename is None
    assert fields["file"].value == data and fields["file"].filename == "in.jsonl"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"purpose": "batch"}', "does not begin with a boundary line"),
        (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch', "no closing boundary"),
        (b"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", "no Content-Disposition"),
        (b"--b\r\n" + b"X-Pad: " + b"a" * MAX_PART_HEAD_BYTES + b"\r\n\r\nx\r\n--b--", "head is longer"),
        (
            b'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n'
            b'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n2\r\n--b--',
            "the field 'a' twice",
        ),
        (b"--" + b"b" * 80 + b"\r\n", "not a boundary RFC 2046 allows"),
    ],
)
def test_a_body_that_is_not_a_form_is_a_400_saying_what_is_wrong(body: bytes, why: str) -> None:
    with pytest.raises(ApiError) as refused:
        form_fields(body)
    assert refused.value.status == 400 and refused.value.code == "invalid_multipart"
    assert why in refused.value.message and "curl -F file=@FILE -F purpose=batch" in refused.value.message


def test_a_hostile_content_disposition_is_read_in_one_pass() -> None:
    """Its parameters are a client's: a long unquoted run once made a regular expression backtrack for seconds."""
    long_token = b"--b\r\nContent-Disposition: form-data; name=" + b"b" * 900 + b"\r\n\r\nx\r\n--b--"
    assert list(form_fields(long_token)) == ["b" * 900]
    for head, why in (
        (b"form-data; name=" + b"b" * 2000, "longer than 1024"),
        (b'form-data; name="unclosed', "without its closing quote"),
        (b"form-data; name", "without a name and a value"),
        (b"form-data garbage", "something other than parameters"),
    ):
        with pytest.raises(ApiError, match=why):
            form_fields(b"--b\r\nContent-Disposition: " + head + b"\r\n\r\nx\r\n--b--")


def test_so_many_fields_are_refused() -> None:
    parts = b"".join(b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % n for n in range(40))
    with pytest.raises(ApiError, match="more than 16 fields"):
        form_fields(parts + b"--b--")


# Lines


def test_a_file_s_lines_are_requests_or_the_reason_they_are_not() -> None:
    data = "\n".join(
        [
            line("ok"),
            "",  # blank: not a line
            "{not json",
            json.dumps({"custom_id": "x", "method": "GET", "url": CHAT, "body": {}}),
            line("elsewhere", url="/v1/responses"),
            line("ok"),  # its custom_id again
            line("streamed", stream=True),
            line("last"),
        ]
    ).encode()
    lines = read_lines(data, CHAT)
    assert [entry.number for entry in lines] == list(range(7))
    assert [entry.body is not None for entry in lines] == [True, False, False, False, False, False, True]
    errors = [entry.error or "" for entry in lines]
    assert "Line 2 is not JSON" in errors[1]
    assert "invalid 'method'" in errors[2]
    assert "this batch's endpoint is '/v1/chat/completions'" in errors[3]
    assert "custom_id 'ok' is used by an earlier line" in errors[4]
    assert "invalid 'body.stream'" in errors[5] and "leave out 'stream'" in errors[5]
    assert json.loads(lines[6].body or b"")["messages"][0]["content"] == "last"


def test_the_kept_objects_are_what_openai_s_client_reads() -> None:
    record = BatchRecord(
        id=new_batch_id(),
        owner="alice",
        endpoint=CHAT,
        input_file_id="file-" + "0" * 32,
        completion_window="24h",
        status="in_progress",
        created_at=1,
        expires_at=2,
        counts=Counts(total=3, completed=1),
    )
    batch = openai.types.Batch.model_validate(record.openai())
    assert batch.request_counts is not None and batch.request_counts.total == 3 and batch.usage is not None
    assert "owner" not in record.openai() and "lease" not in record.openai()
    stored = StoredFile.made("alice", "batch", "in.jsonl", b"a\n\nb\n", 60)
    assert openai.types.FileObject.model_validate(stored.openai()).bytes == 5 and stored.lines == 2


# Pacing


def timed(asked: float, first: float | None, ended: float | None = None, tokens: int = 0) -> StreamTiming:
    return StreamTiming(asked_at=asked, first_at=first, ended_at=ended, tokens=tokens)


def pacer(max_in_flight: int = 100, share: int = 16, targets: BatchTargetsSection | None = TARGETS) -> Pacer:
    fair_share = FairShare(None, {}, max_in_flight, Ledger([], processes=1, process=0, path=None))
    return Pacer(fair_share, share, targets, RecentLatency())


def answered_batch_request(paced: Pacer, ttft_s: float = 0.2, ago_s: float = 0.0) -> None:
    """A batch request that had its first tokens `ago_s` ago, `ttft_s` after it was sent."""
    now = time.monotonic() - ago_s
    request = timed(now - ttft_s, now)
    paced.latency.began(request, interactive=False)
    paced.latency.ended(request)


def test_the_window_doubles_once_a_round_trip_then_halves_on_a_miss_and_holds() -> None:
    async def test() -> None:
        paced = pacer()
        tickets = []
        for window in (1, 2, 4, 8, 16, 16):  # slow start while every place in the window is taken
            assert paced.window == window
            while paced.in_flight < paced.window:
                tickets.append(await paced.admitted())
            paced.tick()
            assert paced.window == window  # no request sent since the last change has had its first tokens yet
            answered_batch_request(paced, ttft_s=0.0)
            paced.tick()
        assert paced.window == 16  # the share: never past it
        now = time.monotonic()
        paced.latency.ended(timed(now - 2, now - 1.9, now, tokens=11))  # 190 ms a token, past 50 ms
        paced.tick(now)
        assert paced.window == 8 and not paced.slow_start
        paced.tick(now + 1)
        assert paced.window == 8  # held: the answers under way still show the load before the cut
        paced.latency.itl.clear()
        answered_batch_request(paced, ttft_s=0.0)
        paced.tick(now + 6)
        assert paced.window == 9  # past the hold and within targets: grows by one
        for ticket in tickets:
            paced.done(ticket)

    run(test)


def test_batch_requests_queueing_for_prefill_shrink_the_window_with_no_interactive_request_about() -> None:
    async def test() -> None:
        paced = pacer(share=64)
        paced.window, paced.slow_start = 32, False
        for _ in range(20):
            answered_batch_request(paced, ttft_s=0.2, ago_s=30)  # what a batch request meets with nothing in its way
        paced.tick()
        assert paced.window == 32  # nothing queues, and the window is not full: it stays
        for _ in range(20):
            answered_batch_request(paced, ttft_s=2.0)  # ten times that: they wait for prefill
        paced.tick()
        assert paced.window == 28  # an eighth off

    run(test)


def test_an_interactive_request_waiting_past_the_ttft_target_holds_batch_work_back_to_none() -> None:
    async def test() -> None:
        paced = pacer()
        paced.window = 4
        now = time.monotonic()
        waiting = timed(now - 1.5, None)  # no first token after 1.5 s: past the 1 s target already
        paced.latency.began(waiting, interactive=True)
        batch = timed(now - 5, None)  # a batch request's long prompt says nothing of interactive TTFT
        paced.latency.began(batch, interactive=False)
        for cut in (2, 1, 0):
            paced.held_until = 0
            paced.tick(now)
            assert paced.window == cut
        admitted = asyncio.ensure_future(paced.admitted())
        await asyncio.sleep(0.3)  # longer than the pacer's recheck: it stays held
        assert not admitted.done()
        waiting.first_at = waiting.asked_at + 0.5
        paced.latency.ended(waiting)
        paced.held_until = 0
        paced.tick(now)  # its 0.5 s TTFT is a sample within the target now: one at a time again
        assert paced.window == 1
        paced.done(await asyncio.wait_for(admitted, 5))

    run(test)


def test_batch_requests_take_at_most_their_share_never_the_graph_s_last_place_and_no_interactive_one_s(
    tmp_path: Any,
) -> None:
    async def test() -> None:
        Ledger.create(tmp_path / "ledger")
        ledgers = [Ledger(["alice"], processes=2, process=index, path=tmp_path / "ledger") for index in (0, 1)]
        shares = [FairShare(None, {}, 4, ledger) for ledger in ledgers]
        pacers = [Pacer(share, 2, None, RecentLatency()) for share in shares]  # no targets: the share alone
        first = [await pacers[0].admitted(), await pacers[1].admitted()]  # one in each process: the share of 2
        third = asyncio.ensure_future(pacers[0].admitted())
        await asyncio.sleep(0.3)
        assert not third.done()  # over the graph, not per process
        pacers[1].done(first[1])
        pacers[0].done(await asyncio.wait_for(third, 5))
        interactive = [shares[1].admit("alice") for _ in range(3)]  # with one batch request: the graph is full
        blocked = asyncio.ensure_future(pacers[1].admitted())
        await asyncio.sleep(0.3)
        assert not blocked.done()  # it waits for room rather than take the last place
        interactive.append(shares[0].admit("alice"))  # and the batch's place never turns an interactive one away
        with pytest.raises(ApiError) as refused:
            shares[0].admit("alice")  # four interactive requests: at max_in_flight
        assert refused.value.status == 503
        for ticket in interactive[-2:]:
            shares[1].done(ticket, 0)
        pacers[1].done(await asyncio.wait_for(blocked, 5))
        pacers[0].done(first[0])

    run(test)


# The runner


class Graph:
    """One graph's batch and file stores, and the runners of its gateway processes."""

    def __init__(self) -> None:
        self.store, self.files, self.lines = MemoryBatchStore(), MemoryFileStore(), Lines()

    def runner(self, share: int = 8) -> BatchRunner:
        fair_share = FairShare(None, {}, 100, Ledger([], processes=1, process=0, path=None))
        return BatchRunner(self.store, self.files, self.lines, Pacer(fair_share, share, None, RecentLatency()))

    async def batch(self, *lines: str, expires_in: float = 3600) -> str:
        data = ("\n".join(lines) + "\n").encode()
        stored = StoredFile.made("alice", "batch", "in.jsonl", data, 3600)
        await self.files.put(stored, data)
        now = int(time.time())
        record = BatchRecord(
            id=new_batch_id(),
            owner="alice",
            endpoint=CHAT,
            input_file_id=stored.id,
            completion_window="24h",
            status="validating",
            created_at=now,
            expires_at=int(now + expires_in),
            counts=Counts(total=stored.lines),
        )
        await self.store.create(record)
        return record.id

    def ended(self, batch_id: str) -> bool:
        return self.store.now(batch_id).ended

    async def file(self, file_id: str | None) -> list[dict]:
        assert file_id is not None
        data = await self.files.content("alice", file_id)
        return [json.loads(entry) for entry in (data or b"").splitlines()]


def test_a_batch_s_answers_go_to_its_files_in_line_order_and_a_malformed_line_is_never_sent() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), "nope", line("b"), line("c"))
        runner = graph.runner()
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 3)
        assert graph.store.now(batch_id).status == "in_progress"
        sent = graph.lines.sent
        sent[2].answer_with(200)  # answers come in any order
        sent[1].answer_with(400)
        sent[0].answer_with(200)
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "completed" and record.lease is None and record.finalizing_at is not None
        assert record.counts == Counts(total=4, completed=2, failed=2)
        assert (record.usage.input_tokens, record.usage.output_tokens) == (20, 10)
        output = await graph.file(record.output_file_id)
        assert [entry["custom_id"] for entry in output] == ["a", "c"]
        assert output[0]["response"]["status_code"] == 200 and output[0]["error"] is None
        errors = await graph.file(record.error_file_id)
        assert [entry["custom_id"] for entry in errors] == [None, "b"]  # line 2 (not JSON), then line 3's 400
        assert errors[0]["response"] is None and errors[0]["error"]["code"] == "invalid_request"
        assert errors[1]["response"]["status_code"] == 400
        assert batch_id not in graph.store.kept  # its answers are in its files now
        await runner.close()

    run(test)


def test_a_cancel_leaves_the_lines_in_flight_and_ends_the_batch_with_what_it_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner_module, "RENEW_S", 0.1)  # a cancel is seen at the next renewal

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(*(line(f"l{n}") for n in range(5)))
        runner = graph.runner(share=2)
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        graph.lines.sent[0].answer_with(200)
        await until(lambda: len(graph.lines.waiting()) == 2)  # the next line took its place
        versioned = await graph.store.read("alice", batch_id)
        assert versioned is not None
        await graph.store.write(versioned.record.moved("cancelling"), versioned.revision)  # as the route does
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "cancelled" and record.cancelling_at and record.cancelled_at
        assert all(exchange.was_left for exchange in graph.lines.sent[1:])
        assert len(graph.lines.sent) == 3  # nothing sent after the cancel
        assert [entry["custom_id"] for entry in await graph.file(record.output_file_id)] == ["l0"]
        errors = await graph.file(record.error_file_id)
        assert [entry["custom_id"] for entry in errors] == ["l1", "l2", "l3", "l4"]
        assert {entry["error"]["code"] for entry in errors} == {"batch_cancelled"}
        await runner.close()

    run(test)


def test_a_batch_past_its_window_ends_expired_without_sending_a_line() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"), expires_in=-1)
        runner = graph.runner()
        await runner.claim()
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "expired" and record.expired_at and graph.lines.sent == []
        errors = await graph.file(record.error_file_id)
        assert [entry["error"]["code"] for entry in errors] == ["batch_expired"] * 2
        assert record.output_file_id is None and record.counts == Counts(total=2, completed=0, failed=2)
        await runner.close()

    run(test)


def test_a_batch_whose_file_is_gone_fails_saying_so() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"))
        graph.files.files.clear()
        runner = graph.runner()
        await runner.claim()
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "failed" and record.errors and "no longer kept" in record.errors[0]["message"]
        assert openai.types.Batch.model_validate(record.openai()).errors is not None
        await runner.close()

    run(test)


def test_a_retryable_answer_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "RETRY_S", 0.01)

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"))
        runner = graph.runner()
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 1)
        graph.lines.sent[0].answer_with(503, retryable=True)
        await until(lambda: len(graph.lines.sent) == 2 and graph.lines.waiting())
        graph.lines.sent[1].answer_with(200)
        await until(lambda: graph.ended(batch_id))
        assert graph.store.now(batch_id).counts == Counts(total=1, completed=1, failed=0)
        await runner.close()

    run(test)


def test_a_batch_whose_runner_died_is_taken_up_elsewhere_from_the_lines_not_yet_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner_module, "LEASE_S", 0.5)
    monkeypatch.setattr(runner_module, "RENEW_S", 0.1)

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(*(line(f"l{n}") for n in range(4)))
        first, second = graph.runner(share=2), graph.runner(share=2)
        await first.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        graph.lines.sent[0].answer_with(200)
        await until(lambda: len(graph.lines.sent) == 3)
        await second.claim()
        assert batch_id not in second.runs  # leased to the first, which renews it
        (run,) = first.runs.values()
        assert run.task is not None
        run.task.cancel()  # the first process dies: no let-go, no more renewals
        await asyncio.wait((run.task,))
        lapsed = time.monotonic() + runner_module.LEASE_S
        await until(lambda: time.monotonic() > lapsed)
        await second.claim()
        assert batch_id in second.runs
        for expected in (["l1", "l2"], ["l3"]):  # the lines not yet answered, two at a time
            await until(lambda expected=expected: len(graph.lines.waiting()) == len(expected))
            assert [
                json.loads(exchange.body)["messages"][0]["content"] for exchange in graph.lines.waiting()
            ] == expected
            for exchange in graph.lines.waiting():
                exchange.answer_with(200)
        await until(lambda: graph.ended(batch_id))
        output = await graph.file(graph.store.now(batch_id).output_file_id)
        assert [entry["custom_id"] for entry in output] == ["l0", "l1", "l2", "l3"]  # l0 kept, not sent again
        await second.close()

    run(test)


def test_a_stopping_process_lets_its_batch_go_for_another_to_take_up_at_once() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"))
        first, second = graph.runner(), graph.runner()
        await first.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        await first.close()
        assert all(exchange.was_left for exchange in graph.lines.sent)
        assert graph.store.now(batch_id).lease is None and not graph.ended(batch_id)
        await second.claim()
        assert batch_id in second.runs
        await until(lambda: len(graph.lines.waiting()) == 2)
        for exchange in graph.lines.waiting():
            exchange.answer_with(200)
        await until(lambda: graph.ended(batch_id))
        assert graph.store.now(batch_id).counts == Counts(total=2, completed=2, failed=0)
        await second.close()

    run(test)


def test_a_batch_whose_files_cannot_be_kept_fails_saying_what_to_do() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"))
        full = graph.files.put

        async def refuse_output(record: StoredFile, data: bytes) -> None:
            if record.purpose == "batch_output":
                raise StoreFull("the graph's file store is full (1 MiB)")
            await full(record, data)

        graph.files.put = refuse_output  # type: ignore[method-assign]
        runner = graph.runner()
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 1)
        graph.lines.sent[0].answer_with(200)
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "failed" and record.errors and record.errors[0]["code"] == "file_storage_full"
        assert "delete files no longer needed" in record.errors[0]["message"] and record.output_file_id is None
        await runner.close()

    run(test)


def test_an_answer_too_large_to_keep_is_kept_as_its_error() -> None:
    (request,) = read_lines(line("big").encode(), CHAT)
    answer = answered_line(request, 200, {"text": "x" * 100}, TokenUsage(output_tokens=7))
    kept = too_large(answer, "The answer was 2 MB compressed.")
    data = json.loads(kept.data)
    assert kept.failed and kept.line == answer.line and kept.usage == answer.usage
    assert data["custom_id"] == "big" and data["response"] is None
    assert data["error"] == {"code": "answer_too_large", "message": "The answer was 2 MB compressed. (answered 200)"}


def test_an_answer_the_graph_s_nats_could_not_keep_is_kept_again_and_still_in_the_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner_module, "KEEP_RETRY_S", 0.01)

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"))
        keep, blips = graph.store.keep_answer, [StoreUnavailable("NATS did not answer")]

        async def blipping(batch: str, answer: Any) -> None:
            if blips:
                raise blips.pop()
            await keep(batch, answer)

        graph.store.keep_answer = blipping  # type: ignore[method-assign]
        runner = graph.runner()
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        for exchange in graph.lines.waiting():
            exchange.answer_with(200)
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert not blips and record.status == "completed" and record.counts == Counts(total=2, completed=2, failed=0)
        assert [entry["custom_id"] for entry in await graph.file(record.output_file_id)] == ["a", "b"]
        await runner.close()

    run(test)


def test_a_bug_on_a_line_s_way_is_that_line_s_500_and_the_rest_are_served() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"))
        runner = graph.runner()
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        graph.lines.sent[0].answered.set_exception(KeyError("a bug"))
        graph.lines.sent[1].answer_with(200)
        await until(lambda: graph.ended(batch_id))
        record = graph.store.now(batch_id)
        assert record.status == "completed" and record.counts == Counts(total=2, completed=1, failed=1)
        (error,) = await graph.file(record.error_file_id)
        assert error["custom_id"] == "a" and error["response"]["status_code"] == 500
        await runner.close()

    run(test)


def test_a_line_waiting_to_be_sent_again_gives_its_place_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "RETRY_S", 0.5)

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"))
        runner = graph.runner(share=1)
        await runner.claim()
        await until(lambda: len(graph.lines.waiting()) == 1)
        graph.lines.sent[0].answer_with(503, retryable=True)
        await until(lambda: len(graph.lines.sent) == 2)  # b goes while a waits out its backoff
        assert json.loads(graph.lines.sent[1].body)["messages"][0]["content"] == "b"
        graph.lines.sent[1].answer_with(200)
        await until(lambda: len(graph.lines.sent) == 3)
        graph.lines.sent[2].answer_with(200)  # a, sent again
        await until(lambda: graph.ended(batch_id))
        assert graph.store.now(batch_id).counts == Counts(total=2, completed=2, failed=0)
        await runner.close()

    run(test)


def test_a_batch_the_gateway_keeps_failing_on_ends_failed_with_what_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "REST_S", 0.0)

    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"))

        async def unreadable(batch: str) -> list:
            raise ValueError("an answer kept by another version")

        graph.store.answers = unreadable  # type: ignore[method-assign]
        runner = graph.runner()
        for attempt in range(1, runner_module.FAILURES + 1):
            await runner.claim()
            await until(lambda: not runner.runs)
            assert runner.failures[batch_id] == attempt
        record = graph.store.now(batch_id)
        assert (
            record.status == "failed"
            and record.errors
            and "failed on this batch 3 times" in record.errors[0]["message"]
        )
        await runner.close()

    run(test)


def test_prompts_of_many_lengths_are_not_taken_for_a_queue_but_a_wait_is() -> None:
    async def test() -> None:
        paced = pacer(share=64)
        paced.window, paced.slow_start = 32, False
        now = time.monotonic()
        for n in range(40):  # an idle graph's TTFT grows with the prompt: 500 to 8,000 tokens
            tokens = 500 + 190 * n
            request = timed(now - 1 - tokens / 10_000, now - 1)
            paced.latency.began(request, interactive=False, prompt_tokens=tokens)
            paced.latency.ended(request)
        paced.tick(now)
        assert paced.window == 32
        for entry in list(paced.latency.batch_ttft):  # a minute ago: what batch requests meet unhindered
            paced.latency.batch_ttft.append((entry[0] - 60, entry[1] - 60, entry[2]))
            paced.latency.batch_ttft.popleft()
        for _ in range(20):  # the same prompts, each waiting two seconds before its prefill
            request = timed(now - 2.5, now)
            paced.latency.began(request, interactive=False, prompt_tokens=1000)
            paced.latency.ended(request)
        paced.tick(now)
        assert paced.window == 28
        paced.tick(now + 1)
        assert paced.window == 28  # held, as after any cut
        paced.window = 1
        paced.held_until = 0
        paced.tick(now + 2)
        assert paced.window == 1  # a queue alone never stops the batch

    run(test)


def test_a_batch_no_runner_has_taken_up_is_cancelled_at_once_and_a_wrong_method_is_a_405() -> None:
    async def test() -> None:
        store, files = MemoryBatchStore(), MemoryFileStore()
        data = (line("a") + "\n").encode()
        uploaded = StoredFile.made("alice", "batch", "in.jsonl", data, 3600)
        await files.put(uploaded, data)
        route = BatchesRoute(store, files, GatewayBatchesSection())
        alice = Caller("alice", "alice", None)  # type: ignore[arg-type]
        create = json.dumps({"input_file_id": uploaded.id, "endpoint": CHAT, "completion_window": "24h"}).encode()
        status, created = await route.answer(b"POST", b"/v1/batches", create, None, alice)  # type: ignore[misc, arg-type]
        assert status == 200 and created["status"] == "validating"
        status, cancelled = await route.answer(
            b"POST", f"/v1/batches/{created['id']}/cancel".encode(), b"", None, alice
        )  # type: ignore[misc, arg-type]
        assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"] and cancelled["cancelling_at"]
        assert (await store.unended()) == []
        with pytest.raises(ApiError) as refused:
            await route.answer(b"GET", f"/v1/batches/{created['id']}/cancel".encode(), b"", None, alice)  # type: ignore[arg-type]
        assert refused.value.status == 405 and "takes POST" in refused.value.message

    run(test)


def test_a_draining_process_sends_no_more_lines_keeps_those_that_finish_and_lets_the_batch_go() -> None:
    async def test() -> None:
        graph = Graph()
        batch_id = await graph.batch(line("a"), line("b"), line("c"))
        first, second = graph.runner(share=2), graph.runner(share=2)
        await first.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)
        first.wind_down()
        graph.lines.sent[0].answer_with(200)  # finishes within the drain: kept
        await until(lambda: first.in_flight == 1)
        assert len(graph.lines.sent) == 2  # c is not sent by a draining process
        await first.close()  # b, still in flight at the end of the drain, is left
        record = graph.store.now(batch_id)
        assert not record.ended and record.lease is None and [a.line for a in graph.store.kept[batch_id]] == [0]
        await second.claim()
        await until(lambda: len(graph.lines.waiting()) == 2)  # b and c, by the process that took it up
        for exchange in graph.lines.waiting():
            exchange.answer_with(200)
        await until(lambda: graph.ended(batch_id))
        assert graph.store.now(batch_id).counts == Counts(total=3, completed=3, failed=0)
        await second.close()

    run(test)
