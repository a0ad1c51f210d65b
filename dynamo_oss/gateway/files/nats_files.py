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
import logging
from collections.abc import Awaitable
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import DiscardPolicy, ObjectMeta, ObjectMetaOptions, StorageType, StreamConfig
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore
from pydantic import ValidationError

from dynamo_oss.gateway.files.store import FILE_ID, StoredFile, StoreFull
from dynamo_oss.gateway.nats_connection import NAME_CHARACTERS, GraphNats, answered, ensure_stream, kv_stream, kv_values
from dynamo_oss.gateway.stores import StoreUnavailable, owner_tag

log = logging.getLogger("dynamo_oss.gateway.store")

CHUNK_BYTES = 256 * 1024  # well below NATS's largest message (1 MiB by default)
T = TypeVar("T")
TRANSFER_TIMEOUT_S = 120.0  # a whole file's put or get (its chunks are acknowledged one by one)


class NatsFileStore:
    """files.store.FileStore over one object store of the graph's NATS."""

    def __init__(self, bucket: str, retention_s: int, max_bytes: int, nats: GraphNats) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS object store is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes, self.nats = bucket, retention_s, max_bytes, nats
        self._stores: tuple[ObjectStore, KeyValue] | None = None
        self._made = asyncio.Lock()

    async def put(self, record: StoredFile, data: bytes) -> None:
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

    async def content(self, owner: str | None, file_id: str) -> bytes | None:
        if await self.info(owner, file_id) is None:
            return None
        objects, _ = await self._buckets()
        chunks = _Chunks()
        try:
            await _transfer(objects.get(_name(owner, file_id), writeinto=chunks))  # type: ignore[arg-type]
        except nats.js.errors.ObjectNotFoundError:
            return None
        return b"".join(chunks.pieces)

    async def owned(self, owner: str | None) -> list[StoredFile]:
        _, index = await self._buckets()
        found = [_record(value) for _, value in await kv_values(index, f"{owner_tag(owner)}.>")]
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
                records = f"{self.bucket}-index"
                description = "dynamo-oss files' records, by owner and id"
                window = min(120.0, self.retention_s)
                await answered(
                    ensure_stream(
                        js, kv_stream(records, description, max_age=self.retention_s, duplicate_window=window)
                    )
                )
                self._stores = (await answered(js.object_store(self.bucket)), await answered(js.key_value(records)))
        return self._stores


class _Chunks:
    """Where nats-py's object store writes a file's chunks as they come (joined once, at the end)."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.pieces.append(bytes(data))
        return len(data)


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
    """A whole file's put or get; StoreUnavailable when NATS does not answer in TRANSFER_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(call, TRANSFER_TIMEOUT_S)
    except nats.js.errors.APIError:  # JetStream's own answer: the caller's to read
        raise
    except (nats.errors.Error, OSError, TimeoutError) as error:
        raise StoreUnavailable(f"NATS did not answer ({error or type(error).__name__})") from None
