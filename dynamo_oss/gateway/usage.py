"""What each API key used, as Prometheus series labelled by the key's name: requests by API and
status, and the tokens of the answers' usage by kind.

The kinds mean the same on every API, whatever its own field names (`Usage`'s constructors):
`input` is every prompt token, cached ones included; `cached` the part of it read from the prefix
cache (the prefill worker's hits on a disaggregated graph); `output` every generated token,
reasoning included; `reasoning` the part of it on gpt-oss's analysis channel.

Each generation route's transform reads its answer's usage in its API's own fields, and the shell
counts it once the answer is whole: a key is billed exactly what its answers say. A chat or
completions stream whose client did not ask for usage is counted all the same: the gateway asks
Dynamo for it and leaves it out of the client's stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

NO_KEY = "none"  # the label of requests to a gateway that takes no keys
REFUSED = "refused"  # the label of requests refused for a missing or wrong key

REQUESTS = Counter(
    "dynamo_oss_gateway_requests",
    "Requests the gateway answered, by API key name, API and HTTP status.",
    ["key", "api", "status"],
)
TOKENS = Counter(
    "dynamo_oss_gateway_tokens",
    "Tokens in the usage of answers, by API key name and kind (input, cached, output, "
    "reasoning; input includes cached, output includes reasoning).",
    ["key", "kind"],
)


@dataclass(frozen=True)
class Usage:
    """An answer's usage, in the gateway's terms (the module's docstring says what each counts)."""

    input: int
    cached: int
    output: int
    reasoning: int

    @classmethod
    def of_openai(cls, usage: Mapping[str, Any]) -> Usage:
        """Chat Completions and Completions: `prompt_tokens` (cached included), `completion_tokens`
        (reasoning included), and their `_details`."""
        return cls(
            input=_count(usage, "prompt_tokens"),
            cached=_count(usage, "prompt_tokens_details", "cached_tokens"),
            output=_count(usage, "completion_tokens"),
            reasoning=_count(usage, "completion_tokens_details", "reasoning_tokens"),
        )

    @classmethod
    def of_responses(cls, usage: Mapping[str, Any]) -> Usage:
        """The Responses API: `input_tokens` (cached included), `output_tokens` (reasoning included)."""
        return cls(
            input=_count(usage, "input_tokens"),
            cached=_count(usage, "input_tokens_details", "cached_tokens"),
            output=_count(usage, "output_tokens"),
            reasoning=_count(usage, "output_tokens_details", "reasoning_tokens"),
        )

    @classmethod
    def of_messages(cls, usage: Mapping[str, Any]) -> Usage:
        """Anthropic's Messages API: `input_tokens` are the prompt tokens not read from the cache,
        `cache_read_input_tokens` those that were; thinking is part of `output_tokens`."""
        cached = _count(usage, "cache_read_input_tokens")
        return cls(
            input=_count(usage, "input_tokens") + cached,
            cached=cached,
            output=_count(usage, "output_tokens"),
            reasoning=_count(usage, "output_tokens_details", "thinking_tokens"),
        )


def _count(usage: Mapping[str, Any], *path: str) -> int:
    """The figure at `path` in a usage object (0 where it is missing or null)."""
    value: Any = usage
    for field in path:
        value = value.get(field) if isinstance(value, Mapping) else None
    return int(value or 0)


def count_request(key: str | None, api: str | None, status: int) -> None:
    REQUESTS.labels(key or NO_KEY, api or "other", str(status)).inc()


def count_tokens(key: str | None, usage: Usage | None) -> None:
    """Count an answer's usage for `key` (None: the answer had none, as a stream the frontend cut)."""
    if usage is None:
        return
    label = key or NO_KEY
    for kind in ("input", "cached", "output", "reasoning"):
        TOKENS.labels(label, kind).inc(getattr(usage, kind))


def ask_for_usage(request: dict[str, Any]) -> bool:
    """Have a streamed chat or completions request ask Dynamo for its usage, so its key is billed
    by it. True when the client did not ask for it: its stream must leave the usage chunk out, so
    the client reads what it would have read. `continuous_usage_stats` without `include_usage`
    puts no usage in a stream, so it is dropped with it."""
    options = request.get("stream_options")
    options = {} if options is None else options
    if not isinstance(options, dict) or options.get("include_usage") not in (None, False):
        return False  # asked for already, or not stream options at all: Dynamo's to serve or refuse
    request["stream_options"] = {
        **{k: v for k, v in options.items() if k != "continuous_usage_stats"},
        "include_usage": True,
    }
    return True
