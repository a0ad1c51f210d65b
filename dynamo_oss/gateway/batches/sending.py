"""A batch line's request as the gateway sends any client's: through the route of its endpoint (checked,
rendered and salted for its key's tenant), to a Dynamo frontend over the exchange no client reads
(forwarding.Clientless), its tokens billed to its key. What the line gets is what a client sending the same
request would get: the route's answer, or its error in OpenAI's shape."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import aiohttp
import orjson

from dynamo_oss.gateway.batches.metrics import count_line
from dynamo_oss.gateway.batches.records import TokenUsage
from dynamo_oss.gateway.batches.runner import Sent
from dynamo_oss.gateway.errors import ApiError, openai_error
from dynamo_oss.gateway.forwarding import Clientless
from dynamo_oss.gateway.latency import StreamTiming
from dynamo_oss.gateway.routes import is_local
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
        """The line's answer. Only a request that reached a frontend is counted as a batch request (what the
        planner takes off the traffic Dynamo saw): one the route refused, or no frontend took, is not."""
        gateway = self.gateway
        if gateway.keys is not None and self.owner is not None and self.owner not in gateway.keys.names:
            message = f"The API key that made this batch ({self.owner}) is no longer one of this graph's keys."
            return Sent(401, openai_error(401, message, code="invalid_api_key"), TokenUsage(), retryable=False)
        route = gateway.routes.exact[(b"POST", self.url)]
        assert not is_local(route)  # every batch endpoint is a generation route
        caller = gateway.caller(self.owner)
        try:
            upstream = await route.prepare(self.url, self.body, gateway, caller)
        except ApiError as error:
            return Sent(error.status, error.body(), TokenUsage(), retryable=error.status >= 500)
        if self.left:
            return Sent(0, {}, TokenUsage(), retryable=False, left=True)
        collected: list[bytes] = []
        headers = gateway.tenants.salted(list(HEADERS), caller)
        self.exchange = Clientless(
            gateway, route.api, b"POST", headers, upstream, lambda data, last: collected.append(data)
        )
        transform = upstream.transform
        # An answer not timed by its transform (a plain completion, not streamed) is timed here, its first token
        # taken as its end: the batch's own pace still has its round trips to go by.
        timing = transform.timing if transform is not None and transform.timing is not None else StreamTiming()
        gateway.latency.began(timing, interactive=False, prompt_tokens=transform.spent if transform else 0)
        try:
            await self.exchange.forward()
        except (OSError, TimeoutError, aiohttp.ClientError) as error:  # ConnectionError among them
            message = f"Dynamo's frontend is unavailable ({error or type(error).__name__}); retry shortly."
            body = openai_error(503, message, code="frontend_unavailable")
            return Sent(503, body, TokenUsage(), retryable=True, left=self.left)
        finally:
            timing.first_at = timing.first_at or time.monotonic()
            gateway.latency.ended(timing)
        billed = transform.billed if transform is not None else None
        count_tokens(self.owner, billed)
        usage = _usage(billed)
        if self.exchange.error is not None:
            status = self.exchange.status or 503
            sent = Sent(status, self.exchange.error, usage, retryable=status >= 500, left=self.left)
        elif self.left and not collected:
            sent = Sent(0, {}, usage, retryable=False, left=True)
        else:
            sent = Sent(200, orjson.loads(b"".join(collected)), usage, retryable=False)
        count_line(self.owner, LEFT if sent.left else sent.status, sent.usage)
        return sent

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
