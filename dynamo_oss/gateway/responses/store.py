"""Stored responses (`store: true`): the record a response leaves, and the interface of a store.

A record holds what a continuation (`previous_response_id`) needs to render the conversation
exactly as if the client had sent it whole: the items the response inherited from the ones
before it, its own input items, and its output (reasoning included, as the Responses API
carries it). Keeping the whole conversation in each record costs space, but a continuation reads
one record, and it keeps working when an earlier response of the chain is deleted or expires.

A record belongs to the API key (by name) that created it, and lives for the graph's retention.
The store behind the interface is the graph's NATS (nats_store.py), which every gateway of the
graph shares; `MemoryResponseStore` keeps records in one process, for tests of the logic alone.

A background response's record is written many times (queued, in progress, its end) by the process
running it, and may be ended by another (cancelled, or failed when that process has died): those
writes are conditional on the revision the writer read (`write`), so no end is ever written over.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.gateway.stores import Conflict

RESPONSE_ID_PATTERN = r"^resp_[A-Za-z0-9_-]{1,200}$"  # what a response id looks like (ids.new_id)


RUNNING = ("queued", "in_progress")  # a background response's statuses before its end


class BackgroundRun(BaseModel):
    """How a background response (`background: true`) runs: where, and what is kept of its stream."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process: str = Field(description="the gateway process running it (background.py), until it ends")
    events: bool = Field(description="its events are kept for GET ?stream=true (it was created with stream: true)")
    last_event: int | None = Field(
        default=None, description="the sequence number of its stream's last event, once the process running it ended it"
    )


class StoredResponse(BaseModel):
    """One response as stored: the Response object the client got, and the conversation behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=RESPONSE_ID_PATTERN, description="the response's id, `resp_...`")
    owner: str | None = Field(description="the name of the API key that created it; None on a gateway without keys")
    created_at: float = Field(description="Unix time it was stored, for the retention check")
    inherited: list[dict[str, Any]] = Field(
        default=[], description="the conversation before this request's input: the previous response's, whole"
    )
    input: list[dict[str, Any]] = Field(description="this request's own input items, each with an id")
    response: dict[str, Any] = Field(description="the Response object, as GET /v1/responses/{id} returns it")
    background: BackgroundRun | None = Field(default=None, description="how it runs, for a background response")

    @property
    def running(self) -> bool:
        """A background response not yet ended (queued or in progress)."""
        return self.response.get("status") in RUNNING

    def conversation(self) -> list[dict[str, Any]]:
        """What a continuation prepends to its input: inherited items, this input, this output.

        Reasoning items keep their text as `content`; a sealed copy is left out, so a record
        stays readable after the graph's reasoning key changes."""
        output = [_unsealed(item) for item in self.response.get("output") or []]
        return [*self.inherited, *self.input, *output]

    def expired(self, retention_s: float, now: float | None = None) -> bool:
        return (now if now is not None else time.time()) - self.created_at > retention_s


class Versioned(NamedTuple):
    """A record and the revision it was read at, for a conditional write."""

    record: StoredResponse
    revision: int


class ResponseStore(Protocol):
    """Where responses are kept. Every method raises StoreUnavailable when the store cannot answer."""

    retention_s: float  # how long a response is kept after it is stored

    async def put(self, record: StoredResponse) -> None: ...

    async def get(self, response_id: str) -> StoredResponse | None:
        """The record, or None when there is none (never stored, deleted, or dropped past retention)."""
        ...

    async def read(self, response_id: str) -> Versioned | None:
        """The record and its revision, or None as for `get`."""
        ...

    async def write(self, record: StoredResponse, revision: int) -> int:
        """Store `record` if its id's record is still at `revision` (0: if there is none yet), and return
        the new revision; Conflict if it has changed or gone since."""
        ...

    async def delete(self, response_id: str) -> None: ...

    async def close(self) -> None: ...


class MemoryResponseStore:
    """A store in this process only: for tests of the logic alone (a gateway uses the graph's NATS)."""

    def __init__(self, retention_s: float) -> None:
        self.retention_s = retention_s
        self.records: dict[str, StoredResponse] = {}
        self.revisions: dict[str, int] = {}  # each id's latest revision, its deletion included
        self.revision = 0

    async def put(self, record: StoredResponse) -> None:
        self.records[record.id] = record
        self.revisions[record.id] = self.revision = self.revision + 1

    async def get(self, response_id: str) -> StoredResponse | None:
        return self.records.get(response_id)

    async def read(self, response_id: str) -> Versioned | None:
        record = self.records.get(response_id)
        return Versioned(record, self.revisions[response_id]) if record is not None else None

    async def write(self, record: StoredResponse, revision: int) -> int:
        if self.revisions.get(record.id, 0) != revision:
            raise Conflict(f"response {record.id} changed since revision {revision}")
        await self.put(record)
        return self.revision

    async def delete(self, response_id: str) -> None:
        if self.records.pop(response_id, None) is not None:
            self.revisions[response_id] = self.revision = self.revision + 1

    async def close(self) -> None:
        return None


def _unsealed(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "reasoning" and item.get("content") and "encrypted_content" in item:
        return {key: value for key, value in item.items() if key != "encrypted_content"}
    return item
