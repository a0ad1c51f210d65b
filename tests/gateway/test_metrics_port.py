"""The gateway's metrics port serves each Dynamo frontend behind it, so a Prometheus on another host
(the infrastructure node's, a PodMonitor) reads frontends that listen only on loopback."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from dynamo_oss.gateway.metrics_port import serve_metrics
from tests.support.ports import free_ports


async def _fake_frontend(port: int, text: str) -> web.AppRunner:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def _scrape(paths: list[str]) -> dict[str, tuple[int, str]]:
    first, second, metrics_port, nobody = free_ports(4)
    frontends = [await _fake_frontend(first, "first 1\n"), await _fake_frontend(second, "second 2\n")]
    upstreams = [f"http://127.0.0.1:{port}" for port in (first, second, nobody)]
    runner = await serve_metrics("127.0.0.1", metrics_port, upstreams, CollectorRegistry())
    try:
        async with aiohttp.ClientSession() as session:
            scraped = {}
            for path in paths:
                async with session.get(f"http://127.0.0.1:{metrics_port}{path}") as reply:
                    scraped[path] = (reply.status, await reply.text())
            return scraped
    finally:
        await runner.cleanup()
        for frontend in frontends:
            await frontend.cleanup()


def test_each_frontend_is_served_at_its_place_and_the_first_also_at_the_kubernetes_path() -> None:
    paths = ["/metrics/frontend", "/metrics/frontend/0", "/metrics/frontend/1", "/metrics/frontend/2"]
    scraped = asyncio.run(_scrape(paths))
    assert scraped["/metrics/frontend"] == scraped["/metrics/frontend/0"] == (200, "first 1\n")
    assert scraped["/metrics/frontend/1"] == (200, "second 2\n")
    status, text = scraped["/metrics/frontend/2"]  # a frontend that does not answer: its target is down
    assert status == 503 and "Dynamo's frontend is unavailable" in text
