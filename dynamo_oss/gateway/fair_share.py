"""Each API key's fair share of the graph: how many generation requests it may have in flight, start a
minute, and how many tokens it may use a minute (graph: `gateway.auth.limits_per_key`; a key's line in
the keys file may say its own). Without limits a key may take the whole graph.

As OpenAI's API does: a request past a limit gets a 429 with Retry-After before any worker sees it,
and every answer to a key with limits carries `x-ratelimit-limit-requests`, `-remaining-requests`,
`-reset-requests` and the same for tokens. A minute's requests and tokens are buckets that refill
evenly (a limit of 60 a minute is one a second, with up to 60 at once). A request is charged one
request as it is admitted, and its tokens (prompt and output, as the answer's usage says, or as far
as they were read when the client left) once the answer ends: a key whose tokens are spent waits
until its bucket is above nothing again, so a key overruns its minute by at most the answers it had
in flight when the bucket ran out.

Every process of the endpoint counts in one ledger (ledger.py), so a key's limits, and the graph's
capacity (`gateway.max_in_flight`), hold over them all, whichever process a connection lands on; where
the graph's gateway runs in several places, the ledger also counts what the others have in flight and
have charged (cluster_share.py), so the limits hold over the graph.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dynamo_oss.gateway.errors import RETRY_AFTER_S, ApiError
from dynamo_oss.gateway.ledger import BATCH_LINES, Ledger
from dynamo_oss.graph.schema import KeyLimitsSection


@dataclass
class Bucket:
    """One of a key's minute buckets as the ledger holds it: `per_minute` units, refilled evenly; may run
    below empty by one charge."""

    capacity: int
    level: float
    at: float

    @property
    def rate(self) -> float:
        return self.capacity / 60.0  # units a second

    def refill(self, now: float) -> None:
        """Up to `now`; a `now` before the bucket's time (read before another process wrote it) refills nothing."""
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def seconds_until(self, level: float) -> float:
        return max(0.0, (level - self.level) / self.rate)


@dataclass
class Ticket:
    """An admitted request: whose key it counts against, and the x-ratelimit-* headers it answers with."""

    slot: int | None
    limits: KeyLimitsSection | None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class FairShare:
    """Admission to the graph: each key's share (`default` for keys the keys file gives no limits of their
    own, `own`), then the graph's capacity (`max_in_flight`), counted in the ledger every process shares."""

    def __init__(
        self,
        default: KeyLimitsSection | None,
        own: dict[str, KeyLimitsSection],
        max_in_flight: int | None,
        ledger: Ledger,
    ) -> None:
        self.default = default
        self.own = own
        self.max_in_flight = max_in_flight
        self.ledger = ledger

    def admit(self, key: str | None) -> Ticket:
        """Count one generation request in, or refuse it: a 429 naming the key's limit it is past, or a
        503 with Retry-After when the graph is at capacity (its interactive requests at max_in_flight)."""
        limits = self.limits_of(key)
        slot = self.ledger.slot(key)
        ticket = Ticket(slot, limits)
        with self.ledger.locked():
            if limits is not None and slot is not None:
                self._charge(ticket, slot, limits)
            # Batch requests are not counted against it: they take only room interactive requests leave, and
            # never turn one away (admit_batch).
            in_flight = self.ledger.in_flight() - self.ledger.in_flight(self.ledger.slots[BATCH_LINES])
            if self.max_in_flight is not None and in_flight >= self.max_in_flight:
                if limits is not None and slot is not None and limits.requests_per_minute:
                    self._give_back_request(slot)
                raise ApiError(
                    503,
                    f"The server is at capacity ({in_flight} requests in flight); retry shortly.",
                    code="overloaded",
                    retry_after=RETRY_AFTER_S,
                )
            self.ledger.count_in(slot)
            if slot is not None:
                self.ledger.charge(slot, requests=1, tokens=0)
        return ticket

    def admit_batch(self, share: int) -> Ticket | None:
        """Count one batch request in while the graph has room for it: fewer than `share` batch requests in
        flight over the graph, and the graph below its capacity; None when it has none now. A batch request
        is no key's (its key's limits are for interactive requests), and is charged nothing."""
        slot = self.ledger.slots[BATCH_LINES]
        with self.ledger.locked():
            if self.ledger.in_flight(slot) >= share:
                return None
            if self.max_in_flight is not None and self.ledger.in_flight() >= self.max_in_flight:
                return None
            self.ledger.count_in(slot)
        return Ticket(slot, None)

    def batch_done(self, ticket: Ticket) -> None:
        with self.ledger.locked():
            self.ledger.count_out(ticket.slot)

    def limits_of(self, key: str | None) -> KeyLimitsSection | None:
        return self.own.get(key, self.default) if key is not None else None

    def _charge(self, ticket: Ticket, slot: int, limits: KeyLimitsSection) -> None:
        """The key's limits, checked and its request charged: a 429 past any of them."""
        now = time.monotonic()
        requests = self._bucket(slot, 0, limits.requests_per_minute, now)
        tokens = self._bucket(slot, 1, limits.tokens_per_minute, now)
        if limits.concurrent_requests is not None and self.ledger.in_flight(slot) >= limits.concurrent_requests:
            raise _refusal(requests, tokens, f"{limits.concurrent_requests} requests in flight", 1.0)
        if requests is not None and requests.level < 1:
            limit = f"{limits.requests_per_minute} requests per minute"
            raise _refusal(requests, tokens, limit, requests.seconds_until(1))
        if tokens is not None and tokens.level <= 0:
            raise _refusal(requests, tokens, f"{limits.tokens_per_minute} tokens per minute", tokens.seconds_until(1))
        if requests is not None:
            requests.level -= 1
            self.ledger.set_bucket(slot, 0, requests.level, requests.at)
        ticket.headers = headers(requests, tokens)

    def _bucket(self, slot: int, which: int, per_minute: int | None, now: float) -> Bucket | None:
        if per_minute is None:
            return None
        bucket = Bucket(per_minute, *self.ledger.bucket(slot, which))
        bucket.refill(now)
        self.ledger.set_bucket(slot, which, bucket.level, bucket.at)
        return bucket

    def _give_back_request(self, slot: int) -> None:
        level, at = self.ledger.bucket(slot, 0)
        self.ledger.set_bucket(slot, 0, level + 1, at)

    def done(self, ticket: Ticket, tokens: int) -> None:
        """The request's answer has ended: its place is free, and its `tokens` (prompt and output, from its
        usage, or as far as they were read when the answer was cut) are charged."""
        with self.ledger.locked():
            self.ledger.count_out(ticket.slot)
            limits = ticket.limits
            if limits is not None and ticket.slot is not None and limits.tokens_per_minute:
                bucket = self._bucket(ticket.slot, 1, limits.tokens_per_minute, time.monotonic())
                assert bucket is not None
                self.ledger.set_bucket(ticket.slot, 1, bucket.level - tokens, bucket.at)
            if ticket.slot is not None:
                self.ledger.charge(ticket.slot, requests=0, tokens=tokens)

    # What the graph's other places charged, kept in step by cluster_share.py: called with the ledger locked.

    def levels(self, key: str, now: float) -> tuple[float | None, float | None]:
        """What is left of the key's requests and tokens this minute (None: no such limit, or all of it)."""
        slot, limits = self.ledger.slots[key], self.limits_of(key)
        requests = self._bucket(slot, 0, _per_minute(limits, 0), now)
        tokens = self._bucket(slot, 1, _per_minute(limits, 1), now)
        return _used(requests), _used(tokens)

    def spend(self, key: str, requests: float, tokens: float, now: float) -> None:
        """Charge the key what another place admitted and answered for it."""
        self._lower(key, now, lambda which, level: level - (requests, tokens)[which])

    def lower_to(self, key: str, levels: tuple[float | None, float | None], now: float) -> None:
        """Take the key's minute as another place sees it where that is lower: what it has left there
        includes what it was charged where this place cannot count it."""
        self._lower(key, now, lambda which, level: level if levels[which] is None else min(level, levels[which]))

    def _lower(self, key: str, now: float, lowered: Callable[[int, float], float]) -> None:
        """Lower the key's buckets as `lowered` says, never below one minute owed: however many places
        a burst landed on, or whatever a peer says, the key is refused for at most a minute more."""
        slot, limits = self.ledger.slots[key], self.limits_of(key)
        for which in (0, 1):
            bucket = self._bucket(slot, which, _per_minute(limits, which), now)
            if bucket is not None:
                level = max(-float(bucket.capacity), lowered(which, bucket.level))
                self.ledger.set_bucket(slot, which, level, bucket.at)


def _used(bucket: Bucket | None) -> float | None:
    return None if bucket is None or bucket.level >= bucket.capacity else bucket.level


def _per_minute(limits: KeyLimitsSection | None, which: int) -> int | None:
    if limits is None:
        return None
    return limits.requests_per_minute if which == 0 else limits.tokens_per_minute


def headers(requests: Bucket | None, tokens: Bucket | None) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-*` headers for what the key has left of its minute."""
    out = []
    for kind, bucket in (("requests", requests), ("tokens", tokens)):
        if bucket is not None:
            out += [
                (b"x-ratelimit-limit-" + kind.encode(), str(bucket.capacity).encode()),
                (b"x-ratelimit-remaining-" + kind.encode(), str(max(0, math.floor(bucket.level))).encode()),
                (b"x-ratelimit-reset-" + kind.encode(), _duration(bucket.seconds_until(bucket.capacity)).encode()),
            ]
    return out


def _refusal(requests: Bucket | None, tokens: Bucket | None, limit: str, wait_s: float) -> ApiError:
    retry_after = max(1, math.ceil(wait_s))
    error = ApiError(
        429,
        f"Rate limit reached for this API key: {limit}. Try again in {retry_after} s.",
        code="rate_limit_exceeded",
        retry_after=retry_after,
    )
    error.headers = headers(requests, tokens)
    return error


def _duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: `120ms`, `1s`, `6m0s`."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"
