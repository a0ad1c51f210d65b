"""Stored responses in a JetStream key-value bucket of the graph's NATS.

Why NATS: every graph already runs it with JetStream (Dynamo's KV router keeps its event streams
there), every gateway of the graph reaches it (on Kubernetes, the NATS the operator gives Dynamo),
and it outlives any gateway or frontend process: a response stored through one gateway is read
through another, or through the same one after a restart. A key-value bucket is what a response
store needs and no more: a get, a put and a delete by id, one bucket-wide age limit that drops
responses past the graph's retention by itself (the stream's max_age), a size cap (max_bytes,
dropping the oldest first), and file storage that survives a restart of nats-server itself.
A separate database would be one more service to run, secure and back up for the same four calls.

Records are JSON, compressed (a conversation's text shrinks several times), one value per
response under its id. A value must fit NATS's largest message (max_payload, 1 MiB by default):
a larger record is not stored, and the response says `store: false`.

The store reaches NATS over the serving process's one connection (nats_connection.GraphNats): until it
is up, reads and writes raise StoreUnavailable, which the routes answer with a retryable 503.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

import nats.js.errors
import orjson
from nats.js.kv import KeyValue
from pydantic import ValidationError

from dynamo_oss.gateway.nats_connection import NAME_CHARACTERS, GraphNats, answered, ensure_stream, kv_stream
from dynamo_oss.gateway.responses.store import StoredResponse, Versioned
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable

log = logging.getLogger("dynamo_oss.gateway.store")

COMPRESSION_LEVEL = 1  # fast: a record is written once per response, on the answer's path


class NatsResponseStore:
    """ResponseStore over one JetStream key-value bucket of the graph's NATS (`nats`)."""

    def __init__(self, bucket: str, retention_s: float, max_bytes: int, nats: GraphNats) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS key-value bucket is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes = bucket, retention_s, max_bytes
        self.nats = nats
        self._kv: KeyValue | None = None
        self._made = asyncio.Lock()

    async def put(self, record: StoredResponse) -> None:
        kv = await self._bucket()
        await answered(kv.put(record.id, await self._value(record)))

    async def get(self, response_id: str) -> StoredResponse | None:
        found = await self.read(response_id)
        return found.record if found is not None else None

    async def read(self, response_id: str) -> Versioned | None:
        kv = await self._bucket()
        try:
            entry = await answered(kv.get(response_id))
        except nats.js.errors.KeyNotFoundError:  # never stored, deleted (a delete marker), or dropped by age
            return None
        if entry.value is None or entry.revision is None:
            return None
        try:
            record = StoredResponse.model_validate(orjson.loads(zlib.decompress(entry.value)))
        except (zlib.error, orjson.JSONDecodeError, ValidationError) as error:
            log.error("stored response %s is unreadable (%s): answered as not found", response_id, error)
            return None
        return Versioned(record, entry.revision)

    async def write(self, record: StoredResponse, revision: int) -> int:
        kv = await self._bucket()
        value = await self._value(record)
        try:
            if revision == 0:
                return await answered(kv.create(record.id, value))
            return await answered(kv.update(record.id, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise Conflict(f"response {record.id} changed since revision {revision}") from None

    async def _value(self, record: StoredResponse) -> bytes:
        value = zlib.compress(orjson.dumps(record.model_dump(mode="json")), COMPRESSION_LEVEL)
        largest = (await self.nats.client()).max_payload
        if len(value) > largest:
            raise StoreUnavailable(
                f"the response's record is {len(value)} bytes compressed, more than NATS's largest message "
                f"({largest} bytes)"
            )
        return value

    async def delete(self, response_id: str) -> None:
        kv = await self._bucket()
        await answered(kv.delete(response_id))

    async def close(self) -> None:
        return None  # the connection is the serving process's, closed with it

    async def _bucket(self) -> KeyValue:
        if self._kv is not None:
            return self._kv
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._kv is None:
                wanted = kv_stream(
                    self.bucket,
                    "dynamo-oss stored responses (store: true), by id",
                    max_age=self.retention_s,
                    max_bytes=self.max_bytes,  # full: the oldest responses go first, as they would by age
                    duplicate_window=min(120.0, self.retention_s),
                )
                await answered(ensure_stream(js, wanted))
                self._kv = await answered(js.key_value(self.bucket))
                log.info("responses are stored in NATS bucket %s (retention %g s)", self.bucket, self.retention_s)
        return self._kv
