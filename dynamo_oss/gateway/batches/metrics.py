"""The Batch API's series, beside every key's usage (usage.py): each batch request Dynamo's frontend answered is
counted as a request of its key with the API `batch`, and its tokens also here, by kind, with what batch requests
hold in the engines now (prompt tokens waiting for prefill, sequences decoding), so the planner can tell the load
it sizes the pools for (interactive traffic) from what batch work fills in (planner/batch_work.py); and the
pacing window."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from dynamo_oss.gateway.batches.records import TokenUsage
from dynamo_oss.gateway.usage import count_request

BATCH_API = "batch"  # the `api` label of batch requests in dynamo_oss_gateway_requests_total

TOKENS = Counter(
    "dynamo_oss_gateway_batch_tokens",
    "Tokens in the usage of batch requests' answers, by kind (input, output).",
    ["kind"],
)
DECODING = Gauge(
    "dynamo_oss_gateway_batch_decoding",
    "Batch requests that have had their first token and are still generating (sequences in the decode pools).",
    multiprocess_mode="livesum",
)
PREFILL = Gauge(
    "dynamo_oss_gateway_batch_prefill_tokens",
    "Prompt tokens of batch requests sent and still waiting for their first token (what they add to prefill queues).",
    multiprocess_mode="livesum",
)
WINDOW = Gauge(
    "dynamo_oss_gateway_batch_window",
    "Batch requests the gateway's processes may have in flight now (their pacing windows, summed).",
    multiprocess_mode="livesum",
)


def count_line(owner: str | None, status: int, usage: TokenUsage) -> None:
    count_request(owner, BATCH_API, status)
    TOKENS.labels("input").inc(usage.input_tokens)
    TOKENS.labels("output").inc(usage.output_tokens)
