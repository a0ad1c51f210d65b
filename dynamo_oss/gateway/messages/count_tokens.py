"""POST /v1/messages/count_tokens: how many tokens a Messages request's prompt is, counted exactly.

Claude Code asks before it sends, to manage its context. The count is the prompt generation would
send, rendered by the same code (route.MessagesRoute.render): system, tools and thinking included;
it is the prompt the same request, served, reports in its usage (`input_tokens` and
`cache_read_input_tokens` together, as Anthropic splits them). Nothing reaches a worker. A count is
admitted as a request (the key's concurrent requests and requests a minute, the graph's capacity),
since rendering costs the gateway CPU, but is charged no tokens.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.gateway.messages.route import MessagesRoute, beta
from dynamo_oss.gateway.protocol.messages import BetaCountTokensRequest, CountTokensRequest
from dynamo_oss.gateway.routes import Checks
from dynamo_oss.gateway.tenancy import Caller

PATH = b"/v1/messages/count_tokens"


class CountTokensRoute:
    api = "count_tokens"  # rendering costs CPU: a count is admitted as a request of the key's share

    def __init__(self, messages: MessagesRoute) -> None:
        self.messages = messages

    async def answer(
        self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller
    ) -> tuple[int, dict[str, Any]]:
        model = BetaCountTokensRequest if beta(url) else CountTokensRequest
        turn = await self.messages.render(body, checks, caller, model)
        return 200, {"input_tokens": len(turn.prompt.token_ids)}
