"""The gateway under many streams: every request a client has in flight is in flight at Dynamo's
frontend too (aiohttp's default connection pool would hold all but 100 back)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import yaml

from tests.support.served import ServedGraph

STREAMS = 120  # above aiohttp's default pool of 100 connections
INFLIGHT = "dynamo_frontend_inflight_requests"


async def frontend_inflight(client: httpx.AsyncClient, frontend: str) -> float:
    text = (await client.get(f"{frontend}/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(INFLIGHT))


async def hold_streams(endpoint: str, frontend: str, count: int, timeout_s: float) -> float:
    """Open `count` streams through the gateway and return the most the frontend saw at once."""
    release = asyncio.Event()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def stream(index: int) -> None:
            body = {
                "model": "openai/gpt-oss-20b",
                "stream": True,
                "max_tokens": 4000,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": f"stream {index}"}],
            }
            async with client.stream("POST", f"{endpoint}/chat/completions", json=body) as response:
                assert response.status_code == 200
                await release.wait()

        tasks = [asyncio.create_task(stream(i)) for i in range(count)]
        deadline, seen = time.monotonic() + timeout_s, 0.0
        try:
            while seen < count and time.monotonic() < deadline and not any(t.done() for t in tasks):
                seen = max(seen, await frontend_inflight(client, frontend))
                await asyncio.sleep(0.2)
        finally:
            release.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return seen


def test_the_gateway_does_not_cap_streams_in_flight(slowed_pair: ServedGraph) -> None:
    # Slowed 20x: every stream is still decoding when the last one opens.
    frontend = f"http://127.0.0.1:{yaml.safe_load(slowed_pair.graph.read_text())['frontend']['dynamo_port']}"
    seen = asyncio.run(hold_streams(slowed_pair.endpoint, frontend, STREAMS, timeout_s=60))
    assert seen == pytest.approx(STREAMS), f"the frontend saw at most {seen:.0f} of {STREAMS} streams in flight"
