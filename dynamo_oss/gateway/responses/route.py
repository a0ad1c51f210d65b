"""POST /v1/responses, owned by the gateway: Dynamo 1.6's own Responses adapter returns no
reasoning, refuses hosted tools and has no namespaces (dynamo issue 14069).

The request is checked and rendered into harmony here (harmony/conversation.py); Dynamo's frontend
gets a plain completion of those token ids (harmony/completion.py), so routing, disaggregation and KV reuse
are all Dynamo's; and the completion's text comes back as the Responses answer (stream.py).

Stored responses (store.py): unless a request says `store: false`, its answer is stored before
its last bytes go out, so a client that has read a response can continue from it at once, on any
gateway of the graph. A continuation (`previous_response_id`) is rendered as if the client had
sent the stored conversation and its new input whole, which by harmony's rendering makes the
previous turn's prompt a prefix of the new one: the KV router finds it on the worker that holds it.

A background request (`background: true`, stored) is checked and rendered as any other, then answered at
once, queued, while its completion runs on without the client (background.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import TypeAdapter

from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.harmony.completion import COMPLETIONS_URL, CompletionAnswer, check_context, completion_request
from dynamo_oss.gateway.harmony.conversation import conversation, generation
from dynamo_oss.gateway.harmony.rendering import OFF_LOOP_BYTES, OFF_LOOP_ITEMS, Prompt, rendered
from dynamo_oss.gateway.harmony.sealing import BoundSeal, ReasoningSeal
from dynamo_oss.gateway.limits import Limits
from dynamo_oss.gateway.ids import ItemIds, new_id, response_of
from dynamo_oss.gateway.protocol.responses import InputItem, ResponsesRequest
from dynamo_oss.gateway.responses.background import BackgroundAnswer, BackgroundResponses
from dynamo_oss.gateway.responses.references import references, resolved
from dynamo_oss.gateway.responses.store import BackgroundRun, ResponseStore, StoredResponse
from dynamo_oss.gateway.stores import Conflict, StoreUnavailable, unavailable
from dynamo_oss.gateway.responses.stored import find
from dynamo_oss.gateway.responses.stream import ResponseBuilder
from dynamo_oss.gateway.routes import Checks, Upstream, typed_request
from dynamo_oss.gateway.tenancy import Caller

log = logging.getLogger("dynamo_oss.gateway")

ITEMS = TypeAdapter(list[InputItem])
ITEM_ID_PREFIXES = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "custom_tool_call": "ctc",
    "function_call_output": "fco",
    "custom_tool_call_output": "ctco",
}
_INPUT_INDEX = re.compile(r"input\[(\d+)\]")
# The header Dynamo's frontend reads a request's session from (agent_context.session_id); a client that
# sends its own keeps it.
SESSION_HEADER = b"x-dynamo-session-id"
MAX_SESSION_CHARS = 256


@dataclass
class Turn:
    """A Responses request, rendered: the prompt, and what its answer is stored with."""

    request: ResponsesRequest
    context: int  # the model's context window (0: unknown)
    seal: BoundSeal
    stored: bool  # its answer is to be stored
    ids: ItemIds  # the response's id and its items'
    inherited: list[dict[str, Any]]  # the stored conversation it continues
    own: list[dict[str, Any]]  # its input items, with ids (when stored or continued)
    prompt: Prompt


class ResponsesRoute:
    api = "responses"

    def __init__(
        self,
        seal: ReasoningSeal,
        store: ResponseStore | None = None,
        background: BackgroundResponses | None = None,
        max_body_bytes: int = Limits().max_body_bytes,
    ) -> None:
        self.seal = seal
        self.max_body_bytes = max_body_bytes  # what item references may come to, as a body may
        self.store = store  # None: the graph keeps no responses
        self.background = background  # None: no background responses (the graph keeps no responses)

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        turn = await self.render(body, checks, caller)
        request, prompt = turn.request, turn.prompt
        check_context(prompt, request.max_output_tokens, turn.context, "input", "max_output_tokens")
        completion = completion_request(generation(request), prompt)
        session = conversation_session(turn, caller.tenant)
        # Dynamo's KV router keeps a session on one worker (--router-session-affinity-ttl-secs).
        headers = ((SESSION_HEADER, session.encode()),) if session is not None else ()
        if request.background:
            return await self._background(turn, orjson.dumps(completion), caller, headers)
        if turn.stored:
            assert self.store is not None
            parts = StoredResponseParts(caller.key, turn.inherited, turn.own)
            transform: ResponsesAnswer = StoredResponsesAnswer(request, prompt, turn.seal, turn.ids, self.store, parts)
        else:
            transform = ResponsesAnswer(request, prompt, turn.seal, turn.ids)
        return Upstream(url=COMPLETIONS_URL, body=orjson.dumps(completion), transform=transform, headers=headers)

    async def _background(
        self, turn: Turn, completion: bytes, caller: Caller, headers: tuple[tuple[bytes, bytes], ...]
    ) -> Upstream:
        """A background response accepted: queued and stored, and its completion detached from the client."""
        if not turn.stored or self.background is None:
            why = "the request says store: false; send store: true or leave it out"
            if self.store is None:
                why = "this graph keeps no responses (gateway.responses.store is false)"
            raise ApiError(
                400,
                f"Invalid 'background': a background response must be stored, and {why}.",
                param="background",
                code="unsupported_parameter",
            )
        answer = BackgroundAnswer(turn.request, turn.prompt, turn.seal, turn.ids)
        record = StoredResponse(
            id=turn.ids.response_id,
            owner=caller.key,
            created_at=time.time(),
            inherited=turn.inherited,
            input=turn.own,
            response=answer.builder.response("queued", None),
            background=BackgroundRun(process=self.background.process, events=turn.request.stream),
        )
        try:
            job = await self.background.create(record, answer, caller.key)
        except (StoreUnavailable, Conflict) as error:
            raise unavailable("response store", StoreUnavailable(str(error))) from None
        return Upstream(url=COMPLETIONS_URL, body=completion, transform=answer, detached=job, headers=headers)

    async def render(self, body: bytes, checks: Checks, caller: Caller) -> Turn:
        """The request checked, its item references and stored conversation read, and its prompt rendered:
        what generation sends, and what POST /v1/responses/input_tokens counts."""
        request, context = await typed_request(checks, self.api, body, ResponsesRequest, from_validation)
        referenced = 0  # bytes of items named by reference, which the body's size does not show
        if references(request):
            items, referenced = await resolved(request, self.store, caller.key, self.max_body_bytes)
            request = request.model_copy(update={"input": ITEMS.validate_python(items)})
        inherited = await self._inherited(request, caller.key)
        seal = self.seal.bound(caller.tenant, request.model)
        stored = self.store is not None and request.store is not False
        ids = ItemIds(new_id("resp"))
        own = input_items(request, ids) if stored or inherited else []
        whole = (
            request.model_copy(update={"input": ITEMS.validate_python([*inherited, *own])}) if inherited else request
        )
        try:
            heavy = len(body) + referenced > OFF_LOOP_BYTES or len(inherited) > OFF_LOOP_ITEMS
            prompt = await rendered(lambda: conversation(whole, seal), caller.renders, heavy)
        except ApiError as err:
            raise _shifted(err, len(inherited)) from None
        return Turn(request, context, seal, stored, ids, inherited, own, prompt)

    async def _inherited(self, request: ResponsesRequest, key: str | None) -> list[dict[str, Any]]:
        """The stored conversation `previous_response_id` continues (404 when `key` has none by that id)."""
        if request.previous_response_id is None:
            return []
        if self.store is None:
            raise ApiError(
                400,
                "Invalid 'previous_response_id': this graph keeps no responses "
                "(gateway.responses.store is false); send the whole conversation as 'input'.",
                param="previous_response_id",
                code="unsupported_parameter",
            )
        previous = await find(self.store, request.previous_response_id, key, "previous_response_id")
        if previous.running:
            raise ApiError(
                400,
                f"Invalid 'previous_response_id': response '{previous.id}' is a background response still "
                f"{previous.response.get('status')}; continue from it once it has ended.",
                param="previous_response_id",
            )
        return previous.conversation()


def conversation_session(turn: Turn, tenant: str) -> str | None:
    """The conversation a turn belongs to, as Dynamo's router names a session (SESSION_HEADER):
    the client's `prompt_cache_key` (Codex sends its conversation's id there), within its tenant; else
    the response that began the stored conversation, which `previous_response_id` leads back to (its
    first item is that response's, or an id its client gave, kept with it); None for a turn neither
    stored nor continued. A name unfit for a header (beyond printable ASCII, or long) goes as its digest."""
    key = (turn.request.model_extra or {}).get("prompt_cache_key")
    first = next(iter([*turn.inherited, *turn.own]), None)
    within = f"{tenant}/" if tenant else ""  # one tenant's names never meet another's
    if isinstance(key, str) and key:
        session = within + key
    elif first is not None:
        session = response_of(first["id"]) or within + first["id"]
    else:
        return None
    if len(session) > MAX_SESSION_CHARS or not all(" " <= c <= "~" for c in session):
        return "sha256-" + hashlib.sha256(session.encode()).hexdigest()
    return session


def input_items(request: ResponsesRequest, ids: ItemIds) -> list[dict[str, Any]]:
    """The request's input as the items a stored response lists (GET .../input_items): each with an
    id (`ids`, the response's, where the client gave none), a message's text in content parts, as
    OpenAI's server returns them."""
    if isinstance(request.input, str):
        items = [{"type": "message", "role": "user", "content": request.input}]
    else:
        items = [item.model_dump(mode="json", exclude_none=True) for item in request.input]
    for item in items:
        item["id"] = item.get("id") or ids.next(ITEM_ID_PREFIXES[item["type"]])
        if item["type"] == "message":
            item.setdefault("status", "completed")
            if isinstance(item["content"], str):
                kind = "output_text" if item["role"] == "assistant" else "input_text"
                part = {"type": kind, "text": item["content"]} | ({"annotations": []} if kind == "output_text" else {})
                item["content"] = [part]
    return items


def _shifted(err: ApiError, offset: int) -> ApiError:
    """A render error about the request's own input, numbered as the client numbers it (the stored
    conversation prepended before it is not the client's to see)."""
    if not offset or err.param is None:
        return err

    def renumber(text: str) -> str:
        return _INPUT_INDEX.sub(lambda match: f"input[{int(match.group(1)) - offset}]", text)

    return ApiError(err.status, renumber(err.message), renumber(err.param), err.code, err.retry_after)


class ResponsesAnswer(CompletionAnswer):
    """The completion's SSE chunks in; Responses events out as they come (text/event-stream), or,
    for a client that does not stream, one Response object at the end (application/json)."""

    builder: ResponseBuilder

    def __init__(
        self, request: ResponsesRequest, prompt: Prompt, seal: BoundSeal, ids: ItemIds, stored: bool = False
    ) -> None:
        builder = ResponseBuilder(request, prompt, seal, streaming=request.stream, stored=stored, ids=ids)
        super().__init__(builder, request.stream)


class StoredResponseParts:
    """What a stored response's record holds besides the Response object itself."""

    def __init__(self, owner: str | None, inherited: list[dict[str, Any]], own: list[dict[str, Any]]) -> None:
        self.owner, self.inherited, self.own = owner, inherited, own


class StoredResponsesAnswer(ResponsesAnswer):
    """A ResponsesAnswer that is stored before its last bytes go out (routes.Settling): a client
    that has the whole response can continue from it at once, on any gateway of the graph."""

    def __init__(
        self,
        request: ResponsesRequest,
        prompt: Prompt,
        seal: BoundSeal,
        ids: ItemIds,
        store: ResponseStore,
        parts: StoredResponseParts,
    ) -> None:
        super().__init__(request, prompt, seal, ids, stored=True)
        self.store, self.parts = store, parts

    async def settle(self) -> bytes:
        if self.failed:  # a worker failed mid-answer: the client has its error event, and nothing is stored
            return b""
        builder = self.builder
        out = (b"" if self.started else self._start()) + builder.close_output(self.finish_reason, self.usage)
        assert builder.final is not None
        record = StoredResponse(
            id=builder.id,
            owner=self.parts.owner,
            created_at=time.time(),
            inherited=self.parts.inherited,
            input=self.parts.own,
            response=builder.final,
        )
        try:
            await self.store.put(record)
        except StoreUnavailable as error:  # the answer is the client's all the same; it says it was not stored
            log.warning("response %s was not stored: %s", builder.id, error)
            builder.final["store"] = False
        out += builder.completed()
        return out if self.streaming else orjson.dumps(builder.final)
