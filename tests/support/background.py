"""Background responses' plane (dynamo_oss.gateway.responses.plane) in one process, for tests of the runner's
logic without NATS, and an exchange with no frontend: the test hands it the completion's chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from dynamo_oss.gateway.harmony.completion import CompletionAnswer
from dynamo_oss.gateway.responses.plane import Batch, Handler, Listing
from dynamo_oss.gateway.routes import Detached


class MemoryEventLog:
    """plane.EventLog in memory: each response's batches, and a condition its followers wait on."""

    def __init__(self) -> None:
        self.batches: dict[str, list[tuple[int, bytes]]] = {}
        self.appended = asyncio.Condition()

    async def append(self, response_id: str, first: int, events: bytes) -> None:
        async with self.appended:
            self.batches.setdefault(response_id, []).append((first, events))
            self.appended.notify_all()

    async def follow(self, response_id: str, idle_s: float) -> AsyncIterator[Batch | None]:
        read = 0
        while True:
            async with self.appended:
                try:
                    await asyncio.wait_for(
                        self.appended.wait_for(lambda: len(self.batches.get(response_id, [])) > read), idle_s
                    )
                except TimeoutError:
                    batch = None
                else:
                    stored = self.batches[response_id]
                    first, events = stored[read]
                    read += 1
                    batch = Batch(first, events, len(stored) - read)
            yield batch


class MemoryRunners:
    """plane.Runners in memory: listings that lapse only when `lapse()` says so, and requests handed to the
    serving process's handler directly."""

    lapse_s = 0.0

    def __init__(self) -> None:
        self.listed: dict[str, Listing] = {}
        self.handlers: dict[str, Handler] = {}
        self.reachable = True  # False: requests go unanswered, as to a process cut off from NATS

    async def list(self, process: str, listing: Listing) -> None:
        self.listed[process] = listing

    async def unlist(self, process: str) -> None:
        self.listed.pop(process, None)

    def lapse(self, process: str) -> None:
        """`process` died: its listing lapses, and nothing answers for it."""
        self.listed.pop(process, None)
        self.handlers.pop(process, None)

    async def listing(self, process: str) -> Listing | None:
        return self.listed.get(process)

    async def listings(self) -> dict[str, Listing]:
        return dict(self.listed)

    async def serve(self, process: str, handler: Handler) -> None:
        self.handlers[process] = handler

    async def ask(self, process: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        handler = self.handlers.get(process)
        return await handler(request) if handler is not None and self.reachable else None

    async def close(self) -> None:
        return None


class HandFedExchange:
    """routes.Exchange whose frontend is the test: `give(chunk)` passes a completion chunk through the
    transform to the work, `finish()` ends the answer; `leave()` is recorded, and ends `forward`."""

    def __init__(self, detached: Detached, transform: CompletionAnswer) -> None:
        self.detached, self.transform = detached, transform
        self.status, self.error = 200, None
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.left = asyncio.Event()

    def give(self, chunk: bytes) -> None:
        self.chunks.put_nowait(chunk)

    def finish(self) -> None:
        self.chunks.put_nowait(None)

    async def forward(self) -> None:
        while not self.left.is_set():
            chunk = asyncio.ensure_future(self.chunks.get())
            await asyncio.wait((chunk, asyncio.ensure_future(self.left.wait())), return_when=asyncio.FIRST_COMPLETED)
            if not chunk.done():
                chunk.cancel()
                return
            if chunk.result() is None:
                self.detached.output(self.transform.end(), True)
                return
            self.detached.output(self.transform.feed(chunk.result()), False)

    def leave(self) -> None:
        self.left.set()


async def until(condition: Callable[[], object], timeout_s: float = 10) -> object:
    """`condition`'s first truthy value, the event loop running meanwhile; TimeoutError past the deadline."""

    async def polled() -> object:
        while not (value := condition()):
            await asyncio.sleep(0.005)  # the event loop's turn: the work under test runs
        return value

    return await asyncio.wait_for(polled(), timeout_s)
