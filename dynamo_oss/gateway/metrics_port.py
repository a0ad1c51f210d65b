"""The gateway's metrics port, apart from the endpoint: its own series at /metrics (requests and tokens per
API key, usage.py, summed over its processes), and Dynamo's frontend's at /metrics/frontend.

Why a port of its own: the series name every key, which no client should read, and the endpoint
serves only its own routes (routes.py), never a /metrics. Why the frontend's too: on Kubernetes
Dynamo's frontend listens on the pod's loopback behind the gateway, where no Prometheus reaches
it, so the PodMonitor scrapes it through this port; the frontend Service exposes only the endpoint.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dynamo_oss.catalog.names import FRONTEND_METRICS_PATH


async def serve_metrics(host: str, port: int, upstream: str, registry: CollectorRegistry) -> web.AppRunner:
    """Listen on host:port until the returned runner is cleaned up, serving `registry` (every gateway
    process's series, processes.py); `upstream` is a Dynamo frontend."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def own(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"content-type": CONTENT_TYPE_LATEST})

    async def frontend(_: web.Request) -> web.Response:
        try:
            async with session.get(f"{upstream}/metrics") as reply:
                return web.Response(
                    body=await reply.read(),
                    status=reply.status,
                    headers={"content-type": reply.headers.get("content-type", "text/plain")},
                )
        except (OSError, aiohttp.ClientError, TimeoutError) as error:
            return web.Response(status=503, text=f"Dynamo's frontend is unavailable: {error}\n")

    async def close_session(_: web.Application) -> None:
        await session.close()

    app = web.Application()
    app.router.add_get("/metrics", own)
    app.router.add_get(FRONTEND_METRICS_PATH, frontend)
    app.on_cleanup.append(close_session)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
