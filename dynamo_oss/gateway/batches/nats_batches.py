"""Batches in the graph's NATS: records in a key-value bucket (`BUCKET`, keyed `OWNER_TAG.BATCH_ID`, so a key's
batches are found under its tag and another key's lookup of the same id finds nothing), the batches not yet
ended in a second, small one (`BUCKET-queue`, what every runner lists every few seconds, however many batches
the graph keeps), and the answers in a JetStream stream (`BUCKET-answers`, a subject per batch), compressed.
All of it kept for the graph's retention, on file.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

import nats.errors
import nats.js.errors
import orjson
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue
from pydantic import ValidationError

from dynamo_oss.gateway.batches.records import BATCH_ID, BatchRecord, TokenUsage, Versioned
from dynamo_oss.gateway.batches.lines import too_large
from dynamo_oss.gateway.batches.store import Answer
from dynamo_oss.gateway.nats_connection import (
    HEADROOM,
    NAME_CHARACTERS,
    REQUEST_TIMEOUT_S,
    GraphNats,
    answered,
    ensure_stream,
    kv_stream,
    kv_values,
)
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable, owner_tag

log = logging.getLogger("dynamo_oss.gateway.store")


class NatsBatchStore:
    """batches.store.BatchStore on the graph's NATS."""

    def __init__(self, bucket: str, retention_s: int, max_bytes: int, nats: GraphNats) -> None:
        if not bucket or not set(bucket) <= NAME_CHARACTERS:
            raise ValueError(f"bucket {bucket!r}: a NATS key-value bucket is named with letters, digits, - and _")
        self.bucket, self.retention_s, self.max_bytes, self.nats = bucket, retention_s, max_bytes, nats
        self.stream = f"{bucket}-answers"
        self.prefix = f"dynamo-oss.{bucket}.answers."
        self._kv: tuple[KeyValue, KeyValue, JetStreamContext] | None = None  # records, queue, and JetStream
        self._made = asyncio.Lock()

    async def create(self, record: BatchRecord) -> int:
        """Queued first, then kept: a queue entry whose record was never written is dropped by `unended`, where a
        record never queued would wait for ever."""
        records, queue, _ = await self._buckets()
        await answered(queue.put(record.id, _key(record.owner, record.id).encode()))
        return await answered(records.create(_key(record.owner, record.id), _value(record)))

    async def read(self, owner: str | None, batch_id: str) -> Versioned | None:
        if not BATCH_ID.fullmatch(batch_id):
            return None
        records, _, _ = await self._buckets()
        try:
            entry = await answered(records.get(_key(owner, batch_id)))
        except nats.js.errors.KeyNotFoundError:
            return None
        record = _record(entry.value)
        return Versioned(record, entry.revision) if record is not None and entry.revision is not None else None

    async def write(self, record: BatchRecord, revision: int) -> int:
        records, queue, _ = await self._buckets()
        try:
            revision = await answered(records.update(_key(record.owner, record.id), _value(record), last=revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise Conflict(f"batch {record.id} changed since revision {revision}") from None
        if record.ended:  # off the queue, leaving no delete marker for every runner to read past
            await answered(
                self._js().purge_stream(f"KV_{self.bucket}-queue", subject=f"$KV.{self.bucket}-queue.{record.id}")
            )
        return revision

    async def owned(self, owner: str | None) -> list[BatchRecord]:
        records, _, _ = await self._buckets()
        found = [record for _, record in await _entries(records, f"{owner_tag(owner)}.>") if record is not None]
        return sorted(found, key=lambda record: record.created_at)

    async def unended(self) -> list[tuple[str | None, str]]:
        records, queue, _ = await self._buckets()
        out = []
        for batch_id, value in await kv_values(queue, ">"):
            try:
                entry = await answered(records.get(value.decode()))
            except nats.js.errors.KeyNotFoundError:  # never written, or dropped past retention while it waited
                await answered(
                    self._js().purge_stream(f"KV_{self.bucket}-queue", subject=f"$KV.{self.bucket}-queue.{batch_id}")
                )
                continue
            record = _record(entry.value)
            if record is not None:
                out.append((record.owner, record.id))
        return out

    async def keep_answer(self, batch_id: str, answer: Answer) -> None:
        """Keep `answer`; one larger than NATS's largest message, even compressed, is kept as its error."""
        _, _, js = await self._buckets()
        data = _message(answer)
        largest = (await self.nats.client()).max_payload - HEADROOM
        if len(data) > largest:
            message = f"The answer was {len(data)} bytes compressed, more than NATS's largest message ({largest})."
            data = _message(too_large(answer, message))
        await answered(js.publish(self.prefix + batch_id, data, stream=self.stream))

    async def answers(self, batch_id: str) -> list[Answer]:
        _, _, js = await self._buckets()
        subject = self.prefix + batch_id
        info = await answered(js.stream_info(self.stream, subjects_filter=subject))
        count = (info.state.subjects or {}).get(subject, 0)  # read all that many: none is missed for a slow one
        if not count:
            return []
        subscription = await answered(
            js.subscribe(subject, stream=self.stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        )
        out: list[Answer] = []
        try:
            while len(out) < count:
                try:
                    message = await subscription.next_msg(timeout=REQUEST_TIMEOUT_S)
                except (nats.errors.Error, OSError) as error:
                    raise StoreUnavailable(f"NATS stopped delivering a batch's answers ({error})") from None
                kept = orjson.loads(zlib.decompress(message.data))
                out.append(Answer(kept["line"], kept["failed"], kept["data"].encode(), TokenUsage(**kept["usage"])))
        finally:
            try:
                await subscription.unsubscribe()
            except (nats.errors.Error, OSError):
                pass
        return out

    async def drop_answers(self, batch_id: str) -> None:
        _, _, js = await self._buckets()
        await answered(js.purge_stream(self.stream, subject=self.prefix + batch_id))

    def _js(self) -> JetStreamContext:
        assert self._kv is not None
        return self._kv[2]

    async def _buckets(self) -> tuple[KeyValue, KeyValue, JetStreamContext]:
        if self._kv is not None:
            return self._kv
        js = await self.nats.jetstream()  # outside the lock: callers wait for NATS side by side, not in turn
        async with self._made:
            if self._kv is None:
                window = min(120.0, self.retention_s)
                for bucket, description in (
                    (self.bucket, "dynamo-oss batches, by owner and id"),
                    (f"{self.bucket}-queue", "dynamo-oss batches not yet ended"),
                ):
                    wanted = kv_stream(bucket, description, max_age=self.retention_s, duplicate_window=window)
                    await answered(ensure_stream(js, wanted))
                answers = StreamConfig(
                    name=self.stream,
                    description="dynamo-oss batches' answers, a subject per batch, until its files are written",
                    subjects=[self.prefix + "*"],
                    discard=DiscardPolicy.NEW,
                    max_age=float(self.retention_s),
                    max_bytes=self.max_bytes,  # full: a new answer is refused (and kept again), never an old one lost
                    storage=StorageType.FILE,
                    duplicate_window=window,
                    num_replicas=1,
                )
                await answered(ensure_stream(js, answers))
                records = await answered(js.key_value(self.bucket))
                queue = await answered(js.key_value(f"{self.bucket}-queue"))
                self._kv = (records, queue, js)
        return self._kv


def _message(answer: Answer) -> bytes:
    kept = {
        "line": answer.line,
        "failed": answer.failed,
        "data": answer.data.decode(),
        "usage": answer.usage.model_dump(),
    }
    return zlib.compress(orjson.dumps(kept))


def _key(owner: str | None, batch_id: str) -> str:
    return f"{owner_tag(owner)}.{batch_id}"


def _value(record: BatchRecord) -> bytes:
    return record.model_dump_json().encode()


def _record(value: bytes | None) -> BatchRecord | None:
    try:
        return BatchRecord.model_validate_json(value or b"")
    except ValidationError as error:
        log.error("a kept batch's record is unreadable (%s): answered as not found", error)
        return None


async def _entries(kv: KeyValue, keys: str) -> list[tuple[str, BatchRecord | None]]:
    return [(key, _record(value)) for key, value in await kv_values(kv, keys)]
