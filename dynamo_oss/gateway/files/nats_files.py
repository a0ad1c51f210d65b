"""Files in the graph's NATS: each file's bytes in chunks in a JetStream object store (`BUCKET`, the object named
`OWNER_TAG/FILE_ID`), its record in a key-value bucket beside it (`BUCKET-index`, keyed `OWNER_TAG.FILE_ID`), so a
key's files are listed from its own records alone (however many files other keys keep) and another key's lookup
of the same id finds nothing (stores.owner_tag). A file is listed once its bytes are whole, and unlisted before
they go.

Why NATS: it is where every other thing the gateway keeps lives (nats_store.py says why), and its object
store is made for files larger than one message. The store refuses what does not fit (discard new: a full
store never drops a file a batch still needs) and drops files past the graph's retention itself (max_age).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import BinaryIO, TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import DiscardPolicy, ObjectInfo, ObjectMeta, ObjectMetaOptions, StorageType, StreamConfig
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore
from pydantic import ValidationError

from dynamo_oss.gateway.files.store import FILE_ID, StoredFile, StoreFull
from dynamo_oss.gateway.nats_connection import (
    NAME_CHARACTERS,
    GraphNats,
    answered,
    ensure_stream,
    kv_stream,
    kv_values,
    pulled,
)
from dynamo_oss.gateway.stores import StoreUnavailable, owner_tag

log = logging.getLogger("dynamo_oss.gateway.store")

CHUNK_BYTES = 256 * 1024  # well below NATS's largest message (1 MiB by default)
CHUNKS_AHEAD = 4  # chunks a download is sent ahead of what its client has taken
T = TypeVar("T")


class NatsFileStore:
    """files.store.FileStore over one object store of the graph's NATS."""

    def __init__(self, bucket: str, retention_s: int, max_bytes: int, nats: GraphNats) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS object store is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes, self.nats = bucket, retention_s, max_bytes, nats
        self.index = f"{bucket}-index"
        self._stores: tuple[ObjectStore, KeyValue] | None = None
        self._made = asyncio.Lock()

    async def put(self, record: StoredFile, data: bytes | BinaryIO) -> None:
        objects, index = await self._buckets()
        meta = ObjectMeta(name=_name(record.owner, record.id), options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES))
        try:
            await _transfer(objects.put(meta.name, data, meta))
        except nats.js.errors.APIError as error:
            if "maximum bytes" in str(error).lower() or "insufficient resources" in str(error).lower():
                raise StoreFull(f"the graph's file store is full ({self.max_bytes // 2**20} MiB)") from None
            raise StoreUnavailable(f"NATS refused the file ({error})") from None
        await answered(index.put(_key(record.owner, record.id), record.model_dump_json().encode()))

    async def info(self, owner: str | None, file_id: str) -> StoredFile | None:
        if not FILE_ID.fullmatch(file_id):
            return None
        _, index = await self._buckets()
        try:
            entry = await answered(index.get(_key(owner, file_id)))
        except nats.js.errors.KeyNotFoundError:
            return None
        return _record(entry.value)

    async def content(self, owner: str | None, file_id: str) -> AsyncIterator[bytes] | None:
        if await self.info(owner, file_id) is None:
            return None
        objects, _ = await self._buckets()
        try:
            info = await answered(objects.get_info(_name(owner, file_id)))
        except nats.js.errors.ObjectNotFoundError:
            return None  # dropped past retention a moment ago
        return self._chunks(info)

    async def _chunks(self, info: ObjectInfo) -> AsyncIterator[bytes]:
        """The object's chunks as the reader takes them (CHUNKS_AHEAD at a time from NATS), checked against its
        digest at the end: a mismatch raises StoreUnavailable, which cuts a download short."""
        js = await self.nats.jetstream()
        digest = hashlib.sha256()
        chunks = f"$O.{self.bucket}.C.{info.nuid}"
        async for message in pulled(js, f"OBJ_{self.bucket}", chunks, batch=CHUNKS_AHEAD):
            digest.update(message.data)
            yield message.data
        if "SHA-256=" + base64.urlsafe_b64encode(digest.digest()).decode() != info.digest:
            raise StoreUnavailable(f"file {info.name}: its chunks do not match its digest")

    async def owned(self, owner: str | None) -> list[StoredFile]:
        await self._buckets()
        js = await self.nats.jetstream()
        found = [_record(value) for _, value in await kv_values(js, self.index, f"{owner_tag(owner)}.>")]
        return sorted((record for record in found if record is not None), key=lambda r: r.created_at, reverse=True)

    async def delete(self, owner: str | None, file_id: str) -> bool:
        if await self.info(owner, file_id) is None:
            return False
        objects, index = await self._buckets()
        await answered(index.purge(_key(owner, file_id)))
        try:
            await answered(objects.delete(_name(owner, file_id)))
        except nats.js.errors.ObjectNotFoundError:
            pass  # already dropped past retention
        return True

    async def _buckets(self) -> tuple[ObjectStore, KeyValue]:
        if self._stores is not None:
            return self._stores
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._stores is None:
                wanted = StreamConfig(  # as nats-py's create_object_store makes it, with the graph's limits
                    name=f"OBJ_{self.bucket}",
                    description="dynamo-oss files for the Batch API, by owner and id",
                    subjects=[f"$O.{self.bucket}.C.>", f"$O.{self.bucket}.M.>"],
                    max_age=float(self.retention_s),
                    max_bytes=self.max_bytes,
                    storage=StorageType.FILE,
                    num_replicas=1,
                    discard=DiscardPolicy.NEW,
                    allow_rollup_hdrs=True,
                    allow_direct=True,
                )
                await answered(ensure_stream(js, wanted))
                records = self.index
                description = "dynamo-oss files' records, by owner and id"
                window = min(120.0, self.retention_s)
                await answered(
                    ensure_stream(
                        js, kv_stream(records, description, max_age=self.retention_s, duplicate_window=window)
                    )
                )
                self._stores = (await answered(js.object_store(self.bucket)), await answered(js.key_value(records)))
        return self._stores


def _name(owner: str | None, file_id: str) -> str:
    return f"{owner_tag(owner)}/{file_id}"


def _key(owner: str | None, file_id: str) -> str:
    return f"{owner_tag(owner)}.{file_id}"


def _record(value: bytes | None) -> StoredFile | None:
    try:
        return StoredFile.model_validate_json(value or b"")
    except ValidationError as error:
        log.error("a kept file's record is unreadable (%s): answered as not found", error)
        return None


async def _transfer(call: Awaitable[T]) -> T:
    """A whole file's put; StoreUnavailable when NATS stops answering. Not cut short by a timeout of its own:
    each chunk's publish has JetStream's (REQUEST_TIMEOUT_S), and nats-py purges the chunks already sent
    when one fails, where a cancellation from outside would leave them in the store until its retention."""
    try:
        return await call
    except nats.js.errors.APIError:  # JetStream's own answer: the caller's to read
        raise
    except (nats.errors.Error, OSError, TimeoutError) as error:
        raise StoreUnavailable(f"NATS did not answer ({error or type(error).__name__})") from None
