"""The Batch API's stores (dynamo_oss.gateway.batches.store, files.store) in one process, for tests of the runner's
logic without NATS, and line exchanges the test answers by hand: each waits until the test says what it was
answered with, or is left."""

from __future__ import annotations

import asyncio

from dynamo_oss.gateway.batches.records import BatchRecord, TokenUsage, Versioned
from dynamo_oss.gateway.batches.runner import Sent
from dynamo_oss.gateway.batches.store import Answer
from dynamo_oss.gateway.files.store import StoredFile
from dynamo_oss.gateway.stores import Conflict


class MemoryBatchStore:
    """batches.store.BatchStore in memory; `writes` counts every write, for a test to wait on."""

    retention_s = 3600

    def __init__(self) -> None:
        self.records: dict[str, tuple[BatchRecord, int]] = {}
        self.kept: dict[str, list[Answer]] = {}
        self.revision = 0

    async def create(self, record: BatchRecord) -> int:
        self.revision += 1
        self.records[record.id] = (record, self.revision)
        return self.revision

    async def read(self, owner: str | None, batch_id: str) -> Versioned | None:
        found = self.records.get(batch_id)
        return Versioned(*found) if found is not None and found[0].owner == owner else None

    async def write(self, record: BatchRecord, revision: int) -> int:
        if self.records.get(record.id, (None, 0))[1] != revision:
            raise Conflict(f"batch {record.id} changed since revision {revision}")
        return await self.create(record)

    async def owned(self, owner: str | None) -> list[BatchRecord]:
        return [record for record, _ in self.records.values() if record.owner == owner]

    async def unended(self) -> list[tuple[str | None, str]]:
        return [(record.owner, record.id) for record, _ in self.records.values() if not record.ended]

    async def keep_answer(self, batch_id: str, answer: Answer) -> None:
        self.kept.setdefault(batch_id, []).append(answer)

    async def answers(self, batch_id: str) -> list[Answer]:
        return list(self.kept.get(batch_id, []))

    async def drop_answers(self, batch_id: str) -> None:
        self.kept.pop(batch_id, None)

    def now(self, batch_id: str) -> BatchRecord:
        return self.records[batch_id][0]


class MemoryFileStore:
    """files.store.FileStore in memory."""

    retention_s = 3600

    def __init__(self) -> None:
        self.files: dict[str, tuple[StoredFile, bytes]] = {}

    async def put(self, record: StoredFile, data: bytes) -> None:
        self.files[record.id] = (record, data)

    async def info(self, owner: str | None, file_id: str) -> StoredFile | None:
        found = self.files.get(file_id)
        return found[0] if found is not None and found[0].owner == owner else None

    async def content(self, owner: str | None, file_id: str) -> bytes | None:
        found = self.files.get(file_id)
        return found[1] if found is not None and found[0].owner == owner else None

    async def owned(self, owner: str | None) -> list[StoredFile]:
        return [record for record, _ in self.files.values() if record.owner == owner]

    async def delete(self, owner: str | None, file_id: str) -> bool:
        if await self.info(owner, file_id) is None:
            return False
        del self.files[file_id]
        return True


class HandAnswered:
    """A line's exchange the test answers (`answer_with`) or that the runner leaves."""

    def __init__(self, lines: Lines, body: bytes) -> None:
        self.lines, self.body = lines, body
        self.answered: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
        self.was_left = False

    async def answer(self) -> Sent:
        return await self.answered

    def leave(self) -> None:
        self.was_left = True
        if not self.answered.done():
            self.answered.set_result(Sent(0, {}, TokenUsage(), retryable=False, left=True))

    def answer_with(self, status: int = 200, retryable: bool = False) -> None:
        usage = TokenUsage(input_tokens=10, output_tokens=5) if status == 200 else TokenUsage()
        body = {"echo": self.body.decode()} if status == 200 else {"error": {"message": "no"}}
        self.answered.set_result(Sent(status, body, usage, retryable=retryable))


class Lines:
    """The runner's line sender (runner.LineSender) for tests: every exchange made, in order."""

    def __init__(self) -> None:
        self.sent: list[HandAnswered] = []

    def __call__(self, owner: str | None, endpoint: str, body: bytes) -> HandAnswered:
        exchange = HandAnswered(self, body)
        self.sent.append(exchange)
        return exchange

    def waiting(self) -> list[HandAnswered]:
        return [line for line in self.sent if not line.answered.done()]
