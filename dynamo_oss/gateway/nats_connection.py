"""The gateway's connection to the graph's NATS (config.NatsConnection), made the one way for everything
the gateway keeps there: the URL given or read from a file another process writes (on Kubernetes the
frontend's container, which alone is given NATS_SERVER), the node's certificate when NATS asks for
one, and names prefixed as the graph says (one NATS may serve graphs of several namespaces).

The connection is remade by the client after NATS restarts; a first connection that fails is the
caller's to try again.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client

from dynamo_oss.gateway.config import NatsConnection, NatsTlsFiles

CONNECT_TIMEOUT_S = 2.0  # a first connection that takes longer is given up (and tried again by its caller)
ADDRESS_WAIT_S = 0.5  # how often an address file that is not written yet is read again
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
