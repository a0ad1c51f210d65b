"""/v1/batches: batches created from an uploaded file, listed, read and cancelled, answered by the gateway from
the graph's batch store, never passed to Dynamo's frontend. Creating one only keeps it (`validating`): the
runners of the graph's gateway processes take it up (runner.py).

A batch is found only for the API key that made it: any other key gets the same 404 as for a batch never made,
and a batch may be made only from a file of the same key. A cancel of a batch that has ended changes nothing and
is answered with a 400 naming its status (a cancelled one is answered as it is).
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs

from pydantic import ValidationError

from dynamo_oss.gateway.batches.records import WINDOW_S, BatchRecord, Counts, new_batch_id
from dynamo_oss.gateway.batches.store import BatchStore
from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.files.route import not_found as file_not_found
from dynamo_oss.gateway.files.store import FileStore
from dynamo_oss.gateway.pages import page
from dynamo_oss.gateway.protocol.batches import BatchCreateRequest
from dynamo_oss.gateway.routes import Checks, LocalAnswer, parse_json
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable, unavailable
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.graph.schema import GatewayBatchesSection

PATH = b"/v1/batches"
PREFIX = b"/v1/batches/"
METHODS = frozenset({b"GET", b"POST"})  # what the paths under PREFIX take
_PATH = re.compile(r"^/v1/batches/([^/]+)(/cancel)?/?$")
MAX_PAGE, DEFAULT_PAGE = 100, 20  # OpenAI's largest `limit` for batches, and its default


def not_found(batch_id: str) -> ApiError:
    return ApiError(
        404,
        f"No batch with id '{batch_id}' is kept for this API key: it was never made, or is past this graph's retention.",
        code="batch_not_found",
    )


class BatchesRoute:
    """Every request under /v1/batches."""

    api = None

    def __init__(self, store: BatchStore, files: FileStore, settings: GatewayBatchesSection) -> None:
        self.store, self.files, self.settings = store, files, settings

    async def answer(self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller) -> LocalAnswer:
        path, _, query = url.decode(errors="replace").partition("?")
        try:
            if path.rstrip("/") == PATH.decode():
                if method == b"POST":
                    return 200, (await self._create(body, caller.key)).openai()
                batches = [batch.openai() for batch in await self.store.owned(caller.key)]
                return 200, page(batches, parse_qs(query), "batch of this API key", DEFAULT_PAGE, MAX_PAGE)
            match = _PATH.match(path)
            if match is None:
                raise ApiError(404, f"{method.decode(errors='replace')} {path} is not an endpoint of this server.")
            if (method == b"POST") != bool(match.group(2)):
                takes = "POST" if match.group(2) else "GET"
                raise ApiError(405, f"{method.decode(errors='replace')} {path} is not served: it takes {takes}.")
            batch_id = match.group(1)
            if match.group(2):
                return 200, (await self._cancel(caller.key, batch_id)).openai()
            versioned = await self.store.read(caller.key, batch_id)
            if versioned is None:
                raise not_found(batch_id)
            return 200, versioned.record.openai()
        except StoreUnavailable as error:
            raise unavailable("batch store", error) from None

    async def _create(self, body: bytes, owner: str | None) -> BatchRecord:
        raw = parse_json(body)
        try:
            request = BatchCreateRequest.model_validate(raw)
        except ValidationError as error:
            raise from_validation(error, raw) from None
        file = await self.files.info(owner, request.input_file_id)
        if file is None:
            raise file_not_found(request.input_file_id, "input_file_id")
        if file.purpose != "batch":
            raise ApiError(
                400,
                f"Invalid 'input_file_id': file '{file.id}' has purpose '{file.purpose}'; a batch runs a file uploaded "
                "with purpose 'batch'.",
                param="input_file_id",
            )
        running = [batch for batch in await self.store.owned(owner) if not batch.ended]
        if len(running) >= self.settings.max_batches_per_key:
            raise ApiError(
                429,
                f"This API key has {len(running)} batches not yet ended, this graph's limit "
                f"(gateway.batches.max_batches_per_key: {self.settings.max_batches_per_key}); create more once some "
                "have ended, or cancel some.",
                code="rate_limit_exceeded",
                retry_after=60,
            )
        now = int(time.time())
        record = BatchRecord(
            id=new_batch_id(),
            owner=owner,
            endpoint=request.endpoint,
            input_file_id=file.id,
            completion_window=request.completion_window,
            metadata=request.metadata,
            status="validating",
            created_at=now,
            expires_at=now + WINDOW_S[request.completion_window],
            counts=Counts(total=file.lines),
        )
        await self.store.create(record)
        return record

    async def _cancel(self, owner: str | None, batch_id: str) -> BatchRecord:
        """The batch marked cancelling (its runner stops it within seconds), or as it is if it is already."""
        while True:
            versioned = await self.store.read(owner, batch_id)
            if versioned is None:
                raise not_found(batch_id)
            record = versioned.record
            if record.status in ("cancelling", "cancelled"):
                return record
            if record.ended:
                raise ApiError(
                    400,
                    f"Batch '{batch_id}' has status '{record.status}' and cannot be cancelled: only a batch not yet "
                    "ended can be.",
                    code="batch_not_cancellable",
                )
            # One no runner has taken up ends at once (it has no answers); a running one is stopped by its runner.
            never_run = record.status == "validating" and not record.leased_to_another(process="")
            cancelling = record.moved("cancelling")
            ended = cancelling.moved("cancelled", lease=None) if never_run else cancelling
            try:
                await self.store.write(ended, versioned.revision)
                return ended
            except Conflict:
                continue  # its runner wrote its progress meanwhile: read it again
