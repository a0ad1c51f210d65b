"""POST /v1/messages, Anthropic's Messages API, owned by the gateway: Claude Code and other
Anthropic-SDK clients speak it, and Dynamo 1.6 has it only behind an experimental flag.

The request is checked and typed here (protocol/messages.py), mapped onto the Responses models
(conversation.py), rendered into harmony as a Responses request is (harmony/conversation.py), and
run as a plain completion (harmony/completion.py); the completion comes back as a Message (stream.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.harmony import conversation as harmony
from dynamo_oss.gateway.harmony.completion import COMPLETIONS_URL, CompletionAnswer, check_context, completion_request
from dynamo_oss.gateway.harmony.rendering import OFF_LOOP_BYTES, Prompt, rendered
from dynamo_oss.gateway.harmony.sealing import BoundSeal, ReasoningSeal
from dynamo_oss.gateway.messages.conversation import Conversation, conversation
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
        turn = await self.render(body, checks, caller, BetaMessagesRequest if beta(url) else MessagesRequest)
        request, prompt = turn.request, turn.prompt
        check_context(prompt, request.max_tokens, turn.context, "messages", "max_tokens")
        asked = harmony.generation(turn.talk.request)
        asked.sampling["top_k"] = request.top_k
        completion = completion_request(asked, prompt)
        builder = MessageBuilder(request, prompt, turn.seal, turn.talk.thinking, streaming=request.stream)
        return Upstream(
            url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=CompletionAnswer(builder, request.stream)
        )

    async def render(self, body: bytes, checks: Checks, caller: Caller, model: type[MessagesRequest]) -> Turn:
        """The request checked as `model` and its prompt rendered: what generation sends, and what
        POST /v1/messages/count_tokens counts."""
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
        return Turn(request, context, seal, talk, prompt)


@dataclass
class Turn:
    """A Messages request, rendered."""

    request: MessagesRequest
    context: int  # the model's context window (0: unknown)
    seal: BoundSeal
    talk: Conversation
    prompt: Prompt


def beta(url: bytes) -> bool:
    """`?beta=true`: the beta Messages API, as Claude Code and the SDK's `client.beta.messages` call it."""
    return b"beta=true" in url.partition(b"?")[2].split(b"&")
