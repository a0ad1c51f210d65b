"""Files kept for the Batch API: the record of one (OpenAI's File object, and its owner), and the interface of
a store. The store behind it is the graph's NATS object store (nats_files.py), which every gateway of the
graph shares: a file uploaded through one gateway is read by a batch that another runs."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

FILE_ID_PATTERN = r"^file-[0-9a-f]{32}$"  # what a file id looks like (new_file_id)
FILE_ID = re.compile(FILE_ID_PATTERN)
Purpose = Literal["batch", "batch_output"]
MAX_FILENAME = 512
OFF_LOOP_BYTES = 1024 * 1024  # a file this large is split into lines in a thread, off the event loop


def new_file_id() -> str:
    return f"file-{secrets.token_hex(16)}"


class StoredFile(BaseModel):
    """One file as kept: what GET /v1/files/{id} answers, and whose it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=FILE_ID_PATTERN)
    owner: str | None = Field(description="the name of the API key that made it; None on a gateway without keys")
    purpose: Purpose = Field(description="batch: a batch's input; batch_output: a batch's output or error file")
    filename: str = Field(max_length=MAX_FILENAME)
    bytes: int = Field(ge=0)
    lines: int = Field(ge=0, description="its requests (or answers): non-blank lines")
    created_at: int = Field(description="Unix time it was kept")
    expires_at: int = Field(description="Unix time the graph's retention drops it")

    @classmethod
    def made(
        cls,
        owner: str | None,
        purpose: Purpose,
        filename: str,
        data: bytes,
        retention_s: int,
        file_id: str | None = None,
    ) -> StoredFile:
        """The record of `data` kept now, under `file_id` (a new id where none is given)."""
        now = int(time.time())
        lines = sum(1 for line in data.split(b"\n") if line.strip())
        return cls(
            id=file_id or new_file_id(),
            owner=owner,
            purpose=purpose,
            filename=filename,
            bytes=len(data),
            lines=lines,
            created_at=now,
            expires_at=now + retention_s,
        )

    def openai(self) -> dict[str, Any]:
        """The File object OpenAI's API answers with."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


class FileStore(Protocol):
    """Where files are kept, each under its owner. Every method raises StoreUnavailable when the store cannot
    answer; `put` raises StoreFull when it has no room."""

    retention_s: int

    async def put(self, record: StoredFile, data: bytes) -> None: ...

    async def info(self, owner: str | None, file_id: str) -> StoredFile | None:
        """The owner's file by that id (None: never kept, deleted, past retention, or another key's)."""
        ...

    async def content(self, owner: str | None, file_id: str) -> bytes | None:
        """The file's bytes, as `info` finds it."""
        ...

    async def owned(self, owner: str | None) -> list[StoredFile]:
        """Every file the owner keeps, newest first."""
        ...

    async def delete(self, owner: str | None, file_id: str) -> bool:
        """Drop the owner's file; False when it has none by that id."""
        ...


class StoreFull(Exception):
    """The store has no room for the file (the graph's gateway.batches.max_mib): not retryable until files go."""
