"""What each API key used, as Prometheus series labelled by the key's name: requests by API and
status, and input and output tokens.

Tokens are read from the `usage` object Dynamo's frontend puts in an answer (every non-streamed
answer; a stream's last event when the client asks `stream_options.include_usage`, and always on
the Responses API, which asks for it itself). Only a read that contains `"usage"` is parsed, so a
streamed token costs one substring search.
"""

from __future__ import annotations

import re

from prometheus_client import Counter

NO_KEY = "none"  # the label of requests to a gateway that takes no keys

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


def count_tokens(key: str | None, data: bytes) -> None:
    """The usage in a piece of Dynamo's answer, if it holds one."""
    if b'"usage"' not in data:
        return
    for kind, pattern in (("input", _PROMPT), ("output", _COMPLETION)):
        found = pattern.findall(data)
        if found:
            TOKENS.labels(key or NO_KEY, kind).inc(int(found[-1]))
