"""What background responses share between the graph's gateway processes, besides their records (store.py):
each response's events, which any process replays and follows (GET ?stream=true); and the processes
running them, which say they are alive and what they run, and take requests to cancel one.

The record is the truth about a response; these are how a process that does not run it learns more than
the record says: the events a client missed, whether the process named in the record still runs it, and
how to ask that process to stop it. On the graph's NATS (nats_plane.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field


class Batch(NamedTuple):
    """Whole server-sent events of one response, as appended: numbered from `first` on, one apart."""

    first: int  # the sequence_number of its first event
    events: bytes
    pending: int  # batches stored after it when it was read (0: the reader had caught up with the log)


class EventLog(Protocol):
    """Each background response's events, kept for its retention where every gateway process reads them.
    Every method raises StoreUnavailable when the log cannot answer."""

    async def append(self, response_id: str, first: int, events: bytes) -> None:
        """Keep `events` (whole, numbered from `first` on) after the response's others."""
        ...

    def follow(self, response_id: str, idle_s: float) -> AsyncIterator[Batch | None]:
        """The response's batches from its first, then each as it is appended; None after `idle_s` with none."""
        ...


class Listing(BaseModel):
    """What a gateway process running background responses says of itself while it is alive."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(description="the host it runs on, for people reading the bucket")
    pid: int
    responses: dict[str, str | None] = Field(description="the responses it runs, and their API keys' names")


Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Runners(Protocol):
    """The gateway processes running background responses: alive while their listing is fresh (each renews
    its own every few seconds, and an unrenewed one lapses), and reachable by a request. Every method
    but `ask` raises StoreUnavailable when the graph's NATS cannot answer."""

    lapse_s: float  # how long a listing lasts unrenewed: a process dead this long is seen dead

    async def list(self, process: str, listing: Listing) -> None:
        """Renew `process`'s listing."""
        ...

    async def unlist(self, process: str) -> None:
        """`process` is stopping: seen dead at once."""
        ...

    async def listing(self, process: str) -> Listing | None:
        """The process's listing, or None once it has lapsed (the process is dead, or cut off)."""
        ...

    async def listings(self) -> dict[str, Listing]:
        """Every process's listing that has not lapsed."""
        ...

    async def serve(self, process: str, handler: Handler) -> None:
        """Answer the requests sent to `process` with `handler`, until close."""
        ...

    async def ask(self, process: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """`process`'s answer to `request`; None when no process answers (it is gone) or none came in time."""
        ...

    async def close(self) -> None: ...
