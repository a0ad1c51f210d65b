"""Where batches are kept: their records (records.py), the batches not yet ended (what a runner looks for
work in), and each batch's answers as its lines end, which its output and error files are written from.

The answers are kept line by line as they come, not in the runner's memory, so a batch taken up by another
process after its runner died goes on from the lines already answered. The store behind the interface is the
graph's NATS (nats_batches.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NamedTuple, Protocol

from dynamo_oss.gateway.batches.records import BatchRecord, TokenUsage, Versioned


class Answer(NamedTuple):
    """One line's answer: its place in the input file, whether it ended in an error, its output line, and what
    it used."""

    line: int
    failed: bool
    data: bytes  # one JSON line of the output (or error) file, without its newline
    usage: TokenUsage = TokenUsage()


class BatchStore(Protocol):
    """Every method raises StoreUnavailable when the store cannot answer."""

    retention_s: int

    async def create(self, record: BatchRecord) -> int:
        """Keep a new batch, among those not yet ended; its revision."""
        ...

    async def read(self, owner: str | None, batch_id: str) -> Versioned | None:
        """The owner's batch by that id and its revision (None: never made, past retention, or another key's)."""
        ...

    async def write(self, record: BatchRecord, revision: int) -> int:
        """Store `record` if it is still at `revision`, and return the new revision; Conflict if it has changed.
        A record that has ended leaves the batches not yet ended."""
        ...

    async def owned(self, owner: str | None) -> list[BatchRecord]:
        """Every batch the owner keeps, oldest first."""
        ...

    async def unended(self) -> list[tuple[str | None, str]]:
        """The batches not yet ended, of every owner: (owner, id) each, for a runner to read."""
        ...

    async def keep_answer(self, batch_id: str, answer: Answer) -> None: ...

    def answers(self, batch_id: str) -> AsyncIterator[Answer]:
        """The batch's answers kept so far, in the order they came (a line answered twice: both), read as the
        caller takes them (a batch's answers may be more than a process should hold)."""
        ...

    async def drop_answers(self, batch_id: str) -> None:
        """The batch's answers are in its files now."""
        ...
