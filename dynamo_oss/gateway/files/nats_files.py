"""Files in a JetStream object store of the graph's NATS: each file's bytes in chunks, its record in the
object's description, its name `OWNER_TAG/FILE_ID` (stores.owner_tag), so a key's files are found under its
tag and another key's lookup of the same id finds nothing.

Why NATS: it is where every other thing the gateway keeps lives (nats_store.py says why), and its object
store is made for files larger than one message. The store refuses what does not fit (discard new: a full
store never drops a file a batch still needs) and drops files past the graph's retention itself (max_age).
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
import nats.js.errors
from nats.js.api import DiscardPolicy, ObjectMeta, ObjectMetaOptions, StorageType, StreamConfig
from nats.js.object_store import ObjectStore
from pydantic import ValidationError

from dynamo_oss.gateway.files.store import FILE_ID, StoredFile, StoreFull
from dynamo_oss.gateway.nats_connection import NAME_CHARACTERS, GraphNats, answered, ensure_stream
from dynamo_oss.gateway.stores import StoreUnavailable, owner_tag

log = logging.getLogger("dynamo_oss.gateway.store")

CHUNK_BYTES = 256 * 1024  # well below NATS's largest message (1 MiB by default)
TRANSFER_TIMEOUT_S = 120.0  # a whole file's put or get (its chunks are acknowledged one by one)


class NatsFileStore:
    """files.store.FileStore over one object store of the graph's NATS."""

    def __init__(self, bucket: str, retention_s: int, max_bytes: int, nats: GraphNats) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS object store is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes, self.nats = bucket, retention_s, max_bytes, nats
        self._store: ObjectStore | None = None
        self._made = asyncio.Lock()

    async def put(self, record: StoredFile, data: bytes) -> None:
        store = await self._objects()
        meta = ObjectMeta(
            name=_name(record.owner, record.id),
            description=record.model_dump_json(),
            options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
        )
        try:
            await _transfer(store.put(meta.name, data, meta))
        except nats.js.errors.APIError as error:
            if "maximum bytes" in str(error).lower() or "insufficient resources" in str(error).lower():
                raise StoreFull(f"the graph's file store is full ({self.max_bytes // 2**20} MiB)") from None
            raise StoreUnavailable(f"NATS refused the file ({error})") from None

    async def info(self, owner: str | None, file_id: str) -> StoredFile | None:
        if not FILE_ID.fullmatch(file_id):
            return None
        store = await self._objects()
        try:
            info = await answered(store.get_info(_name(owner, file_id)))
        except nats.js.errors.ObjectNotFoundError:
            return None
        return _record(info.description)

    async def content(self, owner: str | None, file_id: str) -> bytes | None:
        if not FILE_ID.fullmatch(file_id):
            return None
        store = await self._objects()
        chunks = _Chunks()
        try:
            await _transfer(store.get(_name(owner, file_id), writeinto=chunks))  # type: ignore[arg-type]
        except nats.js.errors.ObjectNotFoundError:
            return None
        return b"".join(chunks.pieces)

    async def owned(self, owner: str | None) -> list[StoredFile]:
        store = await self._objects()
        prefix = owner_tag(owner) + "/"
        try:
            infos = await answered(store.list(ignore_deletes=True))
        except nats.js.errors.NotFoundError:  # an empty store
            return []
        found = [_record(info.description) for info in infos if info.name and info.name.startswith(prefix)]
        return sorted((record for record in found if record is not None), key=lambda r: r.created_at, reverse=True)

    async def delete(self, owner: str | None, file_id: str) -> bool:
        if not FILE_ID.fullmatch(file_id):
            return False
        store = await self._objects()
        try:
            await answered(store.delete(_name(owner, file_id)))
        except nats.js.errors.ObjectNotFoundError:
            return False
        return True

    async def _objects(self) -> ObjectStore:
        if self._store is not None:
            return self._store
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._store is None:
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
                self._store = await answered(js.object_store(self.bucket))
        return self._store


class _Chunks:
    """Where nats-py's object store writes a file's chunks as they come (joined once, at the end)."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.pieces.append(bytes(data))
        return len(data)


def _name(owner: str | None, file_id: str) -> str:
    return f"{owner_tag(owner)}/{file_id}"


def _record(description: str | None) -> StoredFile | None:
    try:
        return StoredFile.model_validate_json(description or "")
    except ValidationError as error:
        log.error("a kept file's record is unreadable (%s): answered as not found", error)
        return None


async def _transfer(call):  # noqa: ANN001, ANN202 - a whole file's put or get, and its result
    try:
        return await asyncio.wait_for(call, TRANSFER_TIMEOUT_S)
    except nats.js.errors.APIError:  # JetStream's own answer: the caller's to read
        raise
    except (nats.errors.Error, OSError, TimeoutError) as error:
        raise StoreUnavailable(f"NATS did not answer ({error or type(error).__name__})") from None
