"""The endpoint's allow-list: every (method, path) it serves, and how each request reaches Dynamo's frontend.

Only what the table names is served. Any other request, whatever its method or path, is a 404 from
the gateway, decided once the request's head is read and before its body is: nothing reaches Dynamo's
frontend that the gateway does not mean to pass on (the frontend's admin route `/busy_threshold`,
`/openapi.json`, `/docs` and `/metrics` among what it would otherwise answer), and no request skips
the gateway's checks by a path the table lacks. A target must be in origin form (`/path?query`): an
absolute form (`http://host/path`), `*` or a fragment gets a 400. Pass-through routes forward the
table's own path, never the client's target.

A route either passes a request through (the frontend's answer goes to the client byte for
byte, the fast path) or transforms it: the route sends the frontend a request of its own and
turns the answer into the client's, piece by piece as it streams (`Transform`). A few requests
are the gateway's alone (`LocalRoute`: stored responses by id, token counts, files and batches), answered
without the frontend, whole (JSON, or a file's bytes: `BytesAnswer`) or as events while they come
(`EventStreamAnswer`). A generation may outlive the client that asked for it
(`Detached`: a background response): the client is answered at once, and the exchange runs with no client.
The HTTP shell (app.py) owns sockets, framing and back-pressure; a route owns only its API.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, TypeVar

from pydantic import BaseModel, ValidationError

from dynamo_oss.gateway.errors import ApiError, stream_cut_event
from dynamo_oss.gateway.latency import StreamTiming
from dynamo_oss.gateway.tenancy import Caller
from dynamo_oss.gateway.usage import Usage

Request = TypeVar("Request", bound=BaseModel)


class Transform(Protocol):
    """Turns the frontend's successful answer into the client's. The shell frames what it returns
    (chunks when `streaming`, else one body with its length) and writes it, so a transform only
    speaks its API. Error answers (4xx, 5xx) never reach it: the shell rewrites those itself."""

    content_type: bytes
    streaming: bool
    timing: StreamTiming | None  # the answer's times, for the graph's latency (None: not timed)

    @property
    def done(self) -> bool:
        """The client's answer is whole before the frontend's is (a stop sequence met): the shell
        sends `end()` and drops the frontend's connection, which stops the generation."""
        ...

    @property
    def billed(self) -> Usage | None:
        """The answer's usage once it is known, read from the API's own fields (None before, and for
        an answer that has none, as a stream the frontend cut): what the key is billed (usage.py)."""
        ...

    @property
    def spent(self) -> int:
        """Tokens the answer has used so far, its prompt included, as far as the transform knows (0 when
        it does not): what a key's fair share is charged for an answer cut before its usage came."""
        ...

    def feed(self, body: bytes) -> bytes:
        """The client's bytes for the next piece of the frontend's body (b"" while it waits for more)."""
        ...

    def end(self) -> bytes:
        """The client's last bytes, once the frontend's body is complete."""
        ...

    def cut(self) -> bytes:
        """The frontend went away mid-answer: the bytes that end the client's stream well-formed."""
        ...


class Settling(Protocol):
    """A transform whose last bytes wait on I/O (a Responses answer stored before it is sent): the
    shell awaits `settle()` for them, in place of `end()`."""

    async def settle(self) -> bytes: ...


class WholeBody:
    """A transform of an answer that is not streamed: collected whole, then rewritten once."""

    content_type = b"application/json"
    streaming = False
    done = False
    spent = 0
    timing = None

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.billed: Usage | None = None

    def feed(self, body: bytes) -> bytes:
        self.body.append(body)
        return b""

    def end(self) -> bytes:
        return self.rewrite(b"".join(self.body))

    def cut(self) -> bytes:
        return b""  # not sent: the shell answers a retryable 503 instead

    def rewrite(self, body: bytes) -> bytes:
        raise NotImplementedError


class EventStream:
    """A transform of a server-sent event stream that rewrites whole events only: a read's last event,
    when partial, waits for the next read (`whole_events`)."""

    content_type = b"text/event-stream"
    streaming = True
    done = False
    spent = 0
    timing = None

    def __init__(self) -> None:
        self.buffer = b""
        self.billed: Usage | None = None

    def whole_events(self, body: bytes) -> bytes:
        """The events this read completes, each with its separator (b"" while the first is partial)."""
        data = self.buffer + body
        end = data.rfind(b"\n\n") + 2 if b"\n\n" in data else 0
        self.buffer = data[end:]
        return data[:end]

    def end(self) -> bytes:
        rest, self.buffer = self.buffer, b""
        return rest

    def cut(self) -> bytes:
        """Whole events only went out: a partial one is dropped, and an error event says what happened."""
        self.buffer = b""
        return stream_cut_event()


@dataclass
class EventStreamAnswer:
    """A local answer sent as server-sent events while they come (a stored response's, followed live): the
    shell writes each piece `events` yields as it comes, and closes it when the client leaves. An ApiError
    raised before the first piece is answered as any refusal is."""

    events: AsyncIterator[bytes]


@dataclass
class BytesAnswer:
    """A local answer that is not JSON, sent whole: a file's content."""

    body: bytes
    content_type: bytes


LocalAnswer = tuple[int, dict[str, Any]] | EventStreamAnswer | BytesAnswer  # a status and a JSON body, events, bytes


class Exchange(Protocol):
    """A request's exchange with Dynamo's frontend that no client reads (forwarding.Clientless)."""

    status: int  # the frontend's answer's status (0: none came)
    error: dict[str, Any] | None  # an error answered in place of the transform's output, in OpenAI's shape

    async def forward(self) -> None:
        """Send the request and read its answer to its end (or until `leave()`); what the transform writes
        goes to Detached.output. Raises as a client's exchange would (OSError, ConnectionError, ...)."""
        ...

    def leave(self) -> None:
        """End the exchange as a client that leaves does: the frontend's connection is dropped, which
        stops the generation."""
        ...


class Detached(Protocol):
    """A generation that runs to its end without the client that asked for it (a background response). The
    shell answers the client with `answer()` at once, then runs `run` with the request's exchange, which no
    client reads. The request's admission (fair_share.py) is held until `run` ends, and its tokens billed."""

    def answer(self) -> LocalAnswer:
        """What the client that asked gets at once."""
        ...

    def output(self, data: bytes, last: bool) -> None:
        """The transform's output, as a client's connection would have written it (`last`: its end)."""
        ...

    async def run(self, exchange: Exchange) -> None:
        """The work, to its end: `exchange.forward()` and whatever the answer needs once it has ended."""
        ...


@dataclass
class Upstream:
    """The request that goes to the frontend, and the transform its answer takes (None: verbatim); with
    `detached`, it runs on without the client, who is answered at once (a background response);
    `headers`, the route's own, go with the client's where it sent none by that name."""

    url: bytes
    body: bytes
    transform: Transform | None = None
    detached: Detached | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()


class Checks(Protocol):
    """What a route may ask of the gateway while checking a request."""

    async def check(self, api: str, request: object, size: int) -> int:
        """The checks every generation API shares (validation.check_request), against the served
        models; raises ApiError naming the field, else returns the model's context window (0 when
        unknown). `size` (the body's bytes) decides whether the work runs off the event loop."""
        ...


class Route(Protocol):
    """One API surface. `api` names a generation API, or another that costs the gateway work (a token
    count): its requests are admitted against the key's share and the graph's capacity, and refused
    past them; None for listings, health, metrics and stored responses."""

    api: str | None

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        """Check the request (raising ApiError for the client's mistakes) and say what goes upstream,
        for `caller` (its key's name and tenant)."""
        ...


class LocalRoute(Protocol):
    """Requests the gateway answers itself, from what it keeps or renders: nothing goes to the frontend."""

    api: str | None

    async def answer(self, method: bytes, url: bytes, body: bytes, checks: Checks, caller: Caller) -> LocalAnswer:
        """The answer to the request from `caller`: a status and JSON body, or events (ApiError for the
        client's mistakes)."""
        ...


def is_local(route: Route | LocalRoute) -> TypeGuard[LocalRoute]:
    """A route the gateway answers itself. Structural, read as one attribute: isinstance on a runtime-checkable
    Protocol costs about ten microseconds, on every request."""
    return hasattr(route, "answer")


def settles(transform: Transform | None) -> TypeGuard[Settling]:
    """A transform whose last bytes wait on I/O (Settling), read as `is_local` is."""
    return hasattr(transform, "settle")


class PassThrough:
    """A request passed to Dynamo's frontend as it came, at the table's own path, and answered as the
    frontend answers (the model list, health)."""

    api = None

    def __init__(self, path: bytes) -> None:
        self.path = path

    async def prepare(self, url: bytes, body: bytes, checks: Checks, caller: Caller) -> Upstream:
        return Upstream(url=self.path, body=body)


async def checked_request(checks: Checks, api: str, body: bytes) -> dict[str, Any]:
    """A request to an API Dynamo's frontend serves: the shared checks, then its JSON object."""
    request = parse_json(body)
    await checks.check(api, request, len(body))
    assert isinstance(request, dict)  # the checks refuse anything else
    return request


async def typed_request(
    checks: Checks, api: str, body: bytes, model: type[Request], refusal: Callable[[ValidationError, object], ApiError]
) -> tuple[Request, int]:
    """A request to an API the gateway owns: the shared checks, then its typed model (pydantic's
    complaint worded by `refusal`, as the API words errors); and the model's context window."""
    raw = parse_json(body)
    context = await checks.check(api, raw, len(body))
    try:
        return model.model_validate(raw), context
    except ValidationError as err:
        raise refusal(err, raw) from None


def origin_path(target: bytes) -> bytes:
    """The path of an origin-form target (`/path?query`); ApiError 400 for any other form."""
    if not target.startswith(b"/") or b"#" in target:
        shown = target[:100].decode(errors="replace")
        raise ApiError(
            400,
            f"Invalid request target {shown!r}: send a path, as in `POST /v1/chat/completions`, "
            "without a scheme, host or fragment.",
            code="invalid_request_target",
        )
    return target.partition(b"?")[0]


class RouteTable:
    """The allow-list: `exact` (method, path) pairs, and `under` path prefixes with the methods they
    take (stored responses by id, whose route reads the rest of the path)."""

    def __init__(
        self,
        exact: dict[tuple[bytes, bytes], Route | LocalRoute],
        under: dict[bytes, tuple[frozenset[bytes], LocalRoute]],
    ) -> None:
        self.exact, self.under = exact, under

    def route(self, method: bytes, target: bytes) -> Route | LocalRoute:
        """The route serving the request; ApiError 400 for a target not in origin form, 404 for
        anything the table does not name."""
        path = origin_path(target)
        found = self.exact.get((method, path))
        if found is not None:
            return found
        for prefix, (methods, local) in self.under.items():
            if path.startswith(prefix) and method in methods:
                return local
        served = sorted(
            {m.decode() for m, p in self.exact if p == path}
            | {m.decode() for prefix, (methods, _) in self.under.items() if path.startswith(prefix) for m in methods}
        )
        shown = f"{method.decode(errors='replace')} {path[:200].decode(errors='replace')}"
        hint = f" ({path.decode(errors='replace')} takes {', '.join(served)})" if served else ""
        raise ApiError(404, f"Invalid URL ({shown}): this endpoint does not serve it{hint}.", code="unknown_url")


def parse_json(raw: bytes) -> object:
    """The JSON value, or None for anything that is not JSON (invalid UTF-8 and nesting too deep included)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None
