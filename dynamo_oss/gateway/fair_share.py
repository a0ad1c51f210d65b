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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.graph.schema import KeyLimitsSection


class Bucket:
    """`per_minute` units, refilled evenly; may run below empty by one charge."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = per_minute
        self.rate = per_minute / 60.0  # units a second
        self.level = float(per_minute)
        self.at = time.monotonic()

    def refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def seconds_until(self, level: float) -> float:
        return max(0.0, (level - self.level) / self.rate)


@dataclass
class Share:
    """One key's limits and what it has used of them."""

    limits: KeyLimitsSection
    in_flight: int = 0
    requests: Bucket | None = field(default=None)
    tokens: Bucket | None = field(default=None)

    def __post_init__(self) -> None:
        if self.limits.requests_per_minute:
            self.requests = Bucket(self.limits.requests_per_minute)
        if self.limits.tokens_per_minute:
            self.tokens = Bucket(self.limits.tokens_per_minute)


class FairShare:
    """Every key's share: `default` for keys the keys file gives no limits of their own (`own`)."""

    def __init__(self, default: KeyLimitsSection | None, own: dict[str, KeyLimitsSection]) -> None:
        self.default = default
        self.own = own
        self._shares: dict[str, Share] = {}

    def share(self, key: str | None) -> Share | None:
        """The key's share, or None for a key without limits (and without keys)."""
        if key is None:
            return None
        found = self._shares.get(key)
        if found is None:
            limits = self.own.get(key, self.default)
            if limits is None:
                return None
            found = self._shares[key] = Share(limits)
        return found

    def admit(self, share: Share) -> None:
        """Count one generation request in, or refuse it with a 429 naming the limit it is past."""
        for bucket in (share.requests, share.tokens):
            if bucket is not None:
                bucket.refill()
        limits = share.limits
        if limits.concurrent_requests is not None and share.in_flight >= limits.concurrent_requests:
            raise _refusal(share, f"{limits.concurrent_requests} requests in flight", 1.0)
        if share.requests is not None and share.requests.level < 1:
            raise _refusal(share, f"{limits.requests_per_minute} requests per minute", share.requests.seconds_until(1))
        if share.tokens is not None and share.tokens.level <= 0:
            wait = share.tokens.seconds_until(1)
            raise _refusal(share, f"{limits.tokens_per_minute} tokens per minute", wait)
        share.in_flight += 1
        if share.requests is not None:
            share.requests.level -= 1

    def done(self, share: Share, tokens: int) -> None:
        """The request's answer has ended: its place is free, and its `tokens` (prompt and output, from its
        usage, or as far as they were read when the answer was cut) are charged."""
        share.in_flight -= 1
        if share.tokens is not None:
            share.tokens.refill()
            share.tokens.level -= tokens


def headers(share: Share) -> list[tuple[bytes, bytes]]:
    """OpenAI's `x-ratelimit-*` headers for what the key has left of its minute."""
    out = []
    for kind, bucket in (("requests", share.requests), ("tokens", share.tokens)):
        if bucket is not None:
            out += [
                (b"x-ratelimit-limit-" + kind.encode(), str(bucket.capacity).encode()),
                (b"x-ratelimit-remaining-" + kind.encode(), str(max(0, math.floor(bucket.level))).encode()),
                (b"x-ratelimit-reset-" + kind.encode(), _duration(bucket.seconds_until(bucket.capacity)).encode()),
            ]
    return out


def _refusal(share: Share, limit: str, wait_s: float) -> ApiError:
    retry_after = max(1, math.ceil(wait_s))
    error = ApiError(
        429,
        f"Rate limit reached for this API key: {limit}. Try again in {retry_after} s.",
        code="rate_limit_exceeded",
        retry_after=retry_after,
    )
    error.headers = headers(share)
    return error


def _duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: `120ms`, `1s`, `6m0s`."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"
