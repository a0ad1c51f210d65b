"""Questions the launcher asks the running graph: is etcd up, who registered, is the model served.

Each probe answers once and never raises for a service that is merely not up yet;
`wait_until` turns a probe into a wait with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

import httpx

from dynamo_oss.deployment.access import EtcdAccess, InfrastructureTls

PROBE_TIMEOUT_S = 2.0


class NotReady(TimeoutError):
    """A condition did not hold before its deadline."""


async def wait_until(condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise NotReady(f"{what}: not reached within {timeout_s:.0f} s")
        await asyncio.sleep(0.25)


@functools.cache
def trust_store() -> ssl.SSLContext:
    """httpx's default trust store, built once: httpx would load the CA bundle afresh for every
    client (50-150 ms of CPU), and the launcher asks its questions several times a second."""
    return httpx.create_ssl_context()


def _client(base_url: str = "", verify: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=PROBE_TIMEOUT_S, verify=verify or trust_store())


def _etcd_client(etcd: EtcdAccess) -> httpx.AsyncClient:
    """A client of etcd's JSON gateway, showing the node's certificate when etcd speaks mutual TLS."""
    return _client(etcd.endpoint, etcd.tls.client_context() if etcd.tls else None)


async def etcd_healthy(etcd: EtcdAccess) -> bool:
    try:
        async with _etcd_client(etcd) as client:
            response = await client.get("/health")
        return response.status_code == 200 and response.json().get("health") == "true"
    except (httpx.HTTPError, ValueError, OSError):  # OSError: the TLS files, mid-rotation
        return False


async def tcp_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


async def nats_answers(host: str, port: int, tls: InfrastructureTls | None) -> bool:
    """NATS greets a client with its INFO line, and, when it speaks TLS, completes the handshake
    with the node's certificate (nats-server logs a bare TCP probe as a failed handshake)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        if not (await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_S)).startswith(b"INFO"):
            return False
        if tls is not None:
            await asyncio.wait_for(writer.start_tls(tls.client_context(), server_hostname=host), PROBE_TIMEOUT_S)
        return True
    except (OSError, asyncio.TimeoutError, ssl.SSLError):
        return False
    finally:
        writer.close()


async def etcd_entries(etcd: EtcdAccess, prefix: str) -> dict[str, str] | None:
    """Keys and values under a prefix, through etcd's JSON gateway (works for embedded and external
    etcd); None when etcd does not answer."""
    range_end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = {"key": _b64(prefix), "range_end": _b64(range_end)}
    try:
        async with _etcd_client(etcd) as client:
            response = await client.post("/v3/kv/range", json=body)
        response.raise_for_status()
        kvs = response.json().get("kvs", [])
    except (httpx.HTTPError, ValueError, OSError):  # OSError: the TLS files, mid-rotation
        return None
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode(errors="replace")
        for kv in kvs
    }


async def etcd_keys(etcd: EtcdAccess, prefix: str) -> list[str]:
    """Keys under a prefix (empty while etcd does not answer)."""
    return list(await etcd_entries(etcd, prefix) or {})


async def etcd_delete(etcd: EtcdAccess, key: str) -> bool:
    """Delete one key; True when it was there."""
    async with _etcd_client(etcd) as client:
        response = await client.post("/v3/kv/deleterange", json={"key": _b64(key)})
    response.raise_for_status()
    return int(response.json().get("deleted", 0)) > 0


async def worker_streams(host: str, port: int, namespace: str) -> dict[str, float] | None:
    """A worker's requests in flight on its public endpoint, by instance id (hex), read from its own
    /metrics; None when it does not answer."""
    label = f'dynamo_namespace="{namespace.replace("-", "_")}"'
    try:
        async with _client() as client:
            response = await client.get(f"http://{host}:{port}/metrics")
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    streams: dict[str, float] = {}
    for line in response.text.splitlines():
        if line.startswith("dynamo_component_inflight_requests{") and label in line:
            labels, value = line.rsplit(" ", 1)
            worker_id = labels.split('worker_id="', 1)[1].split('"', 1)[0]
            streams[worker_id] = streams.get(worker_id, 0.0) + float(value)
    return streams


def instances_prefix(namespace: str, component: str) -> str:
    """Where Dynamo registers the workers serving `dyn://namespace.component.generate`."""
    return f"v1/instances/{namespace}/{component}/generate/"


async def served_models(endpoint: str) -> list[str]:
    """Model ids the OpenAI endpoint lists (empty while it is not up)."""
    try:
        async with _client() as client:
            response = await client.get(f"{endpoint}/models")
        response.raise_for_status()
        return [model["id"] for model in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError):
        return []


async def http_ok(url: str) -> bool:
    """A GET of `url` answers 200."""
    try:
        async with _client() as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (a bind attempt, as a server would make)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
