"""The gateway's metrics port, apart from the endpoint: its own series at /metrics (requests and tokens per
API key, usage.py, summed over its processes), and Dynamo's frontends' at /metrics/frontend (the
first) and /metrics/frontend/I (each, by its place in the gateway's upstreams).

Why a port of its own: the series name every key, which no client should read, and the endpoint
serves only its own routes (routes.py), never a /metrics. Why the frontends' too: Dynamo's frontend
listens on loopback behind the gateway, where no Prometheus of another host reaches it, so the
PodMonitor on Kubernetes, and the infrastructure node's Prometheus for a frontend node of a
bare-metal graph, scrape it through this port; the endpoint exposes none of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from dynamo_oss.catalog.names import FRONTEND_METRICS_PATH, frontend_metrics_path


async def serve_metrics(host: str, port: int, upstreams: list[str], registry: CollectorRegistry) -> web.AppRunner:
    """Listen on host:port until the returned runner is cleaned up, serving `registry` (every gateway
    process's series, processes.py); `upstreams` are the Dynamo frontends."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def own(request: web.Request) -> web.Response:
        # OpenMetrics to a scraper that asks for it (Prometheus does): the only format that carries exemplars.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"content-type": content_type})

    def proxy(upstream: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def frontend(_: web.Request) -> web.Response:
            return await _frontend_metrics(session, upstream)

        return frontend

    async def close_session(_: web.Application) -> None:
        await session.close()

    app = web.Application()
    app.router.add_get("/metrics", own)
    app.router.add_get(FRONTEND_METRICS_PATH, proxy(upstreams[0]))
    for index, upstream in enumerate(upstreams):
        app.router.add_get(frontend_metrics_path(index), proxy(upstream))
    app.on_cleanup.append(close_session)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def _frontend_metrics(session: aiohttp.ClientSession, upstream: str) -> web.Response:
    """A frontend's /metrics as it answered, or a 503 (Prometheus marks the target down) when it did not."""
    try:
        async with session.get(f"{upstream}/metrics") as reply:
            return web.Response(
                body=await reply.read(),
                status=reply.status,
                headers={"content-type": reply.headers.get("content-type", "text/plain")},
            )
    except (OSError, aiohttp.ClientError, TimeoutError) as error:
        return web.Response(status=503, text=f"Dynamo's frontend is unavailable: {error}\n")
