"""A background response as any gateway process of the graph sees it (GET, GET ?stream=true, POST .../cancel):
the record is the truth, and these bring it up to date, follow its events and cancel it, wherever it runs.

- Its record, read while it runs, is checked against the listing of the process running it (nats_plane.py):
  a process that no longer lists it (dead, or cut off from NATS for LAPSE_S) will never end it, so the reader
  ends it `failed` (server_error), conditionally on the revision it read, so a real end is never written over.
- Its events (kept when it was created with `stream: true`) are replayed after `starting_after` and followed
  until the event that ends it; a response another process ended has no such event in the log, and its
  follower ends with one made from the record.
- A cancel is asked of the process running it, which drops the frontend's connection (the generation
  stops) and writes `cancelled` itself; when nobody answers for it, the canceller writes `cancelled`, and a
  process that still ran it stops at its next write, which finds the record changed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.responses.background import STOPPED, BackgroundResponses
from dynamo_oss.gateway.responses.plane import Batch
from dynamo_oss.gateway.responses.store import StoredResponse, Versioned
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable
from dynamo_oss.gateway.responses.stream import terminal_event

log = logging.getLogger("dynamo_oss.gateway")

IDLE_S = 2.0  # a follower that has had no event this long reads the record again
CANCEL_WAIT_S = 10.0  # how long a cancel waits for the process running the response to stop it
ENDS = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


async def current(runner: BackgroundResponses, found: Versioned) -> StoredResponse:
    """The record as it stands: a running one whose process no longer runs it is ended failed first."""
    record = found.record
    if not record.running or record.background is None or record.id in runner.jobs:
        return record
    listing = await runner.runners.listing(record.background.process)
    if listing is not None and record.id in listing.responses:
        return record
    failed = ended(record, "failed", STOPPED)
    try:
        await runner.store.write(failed, found.revision)
    except Conflict:  # it changed meanwhile (ended by its process after all, or by another reader)
        again = await runner.store.read(record.id)
        return again.record if again is not None else failed
    log.warning(
        "background response %s: process %s no longer runs it; ended failed", record.id, record.background.process
    )
    return failed


def ended(record: StoredResponse, status: str, error: dict[str, Any] | None) -> StoredResponse:
    """`record` ended with `status` by a gateway that did not run it: its output as its last record had it."""
    return record.model_copy(update={"response": {**record.response, "status": status, "error": error}})


async def cancel(runner: BackgroundResponses, found: Versioned) -> dict[str, Any]:
    """Cancel a background response wherever it runs; an ended one is returned as it is (OpenAI's rule)."""
    record = found.record
    if record.background is None:
        raise ApiError(
            400,
            f"Cannot cancel a synchronous response: only responses created with background=true can be cancelled, "
            f"and '{record.id}' was not.",
        )
    if not record.running:
        return record.response
    process = record.background.process
    if process == runner.process:
        answer = await runner.cancel(record.id)
    else:
        reply = await runner.runners.ask(process, {"cancel": record.id}, CANCEL_WAIT_S)
        answer = reply.get("response") if reply else None
    if answer is not None:
        return answer
    while (again := await runner.store.read(record.id)) is not None:  # nobody stopped it: ended here
        if not again.record.running:
            return again.record.response
        cancelled = ended(again.record, "cancelled", None)
        try:
            await runner.store.write(cancelled, again.revision)
            return cancelled.response
        except Conflict:
            continue
    raise ApiError(404, f"Response '{record.id}' was deleted while it was being cancelled.", code="response_not_found")


async def follow(runner: BackgroundResponses, found: Versioned, after: int) -> AsyncIterator[bytes]:
    """The response's events numbered after `after`, replayed, then followed as they come until the one that
    ends it. NATS failing midway ends the stream with an `error` event: the client resumes from its last."""
    record, last, caught_up = found.record, after, False
    try:
        async for batch in runner.events.follow(record.id, IDLE_S):
            if batch is not None:
                events, last, over = _after(batch, last)
                if events:
                    yield events
                if over:
                    return
                caught_up = batch.pending == 0
                if record.running or not caught_up:
                    continue
            elif record.running:  # nothing new for IDLE_S: has it ended, or has its process gone?
                found = await runner.store.read(record.id) or found
                record = await current(runner, found)
                if record.running:
                    continue
            # Ended, and the log holds no more: the end is the record's (written by another gateway than the one
            # running it, or an event too large to keep), numbered as its own would have been.
            number = last + 1
            if record.background is not None and record.background.last_event is not None:
                number = max(number, record.background.last_event)
            if number > after:
                yield terminal_event(record.response, number)
            return
    except StoreUnavailable as error:  # numbered as the last event sent: a client resuming after it misses nothing
        message = f"{error}; resume from the last sequence_number received."
        error_event = {"type": "error", "code": "store_unavailable", "message": message, "param": None}
        yield b"event: error\ndata: " + orjson.dumps({**error_event, "sequence_number": max(last, 0)}) + b"\n\n"


def _after(batch: Batch, last: int) -> tuple[bytes, int, bool]:
    """The batch's events numbered after `last`, the last number sent, and whether the batch ends the stream."""
    count = batch.events.count(b"\n\n")
    end = batch.events.rfind(b"\n\n", 0, len(batch.events) - 2) + 2 if count > 1 else 0
    over = batch.events[end:].startswith(ENDS)
    if batch.first > last:
        return batch.events, batch.first + count - 1, over
    events = batch.events.split(b"\n\n")[:-1]
    kept = [event + b"\n\n" for number, event in enumerate(events, batch.first) if number > last]
    return b"".join(kept), max(last, batch.first + count - 1), over
