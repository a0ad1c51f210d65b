"""What batch work (the gateway's Batch API) adds to the load the sla mode observes, taken off before it sizes
the pools: the pools are sized for interactive traffic, and batch work only fills what that leaves.

Batch requests reach Dynamo's frontend like any other, so the traffic Dynamo's planner reads (the frontend's
request count and mean ISL and OSL over the window) includes them, and the engines' backlog includes their
sequences. Left in, a batch would grow the pools (the gateway paces batch work up to the capacity it finds,
the planner would size for it, the gateway would find more): so a batch never grows a pool, and runs in what
the interactive sizing holds (scale-downs included, which leave it less room). The gateway counts every batch
request it answers (`dynamo_oss_gateway_requests_total{api="batch"}`), their tokens, those it has started and
the prompt tokens of those still waiting for a first token, in the graph's Prometheus; this reads them over the
same window and takes them off the traffic and the backlog.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING

from prometheus_api_client import PrometheusConnect

from dynamo_oss.planner.sizing import NO_BACKLOG, Backlog

if TYPE_CHECKING:  # Dynamo's planner imports aisimulate_core, put on the path by its process (__main__.py)
    from dynamo.planner.plugins.types import TrafficMetrics

log = logging.getLogger("dynamo_oss.planner")

QUERY_TIMEOUT_S = 5.0
ANSWERED = 'dynamo_oss_gateway_requests_total{api="batch"}'
STARTED = "dynamo_oss_gateway_batch_requests_started_total"
TOKENS = "dynamo_oss_gateway_batch_tokens_total"
PREFILL = "dynamo_oss_gateway_batch_prefill_tokens"


class BatchWork:
    """The batch work in the graph's Prometheus at `url` (None: no Prometheus, so none is seen)."""

    def __init__(self, url: str | None) -> None:
        self.prometheus = (
            PrometheusConnect(url=url, disable_ssl=True, retry=0, timeout=QUERY_TIMEOUT_S) if url else None
        )
        self._unreadable = False

    async def interactive(self, traffic: TrafficMetrics) -> tuple[TrafficMetrics, Backlog]:
        """`traffic` without the batch requests answered over its window (their count, and their share of the
        mean ISL and OSL), and what batch requests hold in the engines now: their prompt tokens waiting for a
        first token, and their sequences."""
        if self.prometheus is None or traffic.duration_s <= 0:
            return traffic, NO_BACKLOG
        window = f"{max(1, round(traffic.duration_s))}s"
        queries = (
            f"sum(increase({ANSWERED}[{window}]))",
            f'sum(increase({TOKENS}{{kind="input"}}[{window}]))',
            f'sum(increase({TOKENS}{{kind="output"}}[{window}]))',
            f"sum({STARTED}) - sum({ANSWERED})",
            f"sum({PREFILL})",
        )
        try:
            requests, isl_sum, osl_sum, in_flight, prefill = await asyncio.to_thread(self._values, queries)
        except Exception as error:  # noqa: BLE001 - Prometheus away: size on what Dynamo saw, say so once
            if not self._unreadable:
                log.warning("cannot read batch work from Prometheus (%s): sizing for all traffic", error)
            self._unreadable = True
            return traffic, NO_BACKLOG
        self._unreadable = False
        held = Backlog(prefill_tokens=max(0.0, prefill), decode_requests=max(0.0, in_flight))
        return without(traffic, requests, isl_sum, osl_sum), held

    def _values(self, queries: tuple[str, ...]) -> list[float]:
        assert self.prometheus is not None
        values = []
        for query in queries:
            result = self.prometheus.custom_query(query=query)
            value = float(result[0]["value"][1]) if result else 0.0
            values.append(value if math.isfinite(value) else 0.0)
        return values


def without(traffic: TrafficMetrics, requests: float, isl_sum: float, osl_sum: float) -> TrafficMetrics:
    """The traffic less `requests` batch requests whose prompts and outputs came to `isl_sum` and `osl_sum` tokens."""
    requests = min(max(requests, 0.0), traffic.num_req)
    if requests <= 0:
        return traffic
    left = traffic.num_req - requests
    if left <= 0:
        return traffic.model_copy(update={"num_req": 0.0})
    isl = max(1.0, (traffic.isl * traffic.num_req - isl_sum) / left)
    osl = max(1.0, (traffic.osl * traffic.num_req - osl_sum) / left)
    return traffic.model_copy(update={"num_req": left, "isl": isl, "osl": osl})


def less_batch(backlog: Backlog, batch: Backlog) -> Backlog:
    """The engines' backlog without what batch requests hold of it (never below none)."""
    return Backlog(
        prefill_tokens=max(0.0, backlog.prefill_tokens - batch.prefill_tokens),
        decode_requests=max(0.0, backlog.decode_requests - batch.decode_requests),
    )
