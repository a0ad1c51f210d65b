"""/v1/files: batch input files uploaded (`POST`, multipart/form-data, purpose `batch`), listed, read, their
content downloaded and deleted; and the output and error files batches leave (purpose `batch_output`). Answered
by the gateway from the graph's file store, never passed to Dynamo's frontend.

An upload is checked whole before it is kept: a file past the size or line limit is a 400 (its lines are
checked as a batch runs them, and a malformed one goes to the batch's error file). A file is found only for the
API key that made it: any other key gets the same 404 as for a file never kept.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qs

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.files.multipart import form_fields, malformed
from dynamo_oss.gateway.files.store import MAX_FILENAME, OFF_LOOP_BYTES, FileStore, StoredFile, StoreFull
from dynamo_oss.gateway.pages import page
from dynamo_oss.gateway.routes import BytesAnswer, Checks, LocalAnswer
from dynamo_oss.gateway.stores import StoreUnavailable, unavailable
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.graph.schema import GatewayBatchesSection

PATH = b"/v1/files"
PREFIX = b"/v1/files/"
METHODS = frozenset({b"GET", b"DELETE"})  # what the paths under PREFIX take
_PATH = re.compile(r"^/v1/files/([^/]+)(/content)?/?$")
MAX_PAGE = 10_000  # OpenAI's largest `limit` for files, and its default
FILE_OVERHEAD_BYTES = 64 * 1024  # charged a file beside its bytes: at most 32,768 files in the default 2 GiB


def kept_bytes(file: StoredFile) -> int:
    """What a file costs its key's quota: its bytes, and what NATS keeps beside them for any file (many tiny
    files cost their owner as NATS pays for them, not next to nothing)."""
    return file.bytes + FILE_OVERHEAD_BYTES


def not_found(file_id: str, param: str | None = None) -> ApiError:
    return ApiError(
        404,
        f"No file with id '{file_id}' is kept for this API key: it was never uploaded, was deleted, or is past this "
        "graph's retention.",
        param=param,
        code="file_not_found",
    )


class FilesRoute:
    """Every request under /v1/files."""

    api = None

    def __init__(self, store: FileStore, settings: GatewayBatchesSection, max_body_bytes: int) -> None:
        self.store, self.settings = store, settings
        self.max_file_bytes = min(settings.max_file_mib * 2**20, max_body_bytes)

    async def answer(self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller) -> LocalAnswer:
        path, _, query = url.decode(errors="replace").partition("?")
        try:
            if path.rstrip("/") == PATH.decode():
                if method == b"POST":
                    return 200, (await self._upload(body, caller.key)).openai()
                return 200, await self._listed(parse_qs(query), caller.key)
            match = _PATH.match(path)
            if match is None:
                raise ApiError(404, f"{method.decode(errors='replace')} {path} is not an endpoint of this server.")
            file_id, content = match.group(1), match.group(2)
            if method == b"DELETE" and not content:
                if not await self.store.delete(caller.key, file_id):
                    raise not_found(file_id)
                return 200, {"id": file_id, "object": "file", "deleted": True}
            if method != b"GET":
                raise ApiError(405, f"{method.decode(errors='replace')} {path} is not served: it takes GET.")
            if content:
                data = await self.store.content(caller.key, file_id)
                if data is None:
                    raise not_found(file_id)
                return BytesAnswer(data, b"application/octet-stream")
            record = await self.store.info(caller.key, file_id)
            if record is None:
                raise not_found(file_id)
            return 200, record.openai()
        except StoreUnavailable as error:
            raise unavailable("file store", error) from None

    async def _upload(self, body: bytes, owner: str | None) -> StoredFile:
        """The upload checked and kept: 400 for a form that is not an upload of a batch file within the limits."""
        heavy = len(body) > OFF_LOOP_BYTES
        fields = await asyncio.to_thread(form_fields, body) if heavy else form_fields(body)
        purpose = fields.get("purpose")
        if purpose is None:
            raise ApiError(400, "Missing required parameter: 'purpose'.", param="purpose")
        if purpose.text("purpose") != "batch":
            raise ApiError(
                400,
                f"Invalid 'purpose': {purpose.text('purpose')[:100]!r}. This endpoint keeps files for the Batch API "
                "only: send purpose 'batch'.",
                param="purpose",
            )
        upload = fields.get("file")
        if upload is None or upload.filename is None:
            raise malformed("it has no 'file' field with a filename")
        if len(upload.filename) > MAX_FILENAME:
            raise ApiError(
                400, f"The file's name is longer than {MAX_FILENAME} characters; send a shorter one.", param="file"
            )
        data = upload.value
        if len(data) > self.max_file_bytes:
            raise ApiError(
                400,
                f"The file is {len(data)} bytes, more than this graph's largest batch file ({self.max_file_bytes} "
                "bytes: gateway.batches.max_file_mib, and gateway.limits.max_body_mib); split it into several batches.",
                param="file",
                code="file_too_large",
            )
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)  # blank ones too: what splitting it costs
        if lines > self.settings.max_lines:
            raise ApiError(
                400,
                f"The file has {lines} lines, more than this graph's limit of {self.settings.max_lines} requests per "
                "batch (gateway.batches.max_lines); split it into several batches.",
                param="file",
                code="too_many_requests_in_file",
            )
        made = (owner, "batch", upload.filename, data, self.settings.retention_s)
        record = await asyncio.to_thread(StoredFile.made, *made) if heavy else StoredFile.made(*made)
        if record.lines == 0:
            raise ApiError(400, "The file has no requests: a batch file holds one JSON request per line.", param="file")
        kept = sum(kept_bytes(file) for file in await self.store.owned(owner))
        quota = self.settings.max_mib_per_key * 2**20
        if kept + kept_bytes(record) > quota:
            raise ApiError(
                400,
                f"This API key keeps {kept} bytes of files; {len(data)} more would pass its {quota // 2**20} MiB "
                "(gateway.batches.max_mib_per_key): delete files it no longer needs.",
                param="file",
                code="file_storage_full",
            )
        try:
            await self.store.put(record, data)
        except StoreFull as error:
            raise ApiError(
                400,
                f"{error}: delete files no longer needed, then upload again.",
                param="file",
                code="file_storage_full",
            ) from None
        return record

    async def _listed(self, query: dict[str, list[str]], owner: str | None) -> dict:
        files = [file.openai() for file in await self.store.owned(owner)]
        purpose = query.get("purpose", [None])[0]
        if purpose is not None:
            files = [file for file in files if file["purpose"] == purpose]
        return page(files[::-1], query, "file of this API key", MAX_PAGE, MAX_PAGE)
