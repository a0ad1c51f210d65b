"""The gateway's connection to the graph's NATS (config.NatsConnection), made the one way for everything
the gateway keeps there: the URL given or read from a file another process writes (on Kubernetes the
frontend's container, which alone is given NATS_SERVER), the node's certificate when NATS asks for
one, and names prefixed as the graph says (one NATS may serve graphs of several namespaces).

A serving process keeps one such connection (`GraphNats`) for all it keeps there: stored responses,
their events and runners, files and batches. It is made in the background and remade by the client after
NATS restarts; until it is up, every call raises StoreUnavailable, which the routes answer with a
retryable 503, so a gateway serves every other request while NATS is away. The JetStream streams behind
its key-value buckets are made the one way too (`kv_stream`, `ensure_stream`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue

from dynamo_oss.gateway.config import NatsConnection, NatsTlsFiles
from dynamo_oss.gateway.stores import StoreUnavailable

log = logging.getLogger("dynamo_oss.gateway.store")

CONNECT_TIMEOUT_S = 2.0  # a first connection that takes longer is given up (and tried again by its caller)
REQUEST_TIMEOUT_S = 5.0  # one JetStream call
HEADROOM = 4096  # bytes of a message kept for its subject and headers, below NATS's largest message
ADDRESS_WAIT_S = 0.5  # how often an address file that is not written yet is read again
T = TypeVar("T")
NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


class NatsAddressUnreadable(OSError):
    """The file that should hold NATS's URL is there but cannot be read: waiting would wait for ever."""


def prefixed(connection: NatsConnection, name: str) -> str:
    """`name` as the graph's gateway calls it in NATS: after the prefix the environment gives, if any."""
    if connection.prefix_env:
        name = f"{os.environ.get(connection.prefix_env, '')}-{name}"
    if not name or not set(name) <= NAME_CHARACTERS:
        raise ValueError(f"{name!r}: a name in NATS is made of letters, digits, - and _")
    return name


def tls_context(files: NatsTlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


async def connect(
    connection: NatsConnection, name: str, error_cb: Callable[[Exception], Awaitable[None]], **callbacks: object
) -> Client:
    """A client of the graph's NATS named `name` (what NATS's monitoring shows), reconnecting for ever
    once connected; `callbacks` are nats.connect's (disconnected_cb, reconnected_cb, ...)."""
    return await nats.connect(
        connection.url or await server_url(connection),
        name=name,
        connect_timeout=CONNECT_TIMEOUT_S,
        allow_reconnect=True,
        max_reconnect_attempts=-1,  # once connected, the client reconnects after NATS restarts
        tls=tls_context(connection.tls) if connection.tls else None,
        error_cb=error_cb,
        **callbacks,  # type: ignore[arg-type]
    )


async def server_url(connection: NatsConnection) -> str:
    """NATS's URL: given, or read from its file once written."""
    if connection.url is not None:
        return connection.url
    assert connection.url_file is not None
    while True:
        try:
            text = connection.url_file.read_text().strip()
        except FileNotFoundError:
            text = ""  # not written yet (the frontend's container writes it as it starts)
        except OSError as error:  # there but unreadable (its mode)
            raise NatsAddressUnreadable(f"cannot read the NATS address in {connection.url_file}: {error}") from None
        if text:
            return text
        await asyncio.sleep(ADDRESS_WAIT_S)


class GraphNats:
    """The serving process's one connection to the graph's NATS, for everything it keeps there."""

    def __init__(self, connection: NatsConnection) -> None:
        self.connection = connection
        self._client: Client | None = None
        self._connecting: asyncio.Task[Client] | None = None

    def start(self) -> None:
        """Connect in the background, so the first request that keeps something does not wait for it."""
        self._connect_task()

    async def client(self) -> Client:
        """The connection, once up; StoreUnavailable when NATS cannot be reached within CONNECT_TIMEOUT_S."""
        if self._client is not None and not self._client.is_closed:
            return self._client
        task = self._connect_task()
        try:
            return await asyncio.wait_for(asyncio.shield(task), CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise StoreUnavailable("the graph's NATS is not reachable yet") from None
        except (nats.errors.Error, OSError) as error:
            raise StoreUnavailable(f"the graph's NATS is not reachable ({error or type(error).__name__})") from None

    async def jetstream(self) -> JetStreamContext:
        return (await self.client()).jetstream(timeout=REQUEST_TIMEOUT_S)

    async def close(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._client is not None and not self._client.is_closed:
            await self._client.close()

    def _connect_task(self) -> asyncio.Task[Client]:
        lost = self._client is None or self._client.is_closed  # never made, or closed for good (an auth error)
        if self._connecting is None or (self._connecting.done() and lost):
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            self._connecting.add_done_callback(_retrieved)
        return self._connecting

    async def _connect(self) -> Client:
        try:
            self._client = await connect(self.connection, "dynamo-oss-gateway", _log_error)
        except NatsAddressUnreadable as error:
            raise StoreUnavailable(str(error)) from None
        return self._client


async def answered(call: Awaitable[T]) -> T:
    """A NATS call's result; StoreUnavailable when NATS does not answer. JetStream's own answers about what it
    keeps (no such key or object, a conditional write's conflict) are the caller's to read."""
    try:
        return await asyncio.wait_for(call, REQUEST_TIMEOUT_S)
    except (nats.js.errors.NotFoundError, nats.js.errors.KeyWrongLastSequenceError):
        raise
    except (nats.errors.Error, OSError, TimeoutError) as error:
        raise StoreUnavailable(f"NATS did not answer ({error or type(error).__name__})") from None


async def kv_values(kv: KeyValue, keys: str) -> list[tuple[str, bytes]]:
    """Every (key, value) of `kv` under `keys` (a subject pattern: `>` for all), read once, deletes left out."""
    watcher = await answered(kv.watch(keys, ignore_deletes=True))
    found = []
    try:
        while (entry := await answered(watcher.updates(REQUEST_TIMEOUT_S))) is not None:
            if entry.value:
                found.append((entry.key, entry.value))
    finally:
        await watcher.stop()
    return found


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
        log.warning("cannot reach the graph's NATS yet: %s", task.exception())


async def _log_error(error: Exception) -> None:
    log.warning("the graph's NATS: %s", error)
