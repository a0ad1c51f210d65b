"""A batch as kept: OpenAI's Batch object, its owner, who runs it, and how far it has come.

The record is the truth about a batch, read by any gateway of the graph: every write to it is conditional on
the revision its writer read, so a cancel written by one gateway is never lost under the progress another
writes, and an end is never written over. The gateway process running a batch holds a lease in the record,
which it renews as it writes its progress; a batch whose lease has lapsed (its process died, or was cut off
from NATS) is taken up by another process, which runs the lines not yet answered.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.gateway.protocol.batches import Endpoint

BATCH_ID_PATTERN = r"^batch_[0-9a-f]{32}$"
BATCH_ID = re.compile(BATCH_ID_PATTERN)
Status = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]
ENDED = frozenset({"failed", "completed", "expired", "cancelled"})
WINDOW_S = {"24h": 24 * 3600}  # the completion windows OpenAI's API takes


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(16)}"


def output_file_id(batch_id: str, kind: str) -> str:
    """The id of a batch's `kind` file (output, error): the same every time, so a batch finalized twice (its
    runner cut off between its files and its record) writes its files over, never beside, the first ones."""
    return "file-" + hashlib.sha256(f"{batch_id}:{kind}".encode()).hexdigest()[:32]


class Lease(BaseModel):
    """Which gateway process runs the batch, until when (Unix time) unless it renews."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process: str
    until: float


class Counts(BaseModel):
    """The batch's requests: all of them, those answered, those that ended in an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total: int = 0
    completed: int = 0
    failed: int = 0


class TokenUsage(BaseModel):
    """What the batch's answers used, summed (the `usage` of OpenAI's Batch object)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def plus(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(**{field: getattr(self, field) + getattr(other, field) for field in TokenUsage.model_fields})

    def openai(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


class BatchRecord(BaseModel):
    """One batch as kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=BATCH_ID_PATTERN)
    owner: str | None = Field(description="the name of the API key that made it; None on a gateway without keys")
    endpoint: Endpoint
    input_file_id: str
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None
    status: Status
    created_at: int
    expires_at: int
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = Field(default=None, description="why the batch as a whole failed")
    counts: Counts = Counts()
    usage: TokenUsage = TokenUsage()
    lease: Lease | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def leased_to_another(self, process: str, now: float | None = None) -> bool:
        """Another process holds a lease that has not lapsed."""
        lease = self.lease
        return lease is not None and lease.process != process and lease.until > (now or time.time())

    def moved(self, status: Status, **changes: Any) -> BatchRecord:
        """The record in `status`, stamped with the time it got there (`STATUS_at`)."""
        stamp = f"{status}_at"
        if stamp in BatchRecord.model_fields:
            changes.setdefault(stamp, int(time.time()))
        return self.model_copy(update={"status": status, **changes})

    def openai(self) -> dict[str, Any]:
        """The Batch object OpenAI's API answers with."""
        body = self.model_dump(exclude={"owner", "counts", "usage", "lease", "errors"})
        return {
            **body,
            "object": "batch",
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "request_counts": self.counts.model_dump(),
            "usage": self.usage.openai(),
        }


class Versioned(NamedTuple):
    """A record and the revision it was read at, for a conditional write."""

    record: BatchRecord
    revision: int
