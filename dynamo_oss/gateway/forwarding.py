"""Forwarding a request to a Dynamo frontend, for whoever reads its answer (a Sink): a client's connection
(app.ClientConnection), or no one (Clientless), for work that runs on without the client that asked for it.

The same frontend connections, failover and transform serve both: an exchange no client reads is a client's
exchange whose bytes go to a callback, and leaving it drops the frontend's connection as a departing client
does, which stops the generation. The shell (app.py) owns the sockets; this owns what goes upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from dynamo_oss.gateway.errors import RETRY_AFTER_S, openai_error, stream_cut
from dynamo_oss.gateway.frontends import FrontendStarting
from dynamo_oss.gateway.routes import Transform, Upstream

if TYPE_CHECKING:
    from dynamo_oss.gateway.app import Gateway, UpstreamConnection
    from dynamo_oss.gateway.tracing import RequestTrace

# Hop-by-hop headers, and the framing the gateway sets itself (the body is whole by then).
# The client's API key stays here: Dynamo's frontend neither needs nor should log it.
NOT_FORWARDED = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"upgrade",
    b"transfer-encoding",
    b"content-length",
    b"expect",
    b"authorization",
    b"x-api-key",
}


class Sink(Protocol):
    """Whoever reads an exchange's answer from Dynamo's frontend: a client's connection, or no one
    (Clientless, for work that runs on without the client that asked for it)."""

    transport: Any  # is_closing(), write() and close(): the client's socket, or a stand-in
    upstream: UpstreamConnection | None  # the frontend's connection carrying the exchange, once it has one
    api: str | None  # the exchange's generation API (routes.Route.api)
    started: bool  # bytes of the answer went out
    status: int  # the answer's status, once sent
    trace: RequestTrace | None  # the exchange's part of its trace, where the graph traces it

    def respond(self, status: int, body: dict, keep_alive: bool, retry_after: int | None = None) -> None: ...

    def write_transformed(self, transform: Transform, data: bytes, last: bool) -> None: ...

    def end_stream(self, with_error_event: bool) -> None: ...


async def forward(gateway: Gateway, sink: Sink, method: bytes, headers: list, upstream: Upstream) -> None:
    """Send `upstream` to a Dynamo frontend and feed its answer to `sink`; a frontend that drops the request
    before answering, or has just restarted and serves no model yet, is passed over for another."""
    if sink.trace is not None:  # Dynamo's processes follow the gateway's trace and its sampling decision
        headers = sink.trace.upstream_headers(headers)
        if upstream.transform is not None:
            sink.trace.watch_first_bytes(upstream.transform)
    head = [method + b" " + upstream.url + b" HTTP/1.1"]
    head += [n + b": " + v for n, v in headers if n.lower() not in NOT_FORWARDED]
    sent = {n.lower() for n, _ in headers}
    head += [n + b": " + v for n, v in upstream.headers if n.lower() not in sent]
    head.append(b"content-length: " + str(len(upstream.body)).encode())
    request = b"\r\n".join(head) + b"\r\n\r\n" + upstream.body
    head_only = method == b"HEAD"
    sink.upstream, reused = await gateway.connection()
    others = len(gateway.frontends.all) - 1  # frontends to try after this one drops the request
    while True:
        if sink.transport.is_closing():  # the reader left while a connection was found: nothing is sent
            gateway.keep(sink.upstream)
            sink.upstream = None
            return
        try:
            await sink.upstream.exchange(sink, request, head_only, upstream.transform)
            return
        except FrontendStarting as starting:
            if not others:
                message = "No worker serves the model right now (the frontend is starting); retry shortly."
                sink.respond(503, openai_error(503, message, code="no_workers"), True, RETRY_AFTER_S)
                return
            gateway.frontends.failed(sink.upstream.frontend, starting)
            others -= 1
            sink.upstream, reused = await gateway.connection(fresh=True)
        except ConnectionError as error:
            if sink.upstream.status or sink.transport.is_closing() or not (reused or others):
                raise
            # Closed before any answer: an idle keep-alive connection the frontend had closed (once
            # more on a new one), or a frontend that went away with the request (on another one).
            if not reused:
                gateway.frontends.failed(sink.upstream.frontend, error)
                others -= 1
            sink.upstream, _ = await gateway.connection(fresh=True)
            reused = False


class Unread:
    """The transport of an exchange no client reads: nothing goes anywhere, and it is closed once left."""

    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        return None

    def close(self) -> None:
        self.closed = True


class Clientless:
    """An exchange with Dynamo's frontend that no client reads, for work that runs to its
    end without the client that asked for it: the same forwarding, failover and transform as a client's,
    the transform's output handed to `output` as a client's connection would write it. `leave()` ends it as
    a client that leaves does: the frontend's connection is dropped, which stops the generation."""

    def __init__(
        self,
        gateway: Gateway,
        api: str | None,
        method: bytes,
        headers: list,
        upstream: Upstream,
        output: Callable[[bytes, bool], None],
    ) -> None:
        self.gateway, self.api, self.method, self.headers, self.request = gateway, api, method, headers, upstream
        self.output = output
        self.transport = Unread()
        self.upstream: UpstreamConnection | None = None
        self.started = False
        self.status = 0
        self.trace: RequestTrace | None = None  # work without a client is not traced
        self.error: dict | None = None  # an error answered in place of the transform's output (OpenAI's shape)

    async def forward(self) -> None:
        """The request sent and its answer read to its end (or until `leave()`)."""
        await forward(self.gateway, self, self.method, self.headers, self.request)

    def leave(self) -> None:
        self.transport.close()
        if self.upstream is not None:
            self.upstream.transport.abort()

    def respond(self, status: int, body: dict, keep_alive: bool, retry_after: int | None = None) -> None:
        self.status, self.error = status, body

    def write_transformed(self, transform: Transform, data: bytes, last: bool) -> None:
        self.started, self.status = True, 200
        self.output(data, last)

    def end_stream(self, with_error_event: bool) -> None:
        self.error = stream_cut()  # a pass-through answer cut short; an exchange without a client has a transform
