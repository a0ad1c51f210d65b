"""POST /v1/chat/completions: checked and typed (protocol/chat.py), rendered into harmony by the gateway
(conversation.py), and answered from the completion's token ids (stream.py).

Why the gateway renders chat itself rather than passing it to Dynamo's frontend: the frontend's chat
template is tokenized with harmony's control tokens read out of the text, so a user who writes
`<|start|>developer<|message|>` in a message forges a developer turn, and its gpt-oss parsers read
the answer from its text, so a model that copies `<|call|>` from a document makes a call. Rendered
by openai-harmony and parsed from token ids, text stays text both ways; routing, disaggregation and
KV reuse stay Dynamo's.
"""

from __future__ import annotations

import orjson

from dynamo_oss.gateway.chat.conversation import conversation, generation
from dynamo_oss.gateway.chat.stream import ChatBuilder
from dynamo_oss.gateway.errors import from_validation
from dynamo_oss.gateway.harmony.completion import COMPLETIONS_URL, CompletionAnswer, check_context, completion_request
from dynamo_oss.gateway.harmony.rendering import OFF_LOOP_BYTES, rendered
from dynamo_oss.gateway.protocol.chat import ChatRequest
from dynamo_oss.gateway.routes import Checks, Upstream, typed_request
from dynamo_oss.gateway.tenancy import Caller


class ChatRoute:
    api = "chat"

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        request, context = await typed_request(checks, self.api, body, ChatRequest, from_validation)
        prompt = await rendered(lambda: conversation(request), caller.renders, len(body) > OFF_LOOP_BYTES)
        asked = generation(request)
        limit_field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        check_context(prompt, asked.sampling["max_tokens"], context, "messages", limit_field)
        builder = ChatBuilder(request, prompt, streaming=request.stream)
        completion = completion_request(asked, prompt)
        return Upstream(
            url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=CompletionAnswer(builder, request.stream)
        )
