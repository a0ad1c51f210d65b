"""The Batch API (/v1/files, /v1/batches) through the session's keyed mocker graph, with the `openai` client: a batch
of each endpoint run end to end (its output and error files, counts and usage), a malformed line in the error file
with the rest served, files and batches owned by their key, limits at upload, a cancel of an ended batch and of a
running one, a batch past its window, and batch requests kept out of their key's interactive limits. The logic
without a graph (pacing, a runner's death) is in test_batch_units.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch

from dynamo_oss.gateway.batches.records import BatchRecord, Counts, new_batch_id
from dynamo_oss.gateway.files.nats_files import CHUNK_BYTES
from tests.support.graphs import BATCH_FILE_MIB, BATCH_LINES, ENDLESS, KEYS
from tests.support.keyed import MODEL, gateway_samples, nats_url, openai_client, put_batch
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

CHAT = "/v1/chat/completions"


@pytest.fixture
def served(keyed_graph: ServedGraph) -> ServedGraph:
    return keyed_graph


def jsonl(*lines: dict[str, Any] | str) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def chat_line(custom_id: str, **body: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Say {custom_id}."}], "max_tokens": 16, **body}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def ended(client: openai.OpenAI, batch_id: str, timeout_s: float = 60) -> Batch:
    """The batch once it has ended (polled, as a client of the Batch API does)."""

    def done() -> Batch | None:
        batch = client.batches.retrieve(batch_id)
        return batch if batch.status in ("completed", "failed", "expired", "cancelled") else None

    return wait_for(done, timeout_s, f"batch {batch_id} to end", every_s=0.2)  # type: ignore[return-value]


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_chat_batch_runs_to_its_end_with_its_answers_and_errors_in_their_files(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    data = jsonl(chat_line("one"), "{not json", chat_line("two"), chat_line("three", max_tokens=-1))
    uploaded = alice.files.create(file=("questions.jsonl", data), purpose="batch")
    assert (uploaded.purpose, uploaded.bytes, uploaded.filename) == ("batch", len(data), "questions.jsonl")
    assert alice.files.retrieve(uploaded.id) == uploaded and alice.files.content(uploaded.id).content == data
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h", metadata={"run": "nightly"}
    )
    assert batch.status == "validating" and batch.metadata == {"run": "nightly"}
    done = ended(alice, batch.id)
    assert done.status == "completed" and done.completed_at and done.in_progress_at and done.finalizing_at
    assert done.request_counts is not None and (done.request_counts.total, done.request_counts.completed) == (4, 2)
    output = lines_of(alice, done.output_file_id)
    assert [line["custom_id"] for line in output] == ["one", "two"]  # in the file's order
    bodies = [line["response"]["body"] for line in output]
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in output)
    assert all(body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0 for body in bodies)
    assert done.usage is not None and done.usage.output_tokens == sum(b["usage"]["completion_tokens"] for b in bodies)
    assert done.usage.input_tokens == sum(body["usage"]["prompt_tokens"] for body in bodies)
    errors = lines_of(alice, done.error_file_id)
    assert [line["custom_id"] for line in errors] == [None, "three"]
    assert errors[0]["response"] is None and "Line 2 is not JSON" in errors[0]["error"]["message"]
    refused = errors[1]["response"]
    assert refused["status_code"] == 400 and refused["body"]["error"]["param"] == "max_tokens"
    listed = alice.files.list(purpose="batch_output")
    assert {done.output_file_id, done.error_file_id} <= {file.id for file in listed}
    assert done.id in {listed_batch.id for listed_batch in alice.batches.list()}


def test_a_file_of_many_chunks_is_downloaded_whole_as_it_is_read(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    data = jsonl(*(chat_line(f"l{n}-" + "x" * 4400) for n in range(100)))  # 0.9 MiB: four chunks in NATS
    assert len(data) > 3 * CHUNK_BYTES
    uploaded = alice.files.create(file=("big.jsonl", data), purpose="batch")
    try:
        url = f"{served.endpoint}/files/{uploaded.id}/content"
        with httpx.stream("GET", url, headers={"authorization": f"Bearer {KEYS['alice']}"}) as download:
            assert download.headers["transfer-encoding"] == "chunked"  # sent as read, not held whole first
            assert download.read() == data
    finally:
        alice.files.delete(uploaded.id)


@pytest.mark.parametrize(
    ("endpoint", "body", "answer"),
    [
        ("/v1/responses", {"model": MODEL, "input": "Say hi.", "max_output_tokens": 16}, "response"),
        ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8}, "text_completion"),
    ],
)
def test_a_batch_runs_on_the_responses_and_completions_apis(
    served: ServedGraph, endpoint: str, body: dict[str, Any], answer: str
) -> None:
    alice = openai_client(served, "alice")
    data = jsonl({"custom_id": "only", "method": "POST", "url": endpoint, "body": body})
    uploaded = alice.files.create(file=("in.jsonl", data), purpose="batch")
    done = ended(alice, alice.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h").id)
    (line,) = lines_of(alice, done.output_file_id)
    assert line["response"]["status_code"] == 200 and line["response"]["body"]["object"] == answer
    assert done.error_file_id is None and done.usage is not None and done.usage.output_tokens > 0


def test_files_and_batches_are_their_key_s_alone(served: ServedGraph) -> None:
    alice, bob = openai_client(served, "alice"), openai_client(served, "bob")
    uploaded = alice.files.create(file=("in.jsonl", jsonl(chat_line("mine"))), purpose="batch")
    batch = alice.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    refusals = [
        lambda: bob.files.retrieve(uploaded.id),
        lambda: bob.files.content(uploaded.id),
        lambda: bob.files.delete(uploaded.id),
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"),
    ]
    for refused in refusals:
        with pytest.raises(openai.NotFoundError) as error:
            refused()
        assert uploaded.id in error.value.message or batch.id in error.value.message
    assert uploaded.id not in {file.id for file in bob.files.list()}
    assert batch.id not in {listed.id for listed in bob.batches.list()}
    assert ended(alice, batch.id).status == "completed"  # bob's cancel did nothing
    assert alice.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(uploaded.id)


def test_an_upload_past_the_graph_s_limits_is_a_400_and_keeps_nothing(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    before = {file.id for file in alice.files.list()}
    too_long = jsonl(*(chat_line(f"l{n}") for n in range(BATCH_LINES + 1)))
    too_large = jsonl(chat_line("x" * (BATCH_FILE_MIB * 2**20)))
    uploads = [
        (lambda: alice.files.create(file=("in.jsonl", too_long), purpose="batch"), "too_many_requests_in_file"),
        (lambda: alice.files.create(file=("in.jsonl", too_large), purpose="batch"), "file_too_large"),
        (lambda: alice.files.create(file=("in.jsonl", b"\n\n"), purpose="batch"), None),
        (lambda: alice.files.create(file=("in.jsonl", jsonl(chat_line("a"))), purpose="fine-tune"), None),
        (lambda: alice.files.create(file=("n" * 600 + ".jsonl", jsonl(chat_line("a"))), purpose="batch"), None),
    ]
    for upload, code in uploads:
        with pytest.raises(openai.BadRequestError) as refused:
            upload()
        assert refused.value.code == code, refused.value.message
    plain = httpx.post(
        f"{served.endpoint}/files", json={"purpose": "batch"}, headers={"authorization": f"Bearer {KEYS['alice']}"}
    )
    assert plain.status_code == 400 and plain.json()["error"]["code"] == "invalid_multipart"
    assert {file.id for file in alice.files.list()} == before


def test_cancelling_an_ended_batch_changes_nothing_and_says_why(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl(chat_line("a"))), purpose="batch")
    done = ended(alice, alice.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h").id)
    with pytest.raises(openai.BadRequestError) as refused:
        alice.batches.cancel(done.id)
    assert "has status 'completed' and cannot be cancelled" in refused.value.message
    assert alice.batches.retrieve(done.id) == done


def test_cancelling_a_running_batch_stops_its_generations_and_ends_it_with_what_it_has(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    endless = {"max_tokens": ENDLESS["max_output_tokens"], **ENDLESS["extra_body"]}
    uploaded = alice.files.create(
        file=("in.jsonl", jsonl(*(chat_line(f"l{n}", **endless) for n in range(3)))), purpose="batch"
    )
    batch = alice.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    wait_for(lambda: alice.batches.retrieve(batch.id).status == "in_progress", 30, "the batch to start")
    before = served.frontend_gauges()["dynamo_frontend_output_tokens_total"]
    assert alice.batches.cancel(batch.id).status == "cancelling"
    done = ended(alice, batch.id, timeout_s=30)
    wait_for(lambda: served.frontend_gauges()["dynamo_frontend_inflight_requests"] == 0, 10, "the generations to stop")
    generated = served.frontend_gauges()["dynamo_frontend_output_tokens_total"] - before
    assert generated < 3 * ENDLESS["max_output_tokens"] / 2, generated
    assert done.status == "cancelled" and done.cancelling_at and done.cancelled_at and done.output_file_id is None
    errors = lines_of(alice, done.error_file_id)
    assert sorted(line["custom_id"] for line in errors) == ["l0", "l1", "l2"]
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert alice.batches.cancel(batch.id) == done  # a cancelled batch is answered as it is


def test_a_batch_past_its_window_ends_expired(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl(chat_line("late"))), purpose="batch")
    now = int(time.time())
    record = BatchRecord(
        id=new_batch_id(),
        owner="alice",
        endpoint=CHAT,
        input_file_id=uploaded.id,
        completion_window="24h",
        status="in_progress",
        created_at=now - 24 * 3600 - 5,
        expires_at=now - 5,  # made a day ago, and never taken up since
        counts=Counts(total=1),
    )
    asyncio.run(put_batch(nats_url(served), record))
    done = ended(alice, record.id)
    assert done.status == "expired" and done.expired_at
    (line,) = lines_of(alice, done.error_file_id)
    assert line["custom_id"] == "late" and line["error"]["code"] == "batch_expired"


def test_batch_requests_are_billed_to_their_key_but_kept_out_of_its_interactive_limits(served: ServedGraph) -> None:
    ken = openai_client(served, "ken")  # tokens_per_minute=60 (tests.support.graphs.KEY_LIMITS)
    data = jsonl(*(chat_line(f"l{n}", max_tokens=40) for n in range(4)))
    uploaded = ken.files.create(file=("in.jsonl", data), purpose="batch")
    done = ended(ken, ken.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h").id)
    assert done.request_counts is not None and done.request_counts.completed == 4
    assert done.usage is not None and done.usage.total_tokens > 60  # past the key's minute, in batch work alone
    answer = ken.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi."}], max_tokens=4)
    assert answer.usage is not None  # its interactive minute is untouched
    requests = gateway_samples(served, "dynamo_oss_gateway_requests")
    batch = [
        s.value
        for s in requests
        if s.name.endswith("_total") and s.labels == {"key": "ken", "api": "batch", "status": "200"}
    ]
    assert batch == [4]
