"""What each API key used, as Prometheus series labelled by the key's name: requests by API and
status, and input and output tokens.

Tokens are read from the `usage` object Dynamo's frontend puts in an answer (every non-streamed
answer; a stream's last event when the client asks `stream_options.include_usage`, and always on
the Responses API, which asks for it itself). Only a read that contains `"usage"` is parsed, so a
streamed token costs one substring search; the end of each read is kept, so a usage object split
between two reads is counted once, whole.
"""

from __future__ import annotations

import re

from prometheus_client import Counter

NO_KEY = "none"  # the label of requests to a gateway that takes no keys
REFUSED = "refused"  # the label of requests refused for a missing or wrong key
TAIL_BYTES = 256  # longer than any usage object

REQUESTS = Counter(
    "dynamo_oss_gateway_requests", "Requests the gateway answered, by API key name, API and HTTP status.",
    ["key", "api", "status"],
)  # fmt: skip
TOKENS = Counter(
    "dynamo_oss_gateway_tokens", "Tokens in the usage of answers, by API key name and kind (input, output).",
    ["key", "kind"],
)  # fmt: skip
_PROMPT = re.compile(rb'"prompt_tokens":\s*(\d+)')
_COMPLETION = re.compile(rb'"completion_tokens":\s*(\d+)')


def count_request(key: str | None, api: str | None, status: int) -> None:
    REQUESTS.labels(key or NO_KEY, api or "other", str(status)).inc()


def count_tokens(key: str | None, tail: bytes, data: bytes) -> bytes:
    """Count the usage in a read of Dynamo's answer, `tail` being the end of the read before it; the
    tail to give the next read. A figure is counted by the read in which it ends (a digit run cut at
    the end of a read waits for the next)."""
    window = tail + data
    if b'"usage"' in window:
        for kind, pattern in (("input", _PROMPT), ("output", _COMPLETION)):
            for match in pattern.finditer(window):
                if len(tail) < match.end() < len(window):
                    TOKENS.labels(key or NO_KEY, kind).inc(int(match[1]))
    return window[-TAIL_BYTES:]
