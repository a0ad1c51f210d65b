"""Connection hygiene at the gateway: how long a client may take over each part of a request, how
long an idle keep-alive connection stays open, how many connections are open at once, and how
large a body may be declared. nginx's defaults are the reference: 60 s for a request's headers
(client_header_timeout) and between two reads of its body (client_body_timeout), 75 s of keep-alive
idleness (keepalive_timeout); a body limit and a connection cap that a long gpt-oss prompt and a
busy graph fit.

A client too slow with its headers or body gets a 408 and the connection closed; an idle
keep-alive connection is closed quietly; a connection past the cap is closed as it opens, with a
log line at most every LOG_EVERY_S; a declared Content-Length over the limit gets a 413 before
any of the body is read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dynamo_oss.gateway.errors import ApiError

log = logging.getLogger("dynamo_oss.gateway")

LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    keep_alive_timeout_s: float = 75.0
    max_connections: int = 4096
    max_body_bytes: int = 64 * 2**20

    def too_large(self) -> ApiError:
        """The 413 for a body past the limit, which says what the limit is."""
        limit = self.max_body_bytes // 2**20
        return ApiError(413, f"The request body is larger than {limit} MiB (the gateway's limit); send a smaller "
                        "one, or raise gateway.limits.max_body_mib.", code="request_too_large")  # fmt: skip

    def declared_too_large(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """A Content-Length over the body limit (the framing itself is the HTTP parser's to check)."""
        for name, value in headers:
            if name.lower() == b"content-length" and value.strip().isdigit():
                return int(value) > self.max_body_bytes
        return False


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
            log.warning("%d client connections open, the most gateway.limits.max_connections allows: closed %d new "
                        "one(s) as they opened", self.open, self._refused_since_log)  # fmt: skip
            self._logged_at, self._refused_since_log = now, 0
        return False

    def closed(self) -> None:
        self.open -= 1


class Deadline:
    """One connection's clock: the phase it is in (headers, body, idle) and what happens when it runs out."""

    def __init__(self, limits: Limits, on_slow_request: Callable[[], None], on_idle: Callable[[], None]) -> None:
        self.limits = limits
        self._on_slow_request, self._on_idle = on_slow_request, on_idle
        self._timer: asyncio.TimerHandle | None = None

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

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        self.stop()
        self._timer = asyncio.get_running_loop().call_later(seconds, then)
