"""POST /v1/responses/input_tokens: how many tokens a Responses request's input is, counted exactly.

OpenAI's API answers it so a client can manage its context before it sends; Dynamo's frontend
answers at best an estimate. Here the count is the prompt generation would send, rendered by the
same code (route.ResponsesRoute.render): instructions, tools, item references and the stored
conversation of `previous_response_id` included. It is the `usage.input_tokens` the same request,
served, reports. Nothing reaches a worker, and no model capacity is taken.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.gateway.responses.route import ResponsesRoute
from dynamo_oss.gateway.routes import Checks
from dynamo_oss.gateway.tenancy import Caller

PATH = b"/v1/responses/input_tokens"


class InputTokensRoute:
    api = None  # a count generates nothing: it is not admitted against the graph's capacity

    def __init__(self, responses: ResponsesRoute) -> None:
        self.responses = responses

    async def answer(
        self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller
    ) -> tuple[int, dict[str, Any]]:
        turn = await self.responses.render(body, checks, caller)
        return 200, {"object": "response.input_tokens", "input_tokens": len(turn.prompt.token_ids)}
