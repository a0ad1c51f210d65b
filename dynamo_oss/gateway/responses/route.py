"""POST /v1/responses, owned by the gateway: Dynamo 1.6's own Responses adapter returns no
reasoning, refuses hosted tools and has no namespaces (dynamo issue 14069).

The request is checked and rendered into harmony here (conversation.py); Dynamo's frontend gets
a plain completion of those token ids (completion.py), so routing, disaggregation and KV reuse
are all Dynamo's; and the completion's text comes back as the Responses answer (stream.py).
"""

from __future__ import annotations

import orjson

from dynamo_oss.gateway.completion import COMPLETIONS_URL, CompletionAnswer, check_context, completion_request, rendered
from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.responses.conversation import Prompt
from dynamo_oss.gateway.responses.sealed_reasoning import ReasoningSeal
from dynamo_oss.gateway.responses.stream import ResponseBuilder
from dynamo_oss.gateway.routes import Checks, Upstream, typed_request


class ResponsesRoute:
    api = "responses"

    def __init__(self, seal: ReasoningSeal) -> None:
        self.seal = seal

    async def prepare(self, url: bytes, body: bytes, checks: Checks) -> Upstream:
        request, context = await typed_request(checks, self.api, body, ResponsesRequest, from_validation)
        if request.previous_response_id is not None:
            raise ApiError(400, "Invalid 'previous_response_id': this endpoint keeps no responses; send the whole "
                           "conversation as 'input' (with store: false).", param="previous_response_id",
                           code="unsupported_parameter")  # fmt: skip
        prompt = await rendered(request, self.seal, len(body))
        check_context(prompt, request.max_output_tokens, context, "input", "max_output_tokens")
        completion = completion_request(request, prompt)
        transform = ResponsesAnswer(request, prompt, self.seal)
        return Upstream(url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=transform)


class ResponsesAnswer(CompletionAnswer):
    """The completion's SSE chunks in; Responses events out as they come (text/event-stream), or,
    for a client that does not stream, one Response object at the end (application/json)."""

    def __init__(self, request: ResponsesRequest, prompt: Prompt, seal: ReasoningSeal) -> None:
        super().__init__(ResponseBuilder(request, prompt, seal, streaming=request.stream), request.stream)
