"""The Dynamo frontends a gateway process forwards to: new connections go to each in turn, and a
frontend that refuses a connection, drops one before answering, or has no workers yet (it has just
restarted) is passed over for DOWN_S while the others carry its share; the request goes to another.
Only when none is left does a request get the retryable 503.

Several frontends of one namespace share what the KV router knows (`--router-replica-sync`), so
which one a request reaches changes nothing about where its prefix is cached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

log = logging.getLogger("dynamo_oss.gateway")

DOWN_S = 2.0  # how long a frontend that failed is passed over before it is tried again


class FrontendStarting(ConnectionError):
    """A frontend answered that it serves no such model: it has restarted and its workers have not
    registered with it again yet."""

    def __str__(self) -> str:
        return "its workers have not registered with it yet"


@dataclass
class Frontend:
    base: str  # its base URL, e.g. http://127.0.0.1:8001
    host: str
    port: int
    down_until: float = 0.0

    @classmethod
    def at(cls, base: str) -> Frontend:
        parts = urlsplit(base.rstrip("/"))
        if parts.hostname is None:
            raise ValueError(f"{base!r} is not a frontend's base URL (http://HOST:PORT)")
        return cls(base.rstrip("/"), parts.hostname, parts.port or 80)


class Frontends:
    """The frontends of a gateway process, in turn, those that failed lately last."""

    def __init__(self, bases: list[str]) -> None:
        self.all = [Frontend.at(base) for base in bases]
        self._turn = 0

    def in_turn(self) -> list[Frontend]:
        """Every frontend, starting with the next one's turn, those that are down after the others."""
        self._turn = (self._turn + 1) % len(self.all)
        order = self.all[self._turn :] + self.all[: self._turn]
        now = time.monotonic()
        return sorted(order, key=lambda frontend: frontend.down_until > now)

    def failed(self, frontend: Frontend, why: object) -> None:
        if frontend.down_until <= time.monotonic() and len(self.all) > 1:
            log.warning("frontend %s failed (%s): passing over it for %g s", frontend.base, why, DOWN_S)
        frontend.down_until = time.monotonic() + DOWN_S

    async def connect(
        self, protocol: Callable[[Frontend], asyncio.Protocol], order: list[Frontend]
    ) -> asyncio.Protocol:
        """A new connection to the first frontend of `order` (in_turn's) that takes one; the last refusal if none does."""
        loop = asyncio.get_running_loop()
        refused: OSError | None = None
        for frontend in order:
            try:
                _, connection = await loop.create_connection(lambda: protocol(frontend), frontend.host, frontend.port)
                return connection
            except OSError as error:
                self.failed(frontend, error)
                refused = error
        assert refused is not None
        raise refused
