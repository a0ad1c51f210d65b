"""The batch runner of one gateway process: it takes up batches no live process runs, sends their lines as
the pacer (pacing.py) lets it, keeps each answer as it comes, and writes the output and error files at the end.

Why the gateway's own processes run batches, not a process of their own: a line is a request like any other
and must be checked, rendered, billed to its key and sent to Dynamo's frontends exactly as a client's would
be, and the gateway's processes already do that, with the graph's capacity and each process's latency at
hand. Any of them may run any batch, since files, batches and answers are all in the graph's NATS: the runner
that takes a batch up holds a lease in its record and renews it with its progress every RENEW_S; a runner
that dies (or is cut off from NATS) stops renewing, and once LEASE_S has passed another process takes the
batch up and sends only the lines whose answers were kept. A line in flight when its runner died is sent
again: a line is answered at least once, and the answer kept first is the one its file holds.

A batch's record says what to do: a cancel written by any gateway (`cancelling`) is seen at the next renewal,
its lines in flight are left (which stops their generations) and the batch ends `cancelled` with the answers
it has; past its window (`expires_at`) a batch ends `expired` the same way. Every line of a batch that has
ended is in one of its files: answered, or with the reason it was not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from dynamo_oss.gateway.batches.lines import UNSENDABLE, Line, answered_line, read_lines, unsent_line
from dynamo_oss.gateway.batches.pacing import Pacer
from dynamo_oss.gateway.batches.records import BatchRecord, Counts, Lease, Status, TokenUsage, output_file_id
from dynamo_oss.gateway.batches.store import Answer, BatchStore
from dynamo_oss.gateway.errors import openai_error
from dynamo_oss.gateway.fair_share import Ticket
from dynamo_oss.gateway.files.store import OFF_LOOP_BYTES, FileStore, StoredFile, StoreFull
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable

log = logging.getLogger("dynamo_oss.gateway.batches")

CLAIM_S = 2.0  # how often a runner looks for batches no live process runs
RENEW_S = 2.0  # how often a running batch's lease is renewed, with its progress
LEASE_S = 10.0  # a lease not renewed for this long has lapsed: another process may take the batch up
MAX_RUNS = 8  # batches one process runs at once, taken in turn by owner; their lines share its pacer
RETRIES = 3  # a line whose answer was retryable (the graph had no worker, a frontend was away) is sent again
RETRY_S = 2.0  # after this long, then twice as long, ...
KEEP_RETRY_S = 1.0  # an answer the graph's NATS could not keep is kept again after this long, then longer
FAILURES = 3  # a batch the runner failed on this often (a bug) ends failed, not taken up for ever
REST_S = 30.0  # after such a failure, the batch is left this long before it is taken up again
UNSENT = {  # why a line was never answered, by how its batch ended
    "cancelled": "The batch was cancelled before this request was answered.",
    "expired": "The batch's completion window ended before this request was answered.",
    "failed": "The batch failed before this request was answered.",
    "completed": "The gateway did not answer this request.",
}


class Sent(NamedTuple):
    """What a line's request was answered with: its status and body, what it used, whether to send it again,
    and whether it was left before its answer was whole (`LineExchange.leave`)."""

    status: int
    body: dict[str, Any]
    usage: TokenUsage
    retryable: bool
    left: bool = False


class LineExchange(Protocol):
    """One line's request to the graph (sending.py): sent with `answer`, stopped with `leave`."""

    async def answer(self) -> Sent: ...

    def leave(self) -> None: ...


LineSender = Callable[[str | None, str, bytes], LineExchange]  # (owner, endpoint, body) -> the line's exchange


class BatchRunner:
    """This process's batches (see the module docstring)."""

    def __init__(self, store: BatchStore, files: FileStore, send: LineSender, pacer: Pacer) -> None:
        self.store, self.files, self.send, self.pacer = store, files, send, pacer
        self.process = f"p{os.getpid()}-{secrets.token_hex(6)}"
        self.runs: dict[str, Run] = {}
        self.failures: dict[str, int] = {}  # batches this process failed on (a bug), and how often
        self.resting: dict[str, float] = {}  # such a batch, and when it may be taken up again (monotonic)
        self._claiming: asyncio.Task | None = None
        self._unreachable = False

    def start(self) -> None:
        if self._claiming is None:
            self.pacer.start()
            self._claiming = asyncio.get_running_loop().create_task(self._claim_for_ever())

    async def _claim_for_ever(self) -> None:
        while True:
            try:
                await self.claim()
                if self._unreachable:
                    log.info("batches: the graph's NATS answers again")
                self._unreachable = False
            except StoreUnavailable as error:
                if not self._unreachable:
                    log.warning("batches: cannot look for work: %s", error)
                self._unreachable = True
            await asyncio.sleep(CLAIM_S)  # the runner's period, not a wait on anything

    async def claim(self) -> None:
        """Take up the batches no live process runs, up to MAX_RUNS at once, each owner's in turn."""
        if len(self.runs) >= MAX_RUNS:
            return
        now = time.monotonic()
        for owner, batch_id in in_turn_by_owner(await self.store.unended()):
            if len(self.runs) >= MAX_RUNS:
                return
            if batch_id in self.runs or self.resting.get(batch_id, 0) > now:
                continue
            versioned = await self.store.read(owner, batch_id)
            if versioned is None or versioned.record.ended or versioned.record.leased_to_another(self.process):
                continue
            claimed = versioned.record.model_copy(update={"lease": self.lease()})
            try:
                revision = await self.store.write(claimed, versioned.revision)
            except Conflict:
                continue  # another process took it up first
            run = Run(self, claimed, revision)
            self.runs[batch_id] = run
            run.task = asyncio.get_running_loop().create_task(run.run())
            run.task.add_done_callback(lambda _, batch_id=batch_id: self.runs.pop(batch_id, None))

    def lease(self) -> Lease:
        """A lease of this process's, from now."""
        return Lease(process=self.process, until=time.time() + LEASE_S)

    def failed_on(self, batch_id: str) -> int:
        """A bug stopped a batch here: it rests before it is taken up again. How often it has happened."""
        self.failures[batch_id] = self.failures.get(batch_id, 0) + 1
        self.resting[batch_id] = time.monotonic() + REST_S
        return self.failures[batch_id]

    def wind_down(self) -> None:
        """The process is draining: no batch is taken up and no line sent from now on, and those in flight may
        finish (and be kept) before `close` lets the batches go."""
        if self._claiming is not None:
            self._claiming.cancel()
        for run in self.runs.values():
            run.winding_down.set()

    @property
    def in_flight(self) -> int:
        """This process's batch requests under way."""
        return self.pacer.in_flight

    async def close(self) -> None:
        """The process is stopping: its batches are let go at once, for another process to take up."""
        if self._claiming is not None:
            self._claiming.cancel()
        await asyncio.gather(*(run.let_go() for run in list(self.runs.values())))
        await self.pacer.close()


def in_turn_by_owner(batches: list[tuple[str | None, str]]) -> list[tuple[str | None, str]]:
    """The batches with their owners taken in turn (each owner's first, then each one's second, ...): one key's
    many batches do not hold a runner's places while another key's wait."""
    queues: dict[str | None, list[tuple[str | None, str]]] = {}
    for batch in batches:
        queues.setdefault(batch[0], []).append(batch)
    ordered = []
    while queues:
        for owner in list(queues):
            ordered.append(queues[owner].pop(0))
            if not queues[owner]:
                del queues[owner]
    return ordered


class Run:
    """One batch at work in this process."""

    def __init__(self, runner: BatchRunner, record: BatchRecord, revision: int) -> None:
        self.runner, self.record, self.revision = runner, record, revision
        self.answered: dict[int, Answer] = {}  # each line's first answer, kept
        self.lines: list[Line] = []
        self.sending: set[LineExchange] = set()
        self.tasks: set[asyncio.Task] = set()
        self.stop: Status | None = None  # cancelled or expired: no more lines are sent
        self.letting_go = False  # the process is stopping: the batch is left for another
        self.lost = False  # another writer took the batch (its lease lapsed while this process was away)
        self.halted = asyncio.Event()  # no more lines are sent: cancelled, expired, let go, or lost
        self.winding_down = asyncio.Event()  # the process drains: no more lines are sent, those in flight finish
        self.over = asyncio.Event()
        self.task: asyncio.Task | None = None
        self._writes = asyncio.Lock()  # one write of the record at a time, each on the revision the last left

    async def run(self) -> None:
        renewing = asyncio.get_running_loop().create_task(self._renew_for_ever())
        try:
            await self._work()
        except StoreUnavailable as error:  # the lease lapses: another process (or this one) takes it up again
            log.warning(
                "batch %s: the graph's NATS is away (%s); it is taken up again once back", self.record.id, error
            )
        except Exception:  # a bug: the log gets the traceback; the batch rests, and fails once it has too often
            failures = self.runner.failed_on(self.record.id)
            log.exception("batch %s: the gateway failed on it (%d of %d times)", self.record.id, failures, FAILURES)
            if failures >= FAILURES:
                await self._give_up(failures)
        finally:
            renewing.cancel()
            self._leave_lines()
            self.over.set()

    async def _work(self) -> None:
        record, store = self.record, self.runner.store
        for answer in await store.answers(record.id):
            self.answered.setdefault(answer.line, answer)
        data = await self.runner.files.content(record.owner, record.input_file_id)
        if data is None:
            message = f"Input file {record.input_file_id} is no longer kept."
            error = {"code": "invalid_file", "message": message, "param": "input_file_id", "line": None}
            return await self._end("failed", [error])
        heavy = len(data) > OFF_LOOP_BYTES
        endpoint = record.endpoint
        self.lines = await asyncio.to_thread(read_lines, data, endpoint) if heavy else read_lines(data, endpoint)
        if record.status == "cancelling":
            return await self._end("cancelled")
        if self._stopped():
            return await self._end(self.stop or "expired")
        if record.status == "validating" and not await self._started():
            return
        for line in self.lines:
            if line.error is not None and line.number not in self.answered:
                await self._keep(unsent_line(line, UNSENDABLE, line.error))
        for line in self.lines:
            if self._stopped():
                break
            if line.body is None or line.number in self.answered:
                continue
            ticket = await self._admitted()
            if ticket is None:
                break
            task = asyncio.get_running_loop().create_task(self._send(line, ticket))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        while self.tasks:
            await asyncio.wait(set(self.tasks))
        unsent = any(line.body is not None and line.number not in self.answered for line in self.lines)
        if not (self.letting_go or self.lost or self.winding_down.is_set() and unsent and not self.stop):
            await self._end(self.stop or "completed")

    async def _started(self) -> bool:
        """The batch moved to in_progress; False when a cancel came first (the batch is then ended) or another
        process took it."""
        try:
            await self._update(lambda record: record.moved("in_progress", counts=self._counts()))
            return True
        except Conflict:
            if self.record.status == "cancelling" and not self.lost:
                await self._end("cancelled")
            return False

    def _stopped(self) -> bool:
        """No more lines are to be sent (halted, or the process drains)."""
        if self.stop is None and time.time() > self.record.expires_at:
            self._halt("expired", "its completion window has ended")
        return self.halted.is_set() or self.winding_down.is_set()

    def _halt(self, status: Status | None, why: str) -> None:
        """No more lines are sent, and those in flight are left (which stops their generations); `status` is
        how the batch ends (None: it does not end here)."""
        if not self.halted.is_set():
            log.info("batch %s: %s; its lines in flight are left", self.record.id, why)
        self.stop = self.stop or status
        self.halted.set()
        self._leave_lines()

    async def _halted_within(self, seconds: float) -> bool:
        """Wait `seconds`, or less when the batch is halted first (True then)."""
        try:
            await asyncio.wait_for(self.halted.wait(), seconds)
            return True
        except TimeoutError:
            return False

    async def _admitted(self) -> Ticket | None:
        """Room for the next line (pacing.py), or None once the batch is halted (or its process drains) first."""
        waiting = asyncio.ensure_future(self.runner.pacer.admitted())
        stops = [asyncio.ensure_future(self.halted.wait()), asyncio.ensure_future(self.winding_down.wait())]
        try:
            await asyncio.wait((waiting, *stops), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for stop in stops:
                stop.cancel()
            if not waiting.done():
                waiting.cancel()
                await asyncio.wait((waiting,))
        ticket = waiting.result() if waiting.done() and not waiting.cancelled() else None
        if ticket is not None and self._stopped():
            self.runner.pacer.done(ticket)
            return None
        return ticket

    async def _send(self, line: Line, ticket: Ticket | None) -> None:
        """One line's request, sent again while its answer says to (its place in the graph given back while it
        waits), and its answer kept."""
        try:
            for attempt in range(RETRIES + 1):
                sent = await self._exchange(line)
                if sent.left or sent.retryable and self._stopped():
                    return  # the batch stopped: the line is answered by whoever ends it
                if not sent.retryable or attempt == RETRIES:
                    break
                if ticket is not None:
                    self.runner.pacer.done(ticket)
                    ticket = None
                if await self._halted_within(RETRY_S * 2**attempt) or (ticket := await self._admitted()) is None:
                    return
            await self._keep(answered_line(line, sent.status, sent.body, sent.usage))
        finally:
            if ticket is not None:
                self.runner.pacer.done(ticket)

    async def _exchange(self, line: Line) -> Sent:
        """The line's request sent once; a bug on the way is the line's 500, never the batch's end."""
        assert line.body is not None
        exchange = self.runner.send(self.record.owner, self.record.endpoint, line.body)
        self.sending.add(exchange)
        try:
            return await exchange.answer()
        except Exception:  # noqa: BLE001 - a bug: the log gets the traceback, the line its error
            log.exception("batch %s: the gateway failed on line %d", self.record.id, line.number + 1)
            body = openai_error(500, "The gateway failed on this request.")
            return Sent(500, body, TokenUsage(), retryable=False)
        finally:
            self.sending.discard(exchange)

    async def _keep(self, answer: Answer) -> None:
        """The answer is the line's (in this process at once, for the batch's files) and kept in the graph's
        NATS, tried again while NATS is away, so another process taking the batch up does not send it again."""
        self.answered.setdefault(answer.line, answer)
        delay = KEEP_RETRY_S
        while True:
            try:
                return await self.runner.store.keep_answer(self.record.id, answer)
            except StoreUnavailable as error:
                log.warning("batch %s: line %d's answer not kept yet: %s", self.record.id, answer.line + 1, error)
            if await self._halted_within(delay):
                return
            delay = min(delay * 2, LEASE_S)

    def _counts(self) -> Counts:
        failed = sum(1 for answer in self.answered.values() if answer.failed)
        return Counts(total=len(self.lines), completed=len(self.answered) - failed, failed=failed)

    def _usage(self) -> TokenUsage:
        usage = TokenUsage()
        for answer in self.answered.values():
            usage = usage.plus(answer.usage)
        return usage

    # the record
    async def _renew_for_ever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)  # the lease's period, not a wait on anything
            self._stopped()  # past its window, it ends now, not once a line may start
            try:
                await self._renew()
            except StoreUnavailable as error:
                log.warning("batch %s: its lease could not be renewed: %s", self.record.id, error)

    async def _renew(self) -> None:
        """The lease renewed with the batch's progress. A record another writer changed is read back: a cancel
        stops the batch; an end, or a lease another process took, means this process lost it."""
        progress = {"counts": self._counts(), "usage": self._usage()}
        try:
            await self._update(lambda record: record.model_copy(update={"lease": self.runner.lease(), **progress}))
            return
        except Conflict:
            pass
        if self.lost:
            self._halt(None, "it was ended or taken up elsewhere")
        elif self.record.status == "cancelling":
            self._halt("cancelled", "it is cancelled")

    async def _update(self, change: Callable[[BatchRecord], BatchRecord], over_others: bool = False) -> None:
        """The record changed by `change` and written, one write at a time (none once it has ended). A record
        another writer changed since is read back (Conflict raised, or with `over_others`, changed again and
        written over theirs), and `lost` set when it has ended or another process holds its lease."""
        async with self._writes:
            while not self.record.ended:
                record = change(self.record)
                try:
                    self.revision = await self.runner.store.write(record, self.revision)
                    self.record = record
                    return
                except Conflict:
                    versioned = await self.runner.store.read(self.record.owner, self.record.id)
                    if (
                        versioned is None
                        or versioned.record.ended
                        or versioned.record.leased_to_another(self.runner.process)
                    ):
                        self.lost = True
                        raise
                    self.record, self.revision = versioned.record, versioned.revision
                    if not over_others:
                        raise

    async def _end(self, status: Status, errors: list[dict[str, Any]] | None = None) -> None:
        """The batch's files written from its answers, then its end (`status`, written over a cancel that came
        meanwhile: a batch being finalized is not stopped). Lines not answered go to the error file, with why."""
        if status == "completed":
            await self._update(lambda record: record.moved("finalizing"), over_others=True)
        for line in self.lines:
            if line.number not in self.answered:
                code = f"batch_{status}" if status != "completed" else "not_answered"
                await self._keep(unsent_line(line, code, UNSENT[status]))
        files, record = self.runner.files, self.record
        kept: dict[str, Any] = {"errors": errors} if errors else {}
        try:
            for kind, data in zip(("output", "error"), self._files(), strict=True):
                if data:
                    file_id = output_file_id(record.id, kind)  # the same on a second try: never a second file
                    name = f"{record.id}_{kind}.jsonl"
                    await files.put(
                        StoredFile.made(record.owner, "batch_output", name, data, files.retention_s, file_id), data
                    )
                    kept[f"{kind}_file_id"] = file_id
        except StoreFull as error:  # its answers cannot be written out: it fails, saying so
            message = f"Its output could not be kept: {error}; delete files no longer needed and run it again."
            status, kept = (
                "failed",
                {**kept, "errors": [*(errors or []), {"code": "file_storage_full", "message": message}]},
            )
        ended = {"counts": self._counts(), "usage": self._usage(), "lease": None, **kept}
        await self._update(lambda record: record.moved(status, **ended), over_others=True)
        await self.runner.store.drop_answers(record.id)
        counts = self.record.counts
        log.info("batch %s %s: %d answered, %d failed", record.id, status, counts.completed, counts.failed)

    async def _give_up(self, failures: int) -> None:
        """The gateway failed on the batch `failures` times: it ends failed, with the answers it has."""
        message = f"The gateway failed on this batch {failures} times; its log says why. Create it again."
        try:
            await self._end("failed", [{"code": "server_error", "message": message}])
        except Exception:  # noqa: BLE001 - a bug again: the batch rests and is tried again later
            log.exception("batch %s: could not be ended failed", self.record.id)

    def _files(self) -> tuple[bytes, bytes]:
        """The output and error files' bytes, each answer in its line's place."""
        ordered = [self.answered[number] for number in sorted(self.answered)]
        output = b"".join(answer.data + b"\n" for answer in ordered if not answer.failed)
        errors = b"".join(answer.data + b"\n" for answer in ordered if answer.failed)
        return output, errors

    async def let_go(self) -> None:
        """The process is stopping: its lines are left and its lease given up, so another process takes it up."""
        self.letting_go = True
        self._halt(None, "this gateway process is stopping")
        await self.over.wait()
        if self.lost or self.record.ended:
            return
        try:
            await self._update(lambda record: record.model_copy(update={"lease": None}))
        except (Conflict, StoreUnavailable):
            pass  # its lease lapses

    def _leave_lines(self) -> None:
        for exchange in list(self.sending):
            exchange.leave()
