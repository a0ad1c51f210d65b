"""What a client may make the gateway hold or wait for, before it is authenticated and after: the
limits the HTTP shell (app.py) applies as bytes arrive. nginx's defaults are the reference: 60 s
for a request's headers (client_header_timeout), between two reads of its body
(client_body_timeout) and between two writes a client accepts (send_timeout), 75 s of keep-alive
idleness (keepalive_timeout), 8 KiB for a request line's target and 64 KiB for the whole head
(large_client_header_buffers' order); a body limit and a connection cap that a long gpt-oss
prompt and a busy graph fit.

- A target past MAX_TARGET_BYTES gets a 414, and a head past MAX_HEAD_BYTES a 431, as soon as that
  many bytes have arrived, and the connection is closed: nothing that grows with the input is kept.
- A client too slow with its headers or body gets a 408 and the connection closed; an idle
  keep-alive connection is closed quietly; a client that leaves the gateway's buffer for it full (it
  stopped reading its answer, or reads too little to drain it) for `write_timeout_s` has its
  connection dropped, which stops its generation and frees its slot.
- A connection past the cap is closed as it opens, with a log line at most every LOG_EVERY_S.
- A declared Content-Length over the body limit gets a 413 before any of the body is read; a route
  that takes no body (GET, DELETE) refuses one; bodies held at once, over all connections, are capped
  (`max_buffered_bytes`): past it a 503 with Retry-After.
- A client pipelining more than MAX_QUEUED requests, or more than one largest body's worth of them, on
  one connection gets a 429 for the one past it, and the connection closed once those ahead are answered.
- A head of more than MAX_HEADERS lines gets a 431; a chunked body's trailers are read and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dynamo_oss.gateway.errors import RETRY_AFTER_S, ApiError
from dynamo_oss.graph.schema import GatewayLimitsSection

log = logging.getLogger("dynamo_oss.gateway")

LOG_EVERY_S = 10.0
MAX_TARGET_BYTES = 8 * 1024  # a request line's target (its path and query)
MAX_HEAD_BYTES = 64 * 1024  # a request's line and headers together, cookies included
MAX_HEADERS = 256  # header lines in one head (each costs the gateway a tuple, whatever its size)
MAX_QUEUED = 16  # requests a pipelining client may have waiting on one connection
_GRAPH_DEFAULTS = GatewayLimitsSection()


@dataclass(frozen=True)
class Limits:
    """The graph's gateway.limits in the units the shell counts in (bytes, not MiB); the defaults are the
    graph schema's, the one place they are set."""

    header_timeout_s: float = _GRAPH_DEFAULTS.header_timeout_s
    body_timeout_s: float = _GRAPH_DEFAULTS.body_timeout_s
    keep_alive_timeout_s: float = _GRAPH_DEFAULTS.keep_alive_timeout_s
    write_timeout_s: float = _GRAPH_DEFAULTS.write_timeout_s
    max_connections: int = _GRAPH_DEFAULTS.max_connections
    max_body_bytes: int = _GRAPH_DEFAULTS.max_body_mib * 2**20
    max_buffered_bytes: int = _GRAPH_DEFAULTS.max_buffered_mib * 2**20

    @classmethod
    def of(cls, section: GatewayLimitsSection) -> Limits:
        return cls(
            header_timeout_s=section.header_timeout_s,
            body_timeout_s=section.body_timeout_s,
            keep_alive_timeout_s=section.keep_alive_timeout_s,
            write_timeout_s=section.write_timeout_s,
            max_connections=section.max_connections,
            max_body_bytes=section.max_body_mib * 2**20,
            max_buffered_bytes=section.max_buffered_mib * 2**20,
        )

    def too_large(self) -> ApiError:
        """The 413 for a body past the limit, which says what the limit is."""
        limit = self.max_body_bytes // 2**20
        return ApiError(
            413,
            f"The request body is larger than {limit} MiB (the gateway's limit); send a smaller "
            "one, or raise gateway.limits.max_body_mib.",
            code="request_too_large",
        )

    @property
    def max_request_bytes(self) -> int:
        """The most a whole request may take on the wire: its head, its body, and the body's chunk
        framing and trailers, each bounded (a trailer is read and dropped, never kept)."""
        return self.max_body_bytes + 2 * MAX_HEAD_BYTES + self.max_body_bytes // 8

    def declared_size(self, headers: list[tuple[bytes, bytes]]) -> int:
        """The Content-Length a request declares (0 when none: the framing is the HTTP parser's to check)."""
        for name, value in headers:
            if name.lower() == b"content-length" and value.strip().isdigit():
                return int(value)
        return 0


class BodyBudget:
    """The request bodies the gateway holds at once, over all connections, against `max_buffered_bytes`:
    a body is counted as its bytes arrive (what a client declares it will send costs nothing until it
    does), and let go once its exchange is over."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.held = 0

    def take(self, size: int) -> None:
        """Count `size` more bytes in, or refuse them, retryably, past the budget."""
        if self.held + size > self.limits.max_buffered_bytes:
            limit = self.limits.max_buffered_bytes // 2**20
            raise ApiError(
                503,
                f"The gateway holds {limit} MiB of request bodies already (gateway.limits."
                "max_buffered_mib); retry shortly.",
                code="overloaded",
                retry_after=RETRY_AFTER_S,
            )
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


class ConnectionCount:
    """The gateway's open client connections, against the cap."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open = 0
        self._refused_since_log = 0
        self._logged_at = 0.0

    def admit(self) -> bool:
        """Count a new connection in, or say it must be closed (and log so, now and then)."""
        if self.open < self.limits.max_connections:
            self.open += 1
            return True
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "%d client connections open, the most gateway.limits.max_connections allows: closed %d new "
                "one(s) as they opened",
                self.open,
                self._refused_since_log,
            )
            self._logged_at, self._refused_since_log = now, 0
        return False

    def closed(self) -> None:
        self.open -= 1


class Deadline:
    """One connection's clock: the phase it is in (headers, body, idle) and what happens when it runs out."""

    def __init__(
        self,
        limits: Limits,
        on_slow_request: Callable[[], None],
        on_idle: Callable[[], None],
        on_stalled: Callable[[], None],
    ) -> None:
        self.limits = limits
        self._on_slow_request, self._on_idle, self._on_stalled = on_slow_request, on_idle, on_stalled
        self._timer: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None  # runs while the client reads none of its answer

    def awaiting_headers(self) -> None:
        self._arm(self.limits.header_timeout_s, self._on_slow_request)

    def awaiting_body(self) -> None:
        self._arm(self.limits.body_timeout_s, self._on_slow_request)

    def idle(self) -> None:
        self._arm(self.limits.keep_alive_timeout_s, self._on_idle)

    def stop(self) -> None:
        """A request is read whole: the answer may take as long as it takes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def writes_paused(self) -> None:
        """The client's buffers are full: it has `write_timeout_s` to take some of its answer."""
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(self.limits.write_timeout_s, self._on_stalled)

    def writes_resumed(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        self.stop()
        self._timer = asyncio.get_running_loop().call_later(seconds, then)
