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

The connection is made in the background and remade by the client after NATS restarts; until
it is up, reads and writes raise StoreUnavailable, which the routes answer with a retryable 503,
so a gateway serves every other request while its store is away.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue
from pydantic import ValidationError

from dynamo_oss.gateway.config import NatsConnection
from dynamo_oss.gateway.nats_connection import NAME_CHARACTERS, NatsAddressUnreadable, connect
from dynamo_oss.gateway.responses.store import Conflict, StoredResponse, StoreUnavailable, Versioned

log = logging.getLogger("dynamo_oss.gateway.store")

CONNECT_TIMEOUT_S = 2.0  # a request waiting on a store that is not up gets its 503 this soon
REQUEST_TIMEOUT_S = 5.0  # one JetStream call
COMPRESSION_LEVEL = 1  # fast: a record is written once per response, on the answer's path


class NatsResponseStore:
    """ResponseStore over one JetStream key-value bucket of the graph's NATS (`connection`)."""

    def __init__(self, bucket: str, retention_s: float, max_bytes: int, connection: NatsConnection) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS key-value bucket is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes = bucket, retention_s, max_bytes
        self.connection = connection
        self._client: Client | None = None
        self._kv: KeyValue | None = None
        self._connecting: asyncio.Task[KeyValue] | None = None

    def start(self) -> None:
        """Connect in the background, so the first stored response does not wait for it."""
        self._connect_task()

    async def put(self, record: StoredResponse) -> None:
        kv = await self._bucket()
        await self._call(kv.put(record.id, self._value(record)))

    async def get(self, response_id: str) -> StoredResponse | None:
        found = await self.read(response_id)
        return found.record if found is not None else None

    async def read(self, response_id: str) -> Versioned | None:
        kv = await self._bucket()
        try:
            entry = await self._call(kv.get(response_id))
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
        value = self._value(record)
        try:
            if revision == 0:
                return await self._call(kv.create(record.id, value))
            return await self._call(kv.update(record.id, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise Conflict(f"response {record.id} changed since revision {revision}") from None

    async def client(self) -> Client:
        """The store's connection to the graph's NATS, for what else lives there (nats_plane.py)."""
        await self._bucket()
        assert self._client is not None
        return self._client

    def _value(self, record: StoredResponse) -> bytes:
        value = zlib.compress(orjson.dumps(record.model_dump(mode="json")), COMPRESSION_LEVEL)
        if self._client is not None and len(value) > self._client.max_payload:
            raise StoreUnavailable(
                f"the response's record is {len(value)} bytes compressed, more than NATS's "
                f"largest message ({self._client.max_payload} bytes)"
            )
        return value

    async def delete(self, response_id: str) -> None:
        kv = await self._bucket()
        await self._call(kv.delete(response_id))

    async def close(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._client is not None and not self._client.is_closed:
            await self._client.close()

    async def _call(self, call):  # noqa: ANN001, ANN202 - any JetStream coroutine, and its result
        try:
            return await asyncio.wait_for(call, REQUEST_TIMEOUT_S)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyWrongLastSequenceError):
            raise
        except (nats.errors.Error, OSError, TimeoutError) as error:
            raise StoreUnavailable(f"NATS did not answer ({error or type(error).__name__})") from None

    async def _bucket(self) -> KeyValue:
        if self._kv is not None:
            return self._kv
        task = self._connect_task()
        try:
            return await asyncio.wait_for(asyncio.shield(task), CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise StoreUnavailable("the graph's NATS is not reachable yet") from None
        except (nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"the graph's NATS is not reachable ({error or type(error).__name__})") from None

    def _connect_task(self) -> asyncio.Task[KeyValue]:
        if self._connecting is None or (self._connecting.done() and self._kv is None):
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            self._connecting.add_done_callback(_retrieved)
        return self._connecting

    async def _connect(self) -> KeyValue:
        if self._client is None or self._client.is_closed:
            try:
                self._client = await connect(self.connection, "dynamo-oss-gateway", _log_error)
            except NatsAddressUnreadable as error:
                raise StoreUnavailable(str(error)) from None
        js = self._client.jetstream(timeout=REQUEST_TIMEOUT_S)
        wanted = kv_stream(
            self.bucket,
            "dynamo-oss stored responses (store: true), by id",
            max_age=self.retention_s,
            max_bytes=self.max_bytes,  # full: the oldest responses go first, as they would by age
            duplicate_window=min(120.0, self.retention_s),
        )
        await ensure_stream(js, wanted)
        self._kv = await js.key_value(self.bucket)
        log.info("responses are stored in NATS bucket %s (retention %g s)", self.bucket, self.retention_s)
        return self._kv


def kv_stream(
    bucket: str, description: str, *, max_age: float, duplicate_window: float, max_bytes: int = -1
) -> StreamConfig:
    """The stream behind a JetStream key-value bucket of the graph's NATS: one value per key, on file (a
    restart of nats-server forgets nothing), the oldest dropped first when full."""
    return StreamConfig(
        name=f"KV_{bucket}",
        description=description,
        subjects=[f"$KV.{bucket}.>"],
        allow_direct=True,
        allow_rollup_hdrs=True,
        deny_delete=True,
        discard=DiscardPolicy.OLD,
        duplicate_window=duplicate_window,
        max_age=max_age,
        max_bytes=max_bytes,
        max_msgs_per_subject=1,
        storage=StorageType.FILE,
        num_replicas=1,
    )


async def ensure_stream(js: JetStreamContext, wanted: StreamConfig) -> None:
    """The stream as `wanted`: added, or updated where the graph's retention or size changed."""
    try:
        info = await js.stream_info(wanted.name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(wanted)
        return
    kept = (info.config.max_age, info.config.max_bytes, info.config.discard)
    if kept != (wanted.max_age, wanted.max_bytes, wanted.discard):
        await js.update_stream(wanted)


def _retrieved(task: asyncio.Task) -> None:
    """A background connection that failed is logged here, and tried again on the next call."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("response store: cannot reach the graph's NATS yet: %s", task.exception())


async def _log_error(error: Exception) -> None:
    log.warning("response store: NATS: %s", error)
