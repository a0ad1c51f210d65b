"""The gateway's HTTP shell, at the socket: each request goes to its route (routes.py), which
checks it and says what to send to Dynamo's frontend on a pooled keep-alive connection; the
answer comes back byte for byte, or through the route's transform, framed here.

Why not a web framework: a framework re-frames every streamed chunk (parse, re-chunk, await a
drain) and spends CPU per token on a machine whose cores the engine and frontend need. Here
requests are parsed by httptools (C), and a passed-through response is only parsed to find where it
ends, while its bytes go to the client as they arrive. A response of 400 or more is held back and
rewritten in OpenAI's error shape (Anthropic's on /v1/messages). Back-pressure: a slow client
pauses reading from the frontend.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import aiohttp
import httptools

from dynamo_oss.gateway.auth import ApiKeys
from dynamo_oss.gateway.batches.api import BatchApi
from dynamo_oss.gateway.chat.route import ChatRoute
from dynamo_oss.gateway.errors import (
    RETRY_AFTER_S,
    ApiError,
    from_upstream,
    openai_error,
    stream_cut,
    stream_cut_event,
)
from dynamo_oss.gateway.limits import (
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    MAX_QUEUED,
    MAX_TARGET_BYTES,
    BodyBudget,
    ConnectionCount,
    Deadline,
    Limits,
)
from dynamo_oss.gateway.messages import errors as anthropic_errors
from dynamo_oss.gateway.messages.count_tokens import PATH as COUNT_TOKENS
from dynamo_oss.gateway.messages.count_tokens import CountTokensRoute
from dynamo_oss.gateway.messages.route import MessagesRoute
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.gateway.responses.input_tokens import PATH as INPUT_TOKENS
from dynamo_oss.gateway.responses.input_tokens import InputTokensRoute
from dynamo_oss.gateway.responses.background import BackgroundResponses
from dynamo_oss.gateway.responses.route import ResponsesRoute
from dynamo_oss.gateway.fair_share import FairShare, Ticket
from dynamo_oss.gateway.forwarding import Clientless, Sink, forward
from dynamo_oss.gateway.frontends import Frontend, Frontends, FrontendStarting
from dynamo_oss.gateway.latency import RecentLatency
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.harmony.sealing import ReasoningSeal
from dynamo_oss.gateway.responses.store import ResponseStore
from dynamo_oss.gateway.responses.stored import PREFIX as STORED_RESPONSES
from dynamo_oss.gateway.responses.stored import METHODS as STORED_RESPONSE_METHODS
from dynamo_oss.gateway.responses.stored import StoredResponsesRoute
from dynamo_oss.gateway.routes import (
    BytesAnswer,
    is_local,
    settles,
    Detached,
    EventStreamAnswer,
    LocalAnswer,
    LocalRoute,
    PassThrough,
    Route,
    RouteTable,
    Transform,
    parse_json,
)
from dynamo_oss.gateway.tenancy import NO_TENANT, Caller, Tenants
from dynamo_oss.gateway.text_completions import CompletionsRoute
from dynamo_oss.gateway.usage import REFUSED, count_request, count_tokens
from dynamo_oss.gateway.validation import check_request
from dynamo_oss.graph.schema import KeyLimitsSection

if TYPE_CHECKING:  # OpenTelemetry is imported only where the graph traces (serving.py)
    from dynamo_oss.gateway.tracing import RequestTrace, Tracing

log = logging.getLogger("dynamo_oss.gateway")

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only
# A prompt this long may need counting with the model's template and tokenizer (about 90 ms for a
# 32k-token prompt here): that runs in a thread, so the event loop keeps streaming everyone else's tokens.
THREAD_CHECK_BYTES = 64 * 1024
LINGER_S = 2.0  # how long a refused request's connection keeps reading (and dropping) before it closes
MODELS_TTL_S = 2.0  # how long the frontend's model list is trusted (workers come and go)

ErrorShape = Callable[[int, dict], dict]  # an error in OpenAI's shape, rewritten in an API's own
# The paths whose errors are not OpenAI's: Anthropic's API, and any path under it.
ERROR_SHAPES: dict[bytes, ErrorShape] = {b"/v1/messages": anthropic_errors.from_openai}


class Gateway:
    """What every connection shares: the upstream address and idle connections, and the model list."""

    def __init__(
        self,
        upstreams: list[str],
        counter: PromptCounter | None,
        graph_key: GraphKey,
        max_in_flight: int | None = None,
        keys: ApiKeys | None = None,
        limits: Limits = Limits(),
        store: ResponseStore | None = None,
        cache_isolation: bool = True,
        limits_per_key: KeyLimitsSection | None = None,
        ledger: Ledger | None = None,
        background: BackgroundResponses | None = None,
        batch_api: BatchApi | None = None,
        tracing: Tracing | None = None,
        coalesce_s: float = 0.0,
    ) -> None:
        self.frontends = Frontends(upstreams)
        self.coalesce_s = coalesce_s  # gateway.streaming.coalesce_ms: 0, a stream's reads as they come
        self.tracing = tracing  # None: the graph traces nothing, and no request pays for it
        self.counter = counter
        self.keys = keys  # None: no key is asked for
        self.tenants = Tenants(graph_key, isolated=cache_isolation and keys is not None)
        ledger = ledger or Ledger(keys.names if keys is not None else [], processes=1, process=0, path=None)
        self.fair_share = FairShare(limits_per_key, keys.limits if keys is not None else {}, max_in_flight, ledger)
        seal = ReasoningSeal(graph_key)
        self.limits = limits
        self.connections = ConnectionCount(limits)
        self.bodies = BodyBudget(limits)
        probes = {(method, path): PassThrough(path) for method in (b"GET", b"HEAD") for path in (b"/health", b"/live")}
        responses = ResponsesRoute(seal, store, background, limits.max_body_bytes)
        messages = MessagesRoute(seal)
        self.latency = RecentLatency()  # what this process's answers meet now, which paces batch work
        batch_routes = batch_api.routes(limits.max_body_bytes) if batch_api is not None else ({}, {})
        self.routes = RouteTable(
            exact={
                (b"POST", b"/v1/chat/completions"): ChatRoute(),
                (b"POST", b"/v1/completions"): CompletionsRoute(),
                (b"POST", b"/v1/responses"): responses,
                (b"POST", INPUT_TOKENS): InputTokensRoute(responses),
                (b"POST", b"/v1/messages"): messages,
                (b"POST", COUNT_TOKENS): CountTokensRoute(messages),
                (b"GET", b"/v1/models"): PassThrough(b"/v1/models"),
                **probes,
                **batch_routes[0],
            },
            under={
                STORED_RESPONSES: (STORED_RESPONSE_METHODS, StoredResponsesRoute(store, background)),
                **batch_routes[1],
            },
        )
        self.store = store  # None: the graph keeps no responses
        self.background = background  # the background responses this process runs
        self.batches = batch_api.runner(self) if batch_api is not None else None  # the batches this process runs
        self.idle: dict[str, list[UpstreamConnection]] = {}  # kept connections, by their frontend's base URL
        self.exchanges = 0  # requests between the client's last byte and the response's last byte, or the work's end
        self.detached: set[asyncio.Task] = set()  # work running without its client (the loop keeps weak references)
        self._session: aiohttp.ClientSession | None = None
        self._models: dict[str, int] = {}
        self._models_at = 0.0
        self._refresh: asyncio.Task | None = None

    async def models(self, wanted: object) -> dict[str, int]:
        """Served model ids and their context windows, from the frontend's /v1/models.

        A request for a model the list has is checked against it at once, and a list older than
        MODELS_TTL_S is refreshed behind it: the frontend's listing takes milliseconds, which no
        request should wait for. Only a model the list lacks waits for a fresh list.
        """
        if isinstance(wanted, str) and wanted in self._models:
            stale = time.monotonic() - self._models_at > MODELS_TTL_S
            if stale and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.get_running_loop().create_task(self._fetch_models())
            return self._models
        await self._fetch_models()
        return self._models

    async def _fetch_models(self) -> None:
        """The model list of the first frontend that lists a model: one that has just restarted lists none
        until its workers register with it again, and one that is down answers nothing."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        *others, last = self.frontends.in_turn()
        for frontend in others:
            try:
                listed = await self._models_of(frontend, self._session)
            except (OSError, aiohttp.ClientError) as error:
                self.frontends.failed(frontend, error)
                continue
            if listed:
                self._models, self._models_at = listed, time.monotonic()
                return
        self._models, self._models_at = await self._models_of(last, self._session), time.monotonic()

    @staticmethod
    async def _models_of(frontend: Frontend, session: aiohttp.ClientSession) -> dict[str, int]:
        async with session.get(f"{frontend.base}/v1/models") as response:
            listing = parse_json(await response.read())
        if response.status != 200 or not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            raise ConnectionError(f"its model list answered HTTP {response.status} without a list")
        return {m["id"]: int(m.get("context_window") or 0) for m in listing["data"] if isinstance(m, dict)}

    async def check(self, api: str, request: object, size: int) -> int:
        """routes.Checks: the shared checks, off the event loop for a long body."""
        models = await self.models(request.get("model") if isinstance(request, dict) else None)
        if size > THREAD_CHECK_BYTES:
            return await asyncio.to_thread(check_request, api, request, models, self.counter)
        return check_request(api, request, models, self.counter)

    def error_shape(self, url: bytes) -> ErrorShape | None:
        """How errors are written on `url`: None for OpenAI's shape, the gateway's own."""
        path = url.split(b"?", 1)[0].rstrip(b"/")
        return next(
            (shape for prefix, shape in ERROR_SHAPES.items() if path == prefix or path.startswith(prefix + b"/")), None
        )

    def tenant_of(self, key: str | None) -> str:
        return self.keys.tenant_of(key) if self.keys is not None and key is not None else NO_TENANT

    def caller(self, key: str | None) -> Caller:
        """Who a request showing the key named `key` is from."""
        return self.tenants.caller(key, self.tenant_of(key))

    def forget_models(self) -> None:
        self._models = {}

    async def connection(self, fresh: bool = False) -> tuple[UpstreamConnection, bool]:
        """A kept connection to the frontend whose turn it is (and True), or a new one (and False). Requests take
        the frontends in turn whether their connection is kept or new, so a frontend started again gets its
        share back at once, not only as kept connections to the others close."""
        order = self.frontends.in_turn()
        kept = self.idle.get(order[0].base, [])
        while kept and not fresh:
            connection = kept.pop()
            if not connection.transport.is_closing():
                return connection, True
        connection = await self.frontends.connect(lambda frontend: UpstreamConnection(self, frontend), order)
        assert isinstance(connection, UpstreamConnection)
        return connection, False

    def keep(self, connection: UpstreamConnection) -> None:
        """`connection`, its exchange over, for a later request to its frontend."""
        self.idle.setdefault(connection.frontend.base, []).append(connection)

    def detach(self, exchange: Clientless, detached: Detached, key: str | None, ticket: Ticket | None) -> None:
        """Run `detached` to its end with an exchange no client reads (routes.Detached): a drain waits for it as
        for a client's exchange, it holds the request's admission until it ends, and its tokens are billed to
        `key` as a client's are."""

        async def run() -> None:
            self.exchanges += 1
            try:
                await detached.run(exchange)
            except Exception:  # a bug: the work's own end is its to write; the log gets the traceback
                log.exception("work without its client failed")
            finally:
                self.exchanges -= 1
                transform = exchange.request.transform
                count_tokens(key, transform.billed if transform is not None else None)
                if ticket is not None:
                    self.fair_share.done(ticket, spent(transform))

        task = asyncio.get_running_loop().create_task(run())
        self.detached.add(task)
        task.add_done_callback(self.detached.discard)

    async def close(self) -> None:
        if self.batches is not None:
            await self.batches.close()
        for kept in self.idle.values():
            for connection in kept:
                connection.transport.close()
        if self._session is not None:
            await self._session.close()
        if self.background is not None:
            await self.background.close()
        if self.store is not None:
            await self.store.close()


@dataclass(frozen=True)
class Request:
    """A request read whole, waiting its turn: its route, and the body bytes it holds of the budget."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool
    key: str | None  # the name of the API key it showed
    route: Route | LocalRoute
    held: int


class ClientConnection(asyncio.Protocol):
    """One client's connection: requests in order, one exchange at a time."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport
        self.upstream: UpstreamConnection | None = None
        self.turn = asyncio.Lock()  # a pipelining client's requests are answered in order
        self.tasks: set[asyncio.Task] = set()  # exchanges under way (the loop keeps only weak references)
        self.started = False  # bytes of the current exchange's response went out: no other response may
        self.api: str | None = None  # the current exchange's generation API, when the gateway checked it
        self.key: str | None = None  # the name of the API key the current exchange showed
        self.error_shape: ErrorShape | None = None  # the current exchange's error shape (None: OpenAI's)
        self.rate_headers: list[tuple[bytes, bytes]] = []  # the current exchange's x-ratelimit-* (fair_share.py)
        self.status = 0  # the current exchange's response status, once sent
        self.trace: RequestTrace | None = None  # the current exchange's part of its trace (tracing.py)
        self.refused = False  # answered before its body was read (no key, too large): the connection closes
        self.counted = False  # counted among the gateway's open connections
        self.left = asyncio.Event()  # the client has gone: a local answer's events stop
        self.writable = asyncio.Event()  # the client reads what is written: a local answer's events go on
        self.writable.set()
        self.deadline = Deadline(gateway.limits, self._too_slow, self._idle_too_long, self._stalled)
        # The request being read: its target's pieces, headers, body pieces, and their sizes so far.
        self._target: list[bytes] = []
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._target_size = self._header_size = self._head_size = self._size = self._request_size = 0
        self._held = 0  # bytes of the request being read, counted in the gateway's budget (BodyBudget)
        self._queued = 0  # bytes of this connection's requests read whole and waiting or being answered
        self._in_head = True  # between a request's first byte and the end of its headers
        self._key: str | None = None
        self._route: Route | LocalRoute | None = None
        self._reading = False  # between a request's first byte and its last

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.socket = transport.get_extra_info("socket")
        if not self.gateway.connections.admit():
            transport.close()
            return
        self.counted = True
        self.deadline.awaiting_headers()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # answered and closing: what the client still sends is read and dropped
        acknowledge_at_once(self.socket)
        if self._in_head:
            self._head_size += len(data)
        if self._reading:
            self._request_size += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # an Upgrade or CONNECT, refused once its headers were read
        except httptools.HttpParserError as err:
            if not self.refused:
                self._refuse(ApiError(400, f"Malformed HTTP request: {err}"))
        if self._in_head and not self.refused and self._head_size > MAX_HEAD_BYTES:
            # Counted as the bytes arrive, before the head is whole: a head never ending holds no more than this.
            self._refuse(head_too_large())
        elif self._reading and not self.refused and self._request_size > self.gateway.limits.max_request_bytes:
            self._refuse(self.gateway.limits.too_large())  # a body's framing and trailers beyond any real request

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.stop()
        self.deadline.writes_resumed()
        self._let_go_of_body()
        if self.counted:
            self.gateway.connections.closed()
        if self.upstream is not None:  # the client left mid-response: the frontend stops generating
            self.upstream.transport.abort()
        self.left.set()

    def pause_writing(self) -> None:
        self.deadline.writes_paused()
        self.writable.clear()
        if self.upstream is not None:
            self.upstream.hold()

    def resume_writing(self) -> None:
        self.deadline.writes_resumed()
        self.writable.set()
        if self.upstream is not None:
            self.upstream.release()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._target, self._headers, self._body = [], [], []
        self._target_size = self._header_size = self._size = self._request_size = 0
        self._route = None
        self._reading = True
        if not self.tasks:  # a pipelined request's clock starts when the exchanges ahead of it are done
            self.deadline.awaiting_headers()

    def on_url(self, url: bytes) -> None:
        if self.refused:
            return
        self._target.append(url)
        self._target_size += len(url)
        if self._target_size > MAX_TARGET_BYTES:
            self._refuse(
                ApiError(
                    414,
                    f"The request's target is longer than {MAX_TARGET_BYTES // 1024} KiB; send what it carries in the body.",
                    code="request_target_too_long",
                )
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.refused or not self._in_head:
            return  # a chunked body's trailers: read (their bytes counted in data_received) and dropped
        self._headers.append((name, value))
        self._header_size += len(name) + len(value) + 4  # ": " and "\r\n"
        if len(self._headers) > MAX_HEADERS:
            self._refuse(head_too_large())

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self._in_head = False
        target = b"".join(self._target)
        self._target = [target]
        try:
            if self._target_size + self._header_size > MAX_HEAD_BYTES:  # a head whole within one read
                raise head_too_large()
            if self.gateway.keys is not None:
                authorization = next((v for n, v in self._headers if n.lower() == b"authorization"), None)
                api_key = next((v for n, v in self._headers if n.lower() == b"x-api-key"), None)
                self._key = self.gateway.keys.name_of(target, authorization, api_key)
            method = self.parser.get_method()
            if method == b"CONNECT" or self.parser.should_upgrade():
                raise ApiError(
                    400,
                    "This endpoint serves plain HTTP/1.1 requests: send the request without Upgrade, and not as CONNECT.",
                    code="upgrade_not_supported",
                )
            self._route = self.gateway.routes.route(method, target)
            declared = self.gateway.limits.declared_size(self._headers)
            if declared > self.gateway.limits.max_body_bytes:
                raise self.gateway.limits.too_large()
            if method != b"POST" and declared:  # a chunked one is refused at its first byte (on_body)
                raise ApiError(
                    400,
                    f"{method.decode()} {target[:200].decode(errors='replace')} takes no body; send it without one.",
                    code="unexpected_body",
                )
        except ApiError as err:
            self._refuse(err)
            return
        if not self.tasks:
            self.deadline.awaiting_body()
        # Only between two answers: mid-answer it would land inside another response's bytes.
        if not self.tasks and any(n.lower() == b"expect" and v.lower() == b"100-continue" for n, v in self._headers):
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.refused:
            return
        if not self.tasks:
            self.deadline.awaiting_body()
        self._size += len(body)
        try:
            if self._size > self.gateway.limits.max_body_bytes:  # a chunked body past the limit: refused at once
                raise self.gateway.limits.too_large()
            if self.parser.get_method() != b"POST":
                raise ApiError(400, "This route takes no body; send it without one.", code="unexpected_body")
            self._hold(len(body))
        except ApiError as err:
            self._refuse(err)
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        self._in_head, self._head_size = True, 0  # the next request's head, counted from its first read
        self._reading = False
        self.deadline.stop()
        if len(self.tasks) >= MAX_QUEUED:
            self._refuse(
                ApiError(
                    429,
                    f"More than {MAX_QUEUED} requests are waiting on this connection; send the "
                    "next once an answer has come, or open another connection.",
                    code="too_many_pipelined_requests",
                )
            )
            return
        self.transport.pause_reading()  # one exchange at a time
        method, keep_alive = self.parser.get_method(), self.parser.should_keep_alive()
        held, self._held = self._held, 0  # the exchange lets go of its body when it is over
        self._queued += held
        assert self._route is not None
        request = Request(
            method, self._target[0], self._headers, b"".join(self._body), keep_alive, self._key, self._route, held
        )
        self._body = []  # the request holds the joined body: the pieces would count it twice
        self._in_turn(self.exchange(request))

    def _hold(self, size: int) -> None:
        """Count `size` more bytes of the request's body in the gateway's budget (BodyBudget), as they
        arrive; a connection may hold one largest body's worth at once, however it pipelines."""
        if self._queued + self._held + size > self.gateway.limits.max_body_bytes:
            raise ApiError(
                429,
                "This connection holds a whole body's worth of requests already; send the next "
                "once an answer has come, or open another connection.",
                code="too_many_pipelined_requests",
            )
        self.gateway.bodies.take(size)
        self._held += size

    def _let_go_of_body(self) -> None:
        """The body being read will not be answered (the connection is closing): out of the budget."""
        self.gateway.bodies.give_back(self._held)
        self._held = 0

    def _in_turn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _refuse(self, err: ApiError) -> None:
        """Answer a request before its body is read (no key, a body too large), in its turn behind the
        exchanges ahead of it, then close. The close lingers: a socket closed with data unread resets
        the connection, and the client would lose the answer."""
        self.refused = True
        self.deadline.stop()
        self._let_go_of_body()
        key = REFUSED if err.status == 401 else self._key
        shape = self.gateway.error_shape(b"".join(self._target))

        async def answer() -> None:
            async with self.turn:
                count_request(key, None, err.status)
                self.started = False  # the exchange ahead of it is over: this is a response of its own
                self.error_shape = shape
                self.respond(err.status, err.body(), keep_alive=False)
                if not self.transport.is_closing() and self.transport.can_write_eof():
                    self.transport.write_eof()
                    asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)
                else:
                    self.transport.close()

        self._in_turn(answer())

    async def exchange(self, request: Request) -> None:
        """One request and its response."""
        try:
            async with self.turn:
                if self.transport.is_closing():
                    return  # the client left while the request waited its turn: the frontend never sees it
                self.key, self.status = request.key, 0
                self.error_shape = self.gateway.error_shape(request.target)
                await self._exchange(request)
                count_request(request.key, self.api, self.status)
                if self.trace is not None and self.gateway.tracing is not None:
                    self.gateway.tracing.end(self.trace, self.status, self.gateway.tenant_of(request.key))
        finally:
            self.gateway.bodies.give_back(request.held)
            self._queued -= request.held

    async def _exchange(self, request: Request) -> None:
        self.gateway.exchanges += 1
        self.started = False
        ticket, transform = None, None  # the request's admission (fair_share.py), and the transform its answer took
        method, url, headers, keep_alive, route = (
            request.method,
            request.target,
            request.headers,
            request.keep_alive,
            request.route,
        )
        self.api = route.api
        traced = self.gateway.tracing is not None and self.api is not None  # generations and counts, not probes
        self.trace = self.gateway.tracing.begin(headers, self.api) if traced else None
        try:
            if self.api is not None:  # a generation or a count: the key's share, then the graph's capacity
                ticket = self.gateway.fair_share.admit(self.key)
                self.rate_headers = ticket.headers
            if self.trace is not None:
                self.trace.mark_admitted()
            if is_local(route):  # the gateway's own answer: nothing goes upstream
                caller = self.gateway.caller(self.key)
                await self.answer(await route.answer(method, url, request.body, self.gateway, caller), keep_alive)
            else:
                caller = self.gateway.caller(self.key)
                upstream = await route.prepare(url, request.body, self.gateway, caller)
                headers = self.gateway.tenants.salted(headers, caller)
                if upstream.detached is not None:  # it runs on without this client, who is answered at once
                    answer, output = upstream.detached.answer(), upstream.detached.output
                    exchange = Clientless(self.gateway, self.api, method, headers, upstream, output)
                    self.gateway.detach(exchange, upstream.detached, self.key, ticket)
                    ticket = None  # the detached exchange's now, until it ends
                    await self.answer(answer, keep_alive)
                else:
                    timing = upstream.transform.timing if upstream.transform is not None else None
                    if timing is not None:
                        self.gateway.latency.began(timing, interactive=True)
                    try:
                        await forward(self.gateway, self, method, headers, upstream)
                    finally:
                        if timing is not None:
                            self.gateway.latency.ended(timing)
                    transform = upstream.transform
                    if transform is not None:
                        count_tokens(self.key, transform.billed)
        except ApiError as err:
            if self.api is not None and err.status < 500:
                log.info("refused %s %s: %s", method.decode(), url.decode(errors="replace"), err.message)
            self.rate_headers = err.headers or self.rate_headers
            self.respond(err.status, err.body(), keep_alive, err.retry_after)
        except (TimeoutError, OSError, aiohttp.ClientError) as err:
            # The frontend is restarting or gone: retryable, and not the client's fault.
            message = f"Dynamo's frontend is unavailable ({err or type(err).__name__}); retry shortly."
            self.respond(503, openai_error(503, message, code="frontend_unavailable"), keep_alive, RETRY_AFTER_S)
        except Exception:  # a bug here: the client still gets JSON, the log gets the traceback
            log.exception("failed on %s %s", method.decode(), url[:200].decode(errors="replace"))
            self.respond(500, openai_error(500, "The gateway failed on this request."), keep_alive)
        finally:
            self.gateway.exchanges -= 1
            if ticket is not None:
                self.gateway.fair_share.done(ticket, spent(transform))
            self.rate_headers = []
            self.upstream = None
        if not keep_alive:
            self.transport.close()
        elif not self.transport.is_closing():
            self.transport.resume_reading()
            if len(self.tasks) <= 1:  # none waits its turn behind this one, which is still in the set
                if not self._reading:
                    self.deadline.idle()
                elif self._headers:
                    self.deadline.awaiting_body()
                else:
                    self.deadline.awaiting_headers()

    async def answer(self, answer: LocalAnswer, keep_alive: bool) -> None:
        """A local answer: one JSON body, a file's bytes, or events while they come."""
        if isinstance(answer, EventStreamAnswer):
            await self._stream(answer.events, LOCAL_EVENTS)
        elif isinstance(answer, BytesAnswer):
            await self._stream(answer.pieces, LocalBytes(answer.content_type))
        else:
            self.respond(*answer, keep_alive)

    async def _stream(self, events: AsyncIterator[bytes], framing: LocalEvents | LocalBytes) -> None:
        """Each piece of a local answer written as it comes, until they end or the client leaves; a client that
        reads slowly holds the next piece back."""
        left = asyncio.ensure_future(self.left.wait())
        piece: asyncio.Future[bytes] | None = None
        try:
            while not left.done():
                piece = asyncio.ensure_future(anext(events))
                await asyncio.wait((piece, left), return_when=asyncio.FIRST_COMPLETED)
                if not piece.done() or self.transport.is_closing():  # gone: uvloop refuses a write
                    return
                try:
                    data = piece.result()
                except StopAsyncIteration:
                    self.write_transformed(framing, b"", last=True)
                    return
                self.write_transformed(framing, data, last=False)
                if not self.writable.is_set():
                    writable = asyncio.ensure_future(self.writable.wait())
                    await asyncio.wait((writable, left), return_when=asyncio.FIRST_COMPLETED)
                    writable.cancel()
        finally:
            left.cancel()
            if piece is not None and not piece.done():
                piece.cancel()
                await asyncio.wait((piece,))
            await events.aclose()

    def _too_slow(self) -> None:
        """A request's headers or body did not arrive in time (a slow or half-open client)."""
        if self.tasks:
            return  # an answer is under way: its request arrived whole
        seconds = self.gateway.limits.header_timeout_s if not self._headers else self.gateway.limits.body_timeout_s
        message = f"The request was not received in full within {seconds:g} s."
        self.error_shape = self.gateway.error_shape(b"".join(self._target))
        self.started = False  # no answer is under way (no task): the last one is over
        self.respond(408, openai_error(408, message, code="request_timeout"), keep_alive=False)
        self.transport.close()

    def _idle_too_long(self) -> None:
        if not self.tasks:  # no exchange under way or waiting its turn
            self.transport.close()

    def _stalled(self) -> None:
        """The client took none of its answer for write_timeout_s: dropped, which stops its generation
        upstream (connection_lost) and frees its place in the graph."""
        log.info(
            "a client read nothing of its answer for %g s: its connection is dropped",
            self.gateway.limits.write_timeout_s,
        )
        self.transport.abort()

    def respond(self, status: int, body: dict, keep_alive: bool, retry_after: int | None = None) -> None:
        """An error (in OpenAI's shape, rewritten in the exchange's own) or another whole JSON answer."""
        if self.transport.is_closing():
            return
        self.status = status
        if self.started:  # part of another response went out: a second one would corrupt it
            self.transport.close()
            return
        if self.error_shape is not None and status >= 400:
            body = self.error_shape(status, body)
        payload = json.dumps(body).encode()
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(payload)}",
        ] + ([] if keep_alive else ["connection: close"])
        if retry_after is not None:
            head.append(f"retry-after: {retry_after}")
        head += [(name + b": " + value).decode() for name, value in self.rate_headers]
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + payload)

    def write_transformed(self, transform: Transform, data: bytes, last: bool) -> None:
        """A transform's output, framed: chunks for a stream (the head with the first), else one body."""
        if transform.streaming and self.started and not last:  # a read's output mid-stream, most writes
            if data:
                self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        elif transform.streaming:
            out = []
            if not self.started:
                self.started, self.status = True, 200
                out.append(
                    b"HTTP/1.1 200 OK\r\ncontent-type: "
                    + transform.content_type
                    + self._rate_lines()
                    + b"\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
                )
            if data:
                out.append(b"%x\r\n%b\r\n" % (len(data), data))
            if last:
                out.append(b"0\r\n\r\n")
            self.transport.write(b"".join(out))
        elif last:
            self.started, self.status = True, 200
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: "
                + transform.content_type
                + self._rate_lines()
                + b"\r\ncontent-length: %d\r\n\r\n%b" % (len(data), data)
            )

    def _rate_lines(self) -> bytes:
        """The exchange's x-ratelimit-* headers, each after a CRLF (b"" for a key without limits)."""
        return b"".join(b"\r\n" + name + b": " + value for name, value in self.rate_headers)

    def end_stream(self, with_error_event: bool) -> None:
        """The frontend went away mid-response. An answer none of which went out yet (a transform's that is
        written whole at its end) is a retryable 503. An event stream cut between two chunks gets an error
        event and its last chunk: the client reads a well-formed stream that says what happened, and
        may send its next request on the same connection. Anything else is closed, which a client sees
        as a cut response, never as a corrupt one."""
        if not self.started:
            self.respond(503, stream_cut(), keep_alive=True, retry_after=RETRY_AFTER_S)
        elif not with_error_event:
            self.transport.close()
        elif not self.transport.is_closing():
            event = stream_cut_event()
            self.transport.write(f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n")


class LocalEvents:
    """How a local answer's events are framed (ClientConnection.write_transformed): an event stream's chunks."""

    streaming = True
    content_type = b"text/event-stream"


LOCAL_EVENTS = LocalEvents()


@dataclass(frozen=True)
class LocalBytes:
    """How a local answer's bytes are framed (ClientConnection.write_transformed): chunks, as they come."""

    content_type: bytes
    streaming = True


class TransformedAnswer:
    """The parser's callbacks for an answer a transform rewrites: a connection's own, less those marking each
    chunk's bounds, which only an answer passed through verbatim needs (to end it well-formed when it is cut),
    so a read of many chunks costs two calls a chunk fewer."""

    __slots__ = ("on_header", "on_headers_complete", "on_body", "on_message_complete")

    def __init__(self, connection: UpstreamConnection) -> None:
        self.on_header, self.on_headers_complete = connection.on_header, connection.on_headers_complete
        self.on_body, self.on_message_complete = connection.on_body, connection.on_message_complete


def spent(transform: Transform | None) -> int:
    """The tokens a request's fair share is charged once its answer has ended: its usage, or as far as it was
    read when the answer was cut."""
    if transform is None:
        return 0
    billed = transform.billed
    return billed.input + billed.output if billed else transform.spent


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to a Dynamo frontend, carrying one exchange at a time."""

    def __init__(self, gateway: Gateway, frontend: Frontend) -> None:
        self.gateway = gateway
        self.frontend = frontend
        self.transport: asyncio.Transport
        self.client: Sink | None = None
        self.done: asyncio.Future[None] | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.status = 0
        self.error_body: list[bytes] | None = None  # an error response, held back to be rewritten
        self.pending: list[bytes] = []  # bytes before the status line is complete
        self.head_only = False
        self.complete = False
        self.keep_alive = False  # the frontend keeps the connection open after this answer (read as it completes)
        self.kept = False  # kept for the next exchange, which may have it once this one is over (exchange())
        self.event_stream = False  # a text/event-stream response
        self.chunked = False  # framed in chunks, so an error event can follow the last whole one
        self.in_chunk = False  # between a chunk's header and its end
        self.transform: Transform | None = None  # the route's, for this exchange; None: bytes pass through
        self.body: list[bytes] = []  # the body's pieces one read carried, for the transform in one call
        self.transformed: list[bytes] = []  # a transform's output from one read, written at once
        self.settling: asyncio.Task | None = None  # a Settling transform's last bytes, under way
        self.held = False  # its client takes no more for now (ClientConnection.pause_writing)
        self.gathering = False  # reads paused while a stream's tokens gather (gateway.streaming.coalesce_ms)
        self.reading_since = 0.0  # loop time of its last read, or of reading again after a wait

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.socket = transport.get_extra_info("socket")

    async def exchange(self, client: Sink, request: bytes, head_only: bool, transform: Transform | None) -> None:
        self.client, self.status, self.error_body, self.pending, self.complete = client, 0, None, [], False
        self.keep_alive = self.kept = False
        self.transform, self.body, self.transformed = transform, [], []
        self.event_stream = self.chunked = self.in_chunk = False
        self.parser = httptools.HttpResponseParser(self if transform is None else TransformedAnswer(self))
        self.head_only = head_only
        self.done = asyncio.get_running_loop().create_future()
        self.reading_since = asyncio.get_running_loop().time()
        self.transport.write(request)
        acknowledge_at_once(self.socket)  # after the request: sending it is what turns delayed ACKs on
        try:
            await self.done
        finally:
            self.client = None
            if self.kept:  # only now: an exchange that took it sooner would lose its client to the line above
                self.gateway.keep(self)

    def data_received(self, data: bytes) -> None:
        sent = False  # this read gave a stream's client something
        if self.parser is None or self.client is None:
            self.transport.close()  # bytes outside an exchange: the connection is not reusable
            return
        try:
            self.parser.feed_data(data)
            if self.body:  # a transformed answer's pieces of this read: one call, however many chunks it held
                body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
                self.body = []
                self.transformed.append(self.transform.feed(body))  # type: ignore[union-attr]
        except httptools.HttpParserError as err:
            self._finish(ConnectionError(f"unreadable response from the frontend: {err}"))
            return
        except Exception as err:  # noqa: BLE001 - a transform's bug: the exchange logs it and answers a JSON 500
            self._finish(err)
            return
        if self.transform is not None and self.transform.done and self.error_body is None and not self.complete:
            self._end_early()
            return
        if self.transform is not None:  # a stream's output goes out read by read; a whole body at the end
            if self.transform.streaming and self.transformed and self.error_body is None:
                output = self.transformed[0] if len(self.transformed) == 1 else b"".join(self.transformed)
                self.transformed = []
                self.client.write_transformed(self.transform, output, last=False)
                sent = bool(output)
        elif not self.status:
            self.pending.append(data)  # headers still incomplete: not yet known whether to rewrite
        elif self.error_body is None:
            if self.pending:
                data, self.pending = b"".join([*self.pending, data]), []
            self.client.started, self.client.status = True, self.status
            self.client.transport.write(data)  # verbatim, headers and chunk framing included
            sent = self.event_stream
        if self.complete:
            self._finish(None)
        elif sent and self.gateway.coalesce_s:
            self._gather_if_quick()

    def hold(self) -> None:
        """Its client's socket is full: no reading until it drains (release)."""
        self.held = True
        self.transport.pause_reading()

    def release(self) -> None:
        self.held = False
        if not self.gathering:
            self.transport.resume_reading()

    def _gather_if_quick(self) -> None:
        """A stream's client has what came so far. Where this read came sooner than coalesce_s after the
        last (or after reading again), the stream's tokens come faster than a wait would hold them: the
        next read waits coalesce_s, so that it takes everything that comes meanwhile, a wakeup, a parse
        and a write for several tokens. A slower stream is read as it comes, at no cost."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        quick, self.reading_since = now - self.reading_since < self.gateway.coalesce_s, now
        if quick:
            self.gathering = True
            self.transport.pause_reading()
            loop.call_later(self.gateway.coalesce_s, self._gathered)

    def _gathered(self) -> None:
        self.gathering = False
        self.reading_since = asyncio.get_running_loop().time()
        if not self.held and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.settling is not None:
            return  # the frontend's answer was whole: the exchange ends in _settle
        if self.done is not None and not self.done.done():
            if self.status and self.error_body is None and self.transform is not None and self.transform.streaming:
                if self.client is not None and not self.client.transport.is_closing():
                    self.client.write_transformed(self.transform, self.transform.cut(), last=True)
                self.done.set_result(None)
            elif self.status and self.error_body is None:
                if self.client is not None:
                    self.client.end_stream(with_error_event=self.event_stream and self.chunked and not self.in_chunk)
                self.done.set_result(None)
            else:
                self.done.set_exception(ConnectionError("the frontend closed the connection"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name, value = name.lower(), value.lower()
        if name == b"content-type" and value.startswith(b"text/event-stream"):
            self.event_stream = True
        elif name == b"transfer-encoding" and value.endswith(b"chunked"):
            self.chunked = True

    def on_chunk_header(self) -> None:
        self.in_chunk = True

    def on_chunk_complete(self) -> None:
        self.in_chunk = False

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        self.status = self.parser.get_status_code()
        if self.status >= 400:
            self.error_body = []
        if self.head_only:
            self.complete = True

    def on_body(self, body: bytes) -> None:
        if self.error_body is not None:
            self.error_body.append(body)
        elif self.transform is not None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        """The answer is whole. Whether the connection stays open is read now: httptools forgets it once
        the parser has moved past the message."""
        assert self.parser is not None
        self.complete, self.keep_alive = True, self.parser.should_keep_alive()

    def _end_early(self) -> None:
        """The transform's answer is whole before the frontend's (a stop sequence): the client gets
        its last bytes now, and the connection is dropped, which stops the generation upstream."""
        assert self.done is not None and self.client is not None and self.transform is not None
        output, self.transformed = b"".join([*self.transformed, self.transform.end()]), []
        if not self.client.transport.is_closing():
            self.client.write_transformed(self.transform, output, last=True)
        self.parser = None
        self.transport.abort()
        self.done.set_result(None)

    def _finish(self, error: Exception | None) -> None:
        assert self.done is not None and self.client is not None and self.parser is not None
        if error is not None:
            self.transport.abort()
            self.done.set_exception(error)
            return
        if self.error_body is not None and self.status == 404 and self.client.api is not None:
            # The model was in the list a moment ago: the frontend has restarted and its workers have
            # not registered with it again yet. Another frontend may serve it; the list is read afresh.
            self.gateway.forget_models()
            self.transport.abort()
            self.done.set_exception(FrontendStarting())
            return
        elif self.error_body is not None and self.status >= 500 and self.client.api is not None:
            # A request the gateway checked, failed by the graph: a worker that just died (Dynamo says
            # "Failed to generate completions" until its lease lapses) or none registered. Retryable.
            body = from_upstream(self.status, parse_json(b"".join(self.error_body)))
            log.info("frontend answered %d: %s", self.status, body["error"]["message"])
            body["error"]["message"] += " (the graph could not serve this request now; retry shortly)"
            self.client.respond(
                503, openai_error(503, body["error"]["message"], code="upstream_failure"), True, RETRY_AFTER_S
            )
        elif self.error_body is not None:
            payload = parse_json(b"".join(self.error_body))
            self.client.respond(self.status, from_upstream(self.status, payload), keep_alive=True)
        elif settles(self.transform) and not self.client.transport.is_closing():
            # The answer's last bytes wait on I/O (the response store): the exchange ends once they are out.
            keep_alive = self.keep_alive and not self.head_only
            self.parser, self.settling = None, asyncio.get_running_loop().create_task(self._settle(keep_alive))
            return
        elif self.transform is not None and not self.client.transport.is_closing():
            try:
                output, self.transformed = b"".join([*self.transformed, self.transform.end()]), []
            except Exception as err:  # noqa: BLE001 - as in data_received
                self.parser = None
                self.transport.abort()
                self.done.set_exception(err)
                return
            self.client.write_transformed(self.transform, output, last=True)
        if self.keep_alive and not self.head_only:
            self._pool()
        else:
            self.transport.close()
        self.parser = None
        self.done.set_result(None)

    async def _settle(self, keep_alive: bool) -> None:
        """The rest of _finish for a Settling transform: its last bytes, then the connection kept or closed."""
        assert self.done is not None and self.client is not None and settles(self.transform)
        try:
            output, self.transformed = b"".join([*self.transformed, await self.transform.settle()]), []
        except Exception as err:  # noqa: BLE001 - as in data_received
            self.transport.abort()
            self.done.set_exception(err)
            return
        finally:
            self.settling = None
        if not self.client.transport.is_closing():
            self.client.write_transformed(self.transform, output, last=True)
        if keep_alive and not self.transport.is_closing():
            self._pool()
        else:
            self.transport.close()
        self.done.set_result(None)

    def _pool(self) -> None:
        """Kept for the next exchange, among the idle connections once this exchange is over; reading again
        (its client may have paused it) and no longer its client's to pause or abort."""
        assert self.client is not None
        self.client.upstream = None
        self.held = False
        self.transport.resume_reading()
        self.kept = True


async def serve(gateway: Gateway, host: str, port: int, drain_timeout_s: float, stop: asyncio.Event) -> None:
    """Listen until `stop`, then stop accepting and let exchanges in flight (streams) finish."""
    loop = asyncio.get_running_loop()
    # SO_REUSEPORT: every process of the endpoint listens on the one port, and the kernel spreads
    # new connections over them.
    server = await loop.create_server(
        lambda: ClientConnection(gateway), host, port, reuse_address=True, reuse_port=True
    )
    upstreams = ", ".join(frontend.base for frontend in gateway.frontends.all)
    log.info("listening on %s:%d, upstream %s", host, port, upstreams)
    await stop.wait()
    server.close()
    if gateway.batches is not None:  # its batch requests under way finish in the drain too, and no new one starts
        gateway.batches.wind_down()
    deadline = loop.time() + drain_timeout_s
    while (gateway.exchanges or gateway.batches and gateway.batches.in_flight) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    await gateway.close()


def head_too_large() -> ApiError:
    return ApiError(
        431,
        f"The request's line and headers are larger than {MAX_HEAD_BYTES // 1024} KiB; send fewer or smaller headers.",
        code="request_header_fields_too_large",
    )


def acknowledge_at_once(sock: socket.socket | None) -> None:
    """A sender with Nagle's algorithm on (Dynamo's frontend; some clients for a request's body)
    holds a small write until the one before it is acknowledged, and Linux delays acknowledgements
    by up to 40 ms. Quick-ACK mode lets those writes go out at once. The kernel leaves it when this
    side sends soon after it received (it takes the connection for request and answer): a client's
    connection sets it again on each read, the frontend's once an exchange, after the request is sent,
    since the gateway sends nothing more there until the answer is whole (a setsockopt through uvloop's
    socket stand-in costs a few microseconds, which a read of the answer, one or two tokens, need not pay)."""
    if QUICKACK is not None and sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
