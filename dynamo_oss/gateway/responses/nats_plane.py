"""Background responses' events and runners (plane.py) on the graph's NATS, over the serving process's one
connection (nats_connection.GraphNats): the same server every gateway of the graph already reaches, and
nothing more to run.

Events: a JetStream stream per graph (`BUCKET-events`), a subject per response
(`dynamo-oss.BUCKET.events.RESPONSE_ID`), file storage, kept as long as the response itself (the store's
retention, the stream's max_age) and at most the store's size again (max_bytes), the oldest dropped first.
One stream rather than a stream per response: JetStream's streams are heavy (each its own files and
raft group where clustered) and a graph may keep millions of responses; a subject per response is what
an ordered consumer replays and follows with one filter. A message holds the events of one write (a
few tokens' deltas, not one message per event) with the first one's sequence number in a header.

Runners: a key-value bucket (`BUCKET-runners`) whose entries lapse `LAPSE_S` after their last write
(its max_age): each gateway process running background responses rewrites its entry every
background.HEARTBEAT_S, listing what it runs, so a process that died (or lost NATS) is seen dead within
LAPSE_S, whatever killed it. A request to a process goes to its own subject
(`dynamo-oss.BUCKET.runner.PROCESS`); NATS answers at once that nobody listens once it is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import nats.errors
import nats.js.errors
import orjson
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue
from pydantic import ValidationError

from dynamo_oss.gateway.nats_connection import (
    HEADROOM,
    GraphNats,
    answered,
    ensure_stream,
    kv_stream,
    kv_values,
)
from dynamo_oss.gateway.responses.plane import Batch, Handler, Listing
from dynamo_oss.gateway.stores import StoreUnavailable

log = logging.getLogger("dynamo_oss.gateway.store")

LAPSE_S = 8.0  # a runner's listing lasts this long unrenewed
FIRST = "Dynamo-Oss-First"  # the header holding a message's first event's sequence number


class NatsEventLog:
    """plane.EventLog on one JetStream stream of the graph's NATS."""

    def __init__(self, nats: GraphNats, bucket: str, retention_s: float, max_bytes: int) -> None:
        self.nats, self.retention_s, self.max_bytes = nats, retention_s, max_bytes
        self.stream = f"{bucket}-events"
        self.prefix = f"dynamo-oss.{bucket}.events."
        self._js: JetStreamContext | None = None
        self._made = asyncio.Lock()

    async def append(self, response_id: str, first: int, events: bytes) -> None:
        js = await self._jetstream()
        limit = (await self.nats.client()).max_payload - HEADROOM
        for number, data in pieces(first, events, limit):
            await answered(
                js.publish(self.prefix + response_id, data, stream=self.stream, headers={FIRST: str(number)})
            )

    async def follow(self, response_id: str, idle_s: float) -> AsyncIterator[Batch | None]:
        js = await self._jetstream()
        subscription: Subscription = await answered(
            js.subscribe(
                self.prefix + response_id, stream=self.stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
        )
        try:
            while True:
                try:
                    message = await subscription.next_msg(timeout=idle_s)
                except nats.errors.TimeoutError:
                    yield None
                    continue
                except (nats.errors.Error, OSError) as error:
                    raise StoreUnavailable(f"NATS stopped delivering events ({error})") from None
                yield Batch(int((message.headers or {}).get(FIRST, 0)), message.data, message.metadata.num_pending)
        finally:
            try:
                await subscription.unsubscribe()
            except (nats.errors.Error, OSError):
                pass  # the connection is closing: the subscription goes with it

    async def _jetstream(self) -> JetStreamContext:
        if self._js is not None:
            return self._js
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._js is None:
                wanted = StreamConfig(
                    name=self.stream,
                    description="dynamo-oss background responses' events, a subject per response",
                    subjects=[self.prefix + "*"],
                    discard=DiscardPolicy.OLD,
                    max_age=self.retention_s,
                    max_bytes=self.max_bytes,
                    storage=StorageType.FILE,
                    duplicate_window=min(120.0, self.retention_s),
                    num_replicas=1,
                )
                await answered(ensure_stream(js, wanted))
                self._js = js
        return self._js


def pieces(first: int, events: bytes, limit: int) -> list[tuple[int, bytes]]:
    """`events` cut at event boundaries into messages of at most `limit` bytes, each with its first event's
    number. An event larger than a message is left out (its number skipped): a reader of the log ends
    with the record's own response instead (background.py)."""
    out: list[tuple[int, bytes]] = []
    start, size, number = first, 0, first
    batch: list[bytes] = []
    for event in events.split(b"\n\n")[:-1]:
        event += b"\n\n"
        if size + len(event) > limit and batch:
            out.append((start, b"".join(batch)))
            batch, size = [], 0
        if len(event) > limit:
            log.warning("a background response's event of %d bytes is larger than NATS's largest message", len(event))
        else:
            start = number if not batch else start
            batch.append(event)
            size += len(event)
        number += 1
    if batch:
        out.append((start, b"".join(batch)))
    return out


class NatsRunners:
    """plane.Runners on a key-value bucket of the graph's NATS whose entries lapse, and a subject per process."""

    lapse_s = LAPSE_S

    def __init__(self, nats: GraphNats, bucket: str) -> None:
        self.nats = nats
        self.bucket = f"{bucket}-runners"
        self.prefix = f"dynamo-oss.{bucket}.runner."
        self._kv: KeyValue | None = None
        self._made = asyncio.Lock()
        self._subscription: Subscription | None = None
        self._handling: set[asyncio.Task] = set()

    async def list(self, process: str, listing: Listing) -> None:
        kv = await self._bucket()
        await answered(kv.put(process, listing.model_dump_json().encode()))

    async def unlist(self, process: str) -> None:
        kv = await self._bucket()
        await answered(kv.delete(process))

    async def listing(self, process: str) -> Listing | None:
        kv = await self._bucket()
        try:
            entry = await answered(kv.get(process))
        except nats.js.errors.KeyNotFoundError:  # lapsed, or unlisted
            return None
        return _listing(entry.value)

    async def listings(self) -> dict[str, Listing]:
        kv = await self._bucket()
        listings = {process: _listing(value) for process, value in await kv_values(kv, ">")}
        return {process: listing for process, listing in listings.items() if listing is not None}

    async def serve(self, process: str, handler: Handler) -> None:
        client = await self.nats.client()

        async def handle(message: Msg) -> None:
            try:
                answer = await handler(orjson.loads(message.data))
            except Exception:  # a bug: the asker hears nothing and reads the record itself
                log.exception("a request to this gateway process failed")
                return
            try:
                await message.respond(orjson.dumps(answer))
            except (nats.errors.Error, OSError) as error:
                log.warning("could not answer a request to this gateway process: %s", error)

        async def received(message: Msg) -> None:  # each request in a task of its own: none waits for another
            task = asyncio.get_running_loop().create_task(handle(message))
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)

        self._subscription = await answered(client.subscribe(self.prefix + process, cb=received))

    async def ask(self, process: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        try:
            client = await self.nats.client()
            reply = await client.request(self.prefix + process, orjson.dumps(request), timeout=timeout_s)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            return None
        except (nats.errors.Error, OSError, StoreUnavailable) as error:
            log.warning("could not reach gateway process %s: %s", process, error)
            return None
        return orjson.loads(reply.data)

    async def close(self) -> None:
        if self._subscription is not None:
            try:
                await self._subscription.unsubscribe()
            except (nats.errors.Error, OSError):
                pass

    async def _bucket(self) -> KeyValue:
        if self._kv is not None:
            return self._kv
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._kv is None:
                description = "dynamo-oss gateway processes running background responses; each entry lapses"
                wanted = kv_stream(self.bucket, description, max_age=LAPSE_S, duplicate_window=min(2.0, LAPSE_S))
                await answered(ensure_stream(js, wanted))
                self._kv = await answered(js.key_value(self.bucket))
        return self._kv


def _listing(value: bytes | None) -> Listing | None:
    try:
        return Listing.model_validate_json(value) if value else None
    except ValidationError:
        return None
