"""A batch line's request as the gateway sends any client's: through the route of its endpoint (checked,
rendered and salted for its key's tenant), to a Dynamo frontend over the exchange no client reads
(forwarding.Clientless), its tokens billed to its key. What the line gets is what a client sending the same
request would get: the route's answer, or its error in OpenAI's shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
import orjson

from dynamo_oss.gateway.batches.metrics import STARTED, count_line
from dynamo_oss.gateway.batches.records import TokenUsage
from dynamo_oss.gateway.batches.runner import Sent
from dynamo_oss.gateway.errors import ApiError, openai_error
from dynamo_oss.gateway.forwarding import Clientless
from dynamo_oss.gateway.routes import LocalRoute
from dynamo_oss.gateway.usage import Usage, count_tokens

if TYPE_CHECKING:
    from dynamo_oss.gateway.app import Gateway

HEADERS = [(b"host", b"dynamo-oss-batch"), (b"content-type", b"application/json")]
LEFT = 499  # the status a left line's request is counted with (nginx's: the client closed the request)


class GatewayLine:
    """One line's request (runner.LineExchange) through `gateway`."""

    def __init__(self, gateway: Gateway, owner: str | None, endpoint: str, body: bytes) -> None:
        self.gateway, self.owner, self.url, self.body = gateway, owner, endpoint.encode(), body
        self.exchange: Clientless | None = None
        self.left = False

    async def answer(self) -> Sent:
        STARTED.inc()
        sent = await self._answer()
        count_line(self.owner, LEFT if sent.left else sent.status, sent.usage)
        return sent

    async def _answer(self) -> Sent:
        gateway = self.gateway
        route = gateway.routes.exact[(b"POST", self.url)]
        assert not isinstance(route, LocalRoute)  # every batch endpoint is a generation route
        caller = gateway.caller(self.owner)
        try:
            upstream = await route.prepare(self.url, self.body, gateway, caller)
        except ApiError as error:
            return Sent(error.status, error.body(), TokenUsage(), retryable=error.status >= 500)
        collected: list[bytes] = []
        headers = gateway.tenants.salted(list(HEADERS), caller)
        self.exchange = Clientless(
            gateway, route.api, b"POST", headers, upstream, lambda data, last: collected.append(data)
        )
        transform = upstream.transform
        timing = transform.timing if transform is not None else None
        if timing is not None:
            assert transform is not None
            gateway.latency.began(timing, interactive=False, prompt_tokens=transform.spent)
        try:
            if self.left:
                return Sent(0, {}, TokenUsage(), retryable=False, left=True)
            await self.exchange.forward()
        except (OSError, TimeoutError, aiohttp.ClientError) as error:  # ConnectionError among them
            message = f"Dynamo's frontend is unavailable ({error or type(error).__name__}); retry shortly."
            body = openai_error(503, message, code="frontend_unavailable")
            return Sent(503, body, TokenUsage(), retryable=True, left=self.left)
        finally:
            if timing is not None:
                gateway.latency.ended(timing)
        billed = transform.billed if transform is not None else None
        count_tokens(self.owner, billed)
        usage = _usage(billed)
        if self.exchange.error is not None:
            status = self.exchange.status or 503
            return Sent(status, self.exchange.error, usage, retryable=status >= 500, left=self.left)
        if self.left and not collected:
            return Sent(0, {}, usage, retryable=False, left=True)
        return Sent(200, orjson.loads(b"".join(collected)), usage, retryable=False)

    def leave(self) -> None:
        self.left = True
        if self.exchange is not None:
            self.exchange.leave()


def _usage(billed: Usage | None) -> TokenUsage:
    if billed is None:
        return TokenUsage()
    return TokenUsage(
        input_tokens=billed.input,
        cached_tokens=billed.cached,
        output_tokens=billed.output,
        reasoning_tokens=billed.reasoning,
    )
