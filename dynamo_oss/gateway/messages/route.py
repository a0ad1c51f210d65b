"""POST /v1/messages, Anthropic's Messages API, owned by the gateway: Claude Code and other
Anthropic-SDK clients speak it, and Dynamo 1.6 has it only behind an experimental flag.

The request is checked and typed here (protocol/messages.py), mapped onto the Responses models
(conversation.py), rendered into harmony as a Responses request is (harmony/conversation.py), and
run as a plain completion (harmony/completion.py); the completion comes back as a Message (stream.py).
"""

from __future__ import annotations

import orjson

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.harmony import conversation as harmony
from dynamo_oss.gateway.harmony.completion import COMPLETIONS_URL, CompletionAnswer, check_context, completion_request
from dynamo_oss.gateway.harmony.rendering import OFF_LOOP_BYTES, rendered
from dynamo_oss.gateway.harmony.sealing import ReasoningSeal
from dynamo_oss.gateway.messages.conversation import conversation
from dynamo_oss.gateway.messages.errors import invalid_request
from dynamo_oss.gateway.messages.stream import MessageBuilder
from dynamo_oss.gateway.protocol.messages import BetaMessagesRequest, MessagesRequest
from dynamo_oss.gateway.routes import Checks, Upstream, typed_request
from dynamo_oss.gateway.tenancy import Caller


class MessagesRoute:
    api = "messages"

    def __init__(self, seal: ReasoningSeal) -> None:
        self.seal = seal

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        beta = b"beta=true" in url.partition(b"?")[2].split(b"&")
        model = BetaMessagesRequest if beta else MessagesRequest
        request, context = await typed_request(checks, self.api, body, model, invalid_request)
        if isinstance(request, BetaMessagesRequest) and request.mcp_servers:
            raise ApiError(
                400,
                "mcp_servers: MCP servers are not supported here: connect them to the client "
                "(Claude Code runs its MCP servers itself).",
                param="mcp_servers",
            )
        seal = self.seal.bound(caller.tenant, request.model)
        talk = conversation(request, seal)
        heavy = len(body) > OFF_LOOP_BYTES
        prompt = await rendered(lambda: harmony.conversation(talk.request, seal), caller.renders, heavy)
        check_context(prompt, request.max_tokens, context, "messages", "max_tokens")
        asked = harmony.generation(talk.request)
        asked.sampling["top_k"] = request.top_k
        completion = completion_request(asked, prompt)
        builder = MessageBuilder(request, prompt, seal, talk.thinking, streaming=request.stream)
        return Upstream(
            url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=CompletionAnswer(builder, request.stream)
        )
