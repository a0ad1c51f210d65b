"""The gateway's HTTP side: check the three generation APIs, pass everything else and every
response stream through to Dynamo's frontend, rewrite its errors in OpenAI's shape."""

from __future__ import annotations

import json
import logging
import time

import aiohttp
from aiohttp import web

from dynamo_oss.gateway.errors import ApiError, from_upstream, openai_error
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.gateway.validation import check_request

log = logging.getLogger("dynamo_oss.gateway")

CHECKED_ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses"}
HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "host", "keep-alive"}
MODELS_TTL_S = 2.0  # how long the frontend's model list is trusted (workers come and go)


class Gateway:
    def __init__(self, upstream: str, counter: PromptCounter | None) -> None:
        self.upstream = upstream.rstrip("/")
        self.counter = counter
        self.session: aiohttp.ClientSession | None = None
        self._models: dict[str, int] = {}
        self._models_at = 0.0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.cleanup_ctx.append(self._client)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def _client(self, app: web.Application):  # noqa: ANN202 - aiohttp's cleanup context
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        # No connection limit: aiohttp's default of 100 would cap the requests in flight upstream.
        connector = aiohttp.TCPConnector(limit=0)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        yield
        await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        api = CHECKED_ROUTES.get(request.path) if request.method == "POST" else None
        if api is not None:
            try:
                check_request(api, _json(body), await self.models(), self.counter)
            except ApiError as err:
                log.info("refused %s %s: %s", request.method, request.path, err.message)
                return web.json_response(err.body(), status=err.status)
        try:
            return await self._forward(request, body)
        except aiohttp.ClientError as err:
            return web.json_response(openai_error(502, f"Dynamo's frontend is unreachable: {err}"), status=502)

    async def models(self) -> dict[str, int]:
        """Served model ids and their context windows, from the frontend's /v1/models."""
        if time.monotonic() - self._models_at > MODELS_TTL_S:
            assert self.session is not None
            async with self.session.get(f"{self.upstream}/v1/models") as response:
                listing = await response.json()
            self._models = {m["id"]: int(m.get("context_window") or 0) for m in listing.get("data", [])}
            self._models_at = time.monotonic()
        return self._models

    async def _forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self.session.request(
            request.method, f"{self.upstream}{request.path_qs}", headers=headers, data=body
        ) as upstream:
            if upstream.status >= 400:
                payload = await upstream.read()
                return web.json_response(from_upstream(upstream.status, _json(payload)), status=upstream.status)
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None
