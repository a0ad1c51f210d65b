"""Background responses (`background: true`), run by the gateway process that accepted them: answered at once
(queued), then run to their end whoever still listens, their record moving queued -> in_progress ->
completed | incomplete | failed | cancelled.

Why the accepting process runs them, not a process of their own: it has already checked and rendered the
request, holds its admission (the key's share and the graph's capacity, held until the work ends) and
reaches Dynamo's frontends as every request does, through the same exchange with no client reading it
(routes.Detached); the work is the event-loop work of any streamed request. A process of its own would
need the request handed over, a queue, a supervisor and a size of its own, and would add nothing a death
takes away: a generation dies with whichever process holds its connection to the frontend. So the death of
the accepting process is made visible instead: it lists what it runs in the graph's NATS every
HEARTBEAT_S, the listing lapses LAPSE_S after the last one (nats_plane.py), and whoever reads a running
record whose process no longer lists it marks it failed (following.py).

The record is the truth, read by any gateway of the graph. Every write to it is conditional on the
revision its writer read (store.py), so an end is never written over: when the process running a response
finds its record changed by another (cancelled while it could not be asked, marked failed while it was cut
off from NATS, deleted), it stops the generation. A response created with `stream: true` also appends its
events to the graph's event log as they come, where any gateway replays and follows them; the terminal
event goes there before the record says the response has ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.harmony.completion import CompletionAnswer
from dynamo_oss.gateway.harmony.rendering import Prompt
from dynamo_oss.gateway.harmony.sealing import BoundSeal
from dynamo_oss.gateway.ids import ItemIds
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.responses.plane import EventLog, Listing, Runners
from dynamo_oss.gateway.responses.store import BackgroundRun, ResponseStore, StoredResponse
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable
from dynamo_oss.gateway.responses.stream import ResponseBuilder, terminal_event
from dynamo_oss.gateway.routes import EventStreamAnswer, Exchange, LocalAnswer

log = logging.getLogger("dynamo_oss.gateway")

HEARTBEAT_S = 2.0  # how often a process running background responses renews its listing
STOPPED = {
    "code": "server_error",
    "message": "The gateway process serving this background response stopped before it ended; create it again.",
}


class BackgroundAnswer(CompletionAnswer):
    """A background response's completion turned into events, whether or not its client streams: they are its
    stream, for whoever follows it, and its progress, for whoever reads its record."""

    builder: ResponseBuilder

    def __init__(self, request: ResponsesRequest, prompt: Prompt, seal: BoundSeal, ids: ItemIds) -> None:
        super().__init__(ResponseBuilder(request, prompt, seal, streaming=True, stored=True, ids=ids), streaming=True)


class BackgroundResponses:
    """The background responses this gateway process runs: their admission (at most `per_key` queued or
    running for one API key, over every process of the graph), their work, its listing, and the requests
    other processes send it to cancel one."""

    def __init__(self, store: ResponseStore, events: EventLog, runners: Runners, per_key: int) -> None:
        self.store, self.events, self.runners, self.per_key = store, events, runners, per_key
        self.process = f"p{os.getpid()}-{secrets.token_hex(6)}"  # this process, until it stops
        self.jobs: dict[str, Job] = {}
        self._listed = asyncio.Lock()
        self._starting = asyncio.Lock()
        self._beating: asyncio.Task | None = None
        self._unlisting: set[asyncio.Task] = set()

    async def create(self, record: StoredResponse, answer: BackgroundAnswer, key: str | None) -> Job:
        """A background response accepted: admitted, listed, its first events kept and its record queued, in
        that order, so that no gateway reads its record before the listing that says it runs. 429 past the
        key's bound; StoreUnavailable when the graph's NATS cannot take it."""
        await self._admit(key)
        job = Job(self, record, answer, key)
        self.jobs[record.id] = job
        try:
            await self._start()
            await self._list()
            await job.queue()
        except (StoreUnavailable, Conflict):
            self.jobs.pop(record.id, None)
            raise
        return job

    async def _admit(self, key: str | None) -> None:
        listings = await self.runners.listings()
        theirs = sum(
            sum(1 for owner in listing.responses.values() if owner == key)
            for process, listing in listings.items()
            if process != self.process
        )
        mine = sum(1 for job in self.jobs.values() if job.key == key)  # counted after the await, with no await
        if mine + theirs >= self.per_key:  # before the job joins them: two creates here never both pass
            raise ApiError(
                429,
                f"This API key has {mine + theirs} background responses queued or running, this graph's limit "
                f"(gateway.responses.max_background_per_key: {self.per_key}); create more once some have ended, "
                "or cancel some.",
                param="background",
                code="rate_limit_exceeded",
            )

    async def _start(self) -> None:
        """The first background response: requests to cancel are taken, and the listing renewed from now on."""
        async with self._starting:
            if self._beating is None:
                await self.runners.serve(self.process, self._asked)
                self._beating = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)  # the heartbeat's period, not a wait on anything
            try:
                await self._list()
            except StoreUnavailable as error:
                log.warning("could not renew this process's listing of background responses: %s", error)

    async def _list(self) -> None:
        """This process's listing written with every response it runs now (writes in turn, so the last one
        written is never older than one begun before it)."""
        async with self._listed:
            responses = {response_id: job.key for response_id, job in self.jobs.items()}
            await self.runners.list(
                self.process, Listing(host=socket.gethostname(), pid=os.getpid(), responses=responses)
            )

    def ended(self, job: Job) -> None:
        """`job` has ended (its end written, or taken over by another writer): no longer listed."""
        if self.jobs.get(job.record.id) is job:
            del self.jobs[job.record.id]
            task = asyncio.get_running_loop().create_task(self._unlisted())
            self._unlisting.add(task)
            task.add_done_callback(self._unlisting.discard)

    async def _unlisted(self) -> None:
        try:
            await self._list()
        except StoreUnavailable as error:  # the next heartbeat lists it without the ended job
            log.warning("could not renew this process's listing of background responses: %s", error)

    async def _asked(self, request: dict[str, Any]) -> dict[str, Any]:
        """Another gateway process asks: cancel a response this one runs. The answer is its response once its
        end is written (None when this process does not run it, or another writer ended it)."""
        job = self.jobs.get(str(request.get("cancel")))
        if job is None:
            return {"response": None}
        return {"response": await job.stop("cancelled", None)}

    async def cancel(self, response_id: str) -> dict[str, Any] | None:
        """Cancel a response this process runs (None: it runs no such response, or another writer ended it)."""
        job = self.jobs.get(response_id)
        return await job.stop("cancelled", None) if job is not None else None

    async def close(self) -> None:
        """The process is stopping: what it still runs ends failed, and it is seen dead at once."""
        await asyncio.gather(*(job.stop("failed", STOPPED) for job in list(self.jobs.values())))
        if self._beating is not None:
            self._beating.cancel()
            try:
                await self.runners.unlist(self.process)
            except StoreUnavailable:
                pass  # its listing lapses
        await self.runners.close()


class Job:
    """One background response at work (routes.Detached): its events to its local listeners (the stream of the
    client that created it) and, when kept, to the event log; its record's progress; its end."""

    def __init__(
        self, runner: BackgroundResponses, record: StoredResponse, transform: BackgroundAnswer, key: str | None
    ) -> None:
        self.runner, self.record, self.transform, self.key = runner, record, transform, key
        self.builder = transform.builder
        assert record.background is not None
        self.kept = record.background.events  # its events go to the log (it was created with stream: true)
        self.revision = 0  # the record's revision as this job last wrote it
        self.listeners: list[asyncio.Queue[bytes | None]] = []
        self.numbered = 0  # events made so far, each numbered in turn from 0
        self.unlogged: list[tuple[int, bytes]] = []  # events not yet appended to the log, with their first number
        self.logging: asyncio.Task | None = None
        self.wanted: StoredResponse | None = None  # the record to write next
        self.writing: asyncio.Task | None = None
        self.items = 0  # output items finished in the last record written
        self.exchange: Exchange | None = None
        self.stopping: tuple[str, dict[str, Any] | None] | None = None  # cancelled or failed, from outside
        self.taken_over = False  # another writer ended its record
        self.over = asyncio.Event()
        self.final: dict[str, Any] | None = None  # the response as its end was written
        self.queued = b""  # its first events, which the client that created it streams first

    async def queue(self) -> None:
        """Its first events (created and queued) made and kept, then its record written, queued."""
        self.queued = self.builder.queue()
        self._emit(self.queued)
        await self._logged()
        self.revision = await self.runner.store.write(self.record, 0)

    # routes.Detached
    def answer(self) -> LocalAnswer:
        if not self.builder.request.stream:
            return 200, self.record.response
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        queue.put_nowait(self.queued)
        self.listeners.append(queue)
        return EventStreamAnswer(self._listened(queue))

    def output(self, data: bytes, last: bool) -> None:
        if data:
            self._emit(data)
        builder = self.builder
        if self.revision and not self.taken_over and builder.final is None:
            began = builder.item is not None or builder.finished_items > 0
            if self.record.response.get("status") == "queued" and began:
                self._write(self._with(builder.snapshot()))  # in progress: its output has begun
            elif builder.finished_items > self.items:
                self.items = builder.finished_items
                self._write(self._with(builder.snapshot()))  # an item finished: readers see it at once

    async def run(self, exchange: Exchange) -> None:
        self.exchange = exchange
        failure: dict[str, Any] | None = None
        try:
            if self.stopping is None:
                await exchange.forward()
        except (OSError, TimeoutError) as error:  # the frontend is restarting or gone, as for a client's request
            if self.stopping is None:
                message = f"Dynamo's frontend was unavailable ({error or type(error).__name__}); create it again."
                failure = {"code": "server_error", "message": message}
        except Exception:  # noqa: BLE001 - a bug: the response ends failed, the log gets the traceback
            log.exception("background response %s failed", self.record.id)
            failure = {"code": "server_error", "message": "The gateway failed on this response."}
        await self._end(failure)

    async def _end(self, failure: dict[str, Any] | None) -> None:
        builder, transform = self.builder, self.transform
        try:
            if self.taken_over:
                await self._told_the_end()
                return
            if self.stopping is not None and builder.final is None:
                self._emit(builder.stop(*self.stopping))
            elif failure is not None or self.exchange is not None and self.exchange.error is not None:
                error = failure or _error_of(self.exchange.error if self.exchange else None)
                self._emit(builder.stop("failed", error))
            elif transform.failed or builder.final is None:  # a worker failed mid-answer, or the frontend went away
                self._emit(builder.stop("failed", {"code": "server_error", "message": _cut(transform)}))
            assert builder.final is not None
            await self._logged()
            background = BackgroundRun(process=self.runner.process, events=self.kept, last_event=self.numbered - 1)
            self.final = builder.final
            self._write(self.record.model_copy(update={"response": builder.final, "background": background}))
            await self._written()
        except (StoreUnavailable, Conflict) as error:  # its listing lapses without it: readers mark it failed
            log.warning("background response %s: its end could not be written: %s", self.record.id, error)
        finally:
            for listener in self.listeners:
                listener.put_nowait(None)
            self.over.set()
            self.runner.ended(self)

    async def _told_the_end(self) -> None:
        """Another writer ended it: the client streaming it from here gets that end as its last event."""
        try:
            found = await self.runner.store.read(self.record.id)
        except StoreUnavailable:
            return
        if found is not None and not found.record.running:
            for listener in self.listeners:
                listener.put_nowait(terminal_event(found.record.response, self.numbered))

    async def stop(self, status: str, error: dict[str, Any] | None) -> dict[str, Any] | None:
        """End it now (`cancelled`, or `failed` with `error`): the generation stops as a client that leaves
        stops it. Its response once its end is written (None if another writer ended it)."""
        if self.stopping is None and not self.over.is_set() and self.builder.final is None:
            self.stopping = (status, error)
            if self.exchange is not None:
                self.exchange.leave()
        await self.over.wait()
        return self.final if not self.taken_over else None

    # events
    def _emit(self, events: bytes) -> None:
        for listener in self.listeners:
            listener.put_nowait(events)
        if self.kept:
            self.unlogged.append((self.numbered, events))
            if self.logging is None or self.logging.done():
                self.logging = asyncio.get_running_loop().create_task(self._log())
        self.numbered += events.count(b"\n\n")

    async def _log(self) -> None:
        """The events made since the last append, appended in one: one append at a time, in order."""
        while self.unlogged:
            first, events = self.unlogged[0][0], b"".join(piece for _, piece in self.unlogged)
            self.unlogged = []
            try:
                await self.runner.events.append(self.record.id, first, events)
            except StoreUnavailable as error:  # a follower misses them; the record still has the response
                log.warning("background response %s: events %d on were not kept: %s", self.record.id, first, error)

    async def _logged(self) -> None:
        while self.logging is not None and not self.logging.done():
            await self.logging

    async def _listened(self, queue: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
        try:
            while (events := await queue.get()) is not None:
                yield events
        finally:
            self.listeners.remove(queue)

    # the record
    def _with(self, response: dict[str, Any]) -> StoredResponse:
        return self.record.model_copy(update={"response": response})

    def _write(self, record: StoredResponse) -> None:
        """Write `record` next, after the write under way: only the latest one wanted is written."""
        self.record, self.wanted = record, record
        if self.writing is None or self.writing.done():
            self.writing = asyncio.get_running_loop().create_task(self._writes())

    async def _writes(self) -> None:
        while self.wanted is not None and not self.taken_over:
            record, self.wanted = self.wanted, None
            try:
                self.revision = await self.runner.store.write(record, self.revision)
            except Conflict:  # another writer ended it: cancelled elsewhere, marked failed, or deleted
                log.info("background response %s was ended elsewhere: its generation stops", record.id)
                self.taken_over = True
                if self.exchange is not None:
                    self.exchange.leave()
            except StoreUnavailable as error:
                if record.running:  # the next progress write, or the end, says more
                    log.warning("background response %s: progress not written: %s", record.id, error)
                else:
                    raise

    async def _written(self) -> None:
        while self.writing is not None and not self.writing.done():
            await self.writing
        if self.taken_over:
            raise Conflict(f"response {self.record.id} was ended elsewhere")


def _error_of(body: dict[str, Any] | None) -> dict[str, Any]:
    """An error answer from the frontend, as a Response's `error`."""
    error = (body or {}).get("error") or {}
    message = error.get("message") if isinstance(error, dict) else None
    return {"code": "server_error", "message": message or "The graph could not serve this response."}


def _cut(transform: BackgroundAnswer) -> str:
    if transform.failed:
        return "A worker failed while generating this response; create it again."
    return "Dynamo's frontend stopped while generating this response; create it again."
