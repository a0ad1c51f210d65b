"""POST /v1/responses/input_tokens: how many tokens a Responses request's input is, counted exactly.

OpenAI's API answers it so a client can manage its context before it sends; Dynamo's frontend
answers at best an estimate. Here the count is the prompt generation would send, rendered by the
same code (route.ResponsesRoute.render): instructions, tools, item references and the stored
conversation of `previous_response_id` included. It is the `usage.input_tokens` the same request,
served, reports. Nothing reaches a worker. A count is admitted as a request (the key's concurrent
requests and requests a minute, the graph's capacity), since rendering costs the gateway CPU, but is
charged no tokens.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.gateway.responses.route import ResponsesRoute
from dynamo_oss.gateway.routes import Checks
from dynamo_oss.gateway.tenancy import Caller

PATH = b"/v1/responses/input_tokens"


class InputTokensRoute:
    api = "input_tokens"  # rendering costs CPU: a count is admitted as a request of the key's share

    def __init__(self, responses: ResponsesRoute) -> None:
        self.responses = responses

    async def answer(
        self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller
    ) -> tuple[int, dict[str, Any]]:
        turn = await self.responses.render(body, checks, caller)
        return 200, {"object": "response.input_tokens", "input_tokens": len(turn.prompt.token_ids)}
