"""What batch work (the gateway's Batch API) adds to the load the sla mode observes, taken off before it sizes
the pools: the pools are sized for interactive traffic, and batch work only fills what that leaves.

Batch requests reach Dynamo's frontend like any other, so the traffic Dynamo's planner reads (the frontend's
request count and mean ISL and OSL over the window) includes them, and the engines' backlog includes their
sequences. The batch's share of that traffic is taken as the gateway counts both sides (its answered batch
requests against its interactive ones, and their tokens), not as the difference of two counts from two
sources: a difference over a short window of two series scraped apart once left a few requests of
millions of tokens each, and the pools grew for them. Left in, a batch would grow the pools (the gateway paces batch work up to the capacity it finds,
the planner would size for it, the gateway would find more): so a batch never grows a pool, and runs in what
the interactive sizing holds (scale-downs included, which leave it less room). The gateway counts every batch
request Dynamo's frontend answered (`dynamo_oss_gateway_requests_total{api="batch"}`; those the gateway refused
never reached it), their tokens, those decoding and the prompt tokens of those still waiting for a first token,
in the graph's Prometheus; this reads them over the same window and takes them off the traffic and the backlog.
The prompt tokens waiting include those being prefilled, which the engines' queue does not: the prefill backlog
may be taken down a chunk a worker too far, never below none.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, NamedTuple

from prometheus_api_client import PrometheusConnect

from dynamo_oss.planner.sizing import NO_BACKLOG, Backlog

if TYPE_CHECKING:  # Dynamo's planner imports aisimulate_core, put on the path by its process (__main__.py)
    from dynamo.planner.plugins.types import TrafficMetrics

log = logging.getLogger("dynamo_oss.planner")

QUERY_TIMEOUT_S = 5.0
ANSWERED = "dynamo_oss_gateway_requests_total"
GENERATION_APIS = "chat|responses|messages|completions"  # the interactive requests that reach Dynamo
ALL_TOKENS = "dynamo_oss_gateway_tokens_total"
MEASURABLE = 0.05  # a share of the requests below which their mean ISL and OSL are not derived
DECODING = "dynamo_oss_gateway_batch_decoding"
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
        """`traffic` without the batch's share of it over its window, and what batch requests hold in the engines
        now: their prompt tokens waiting for a first token, and their sequences decoding."""
        if self.prometheus is None or traffic.duration_s <= 0:
            return traffic, NO_BACKLOG
        window = f"{max(1, round(traffic.duration_s))}s"
        queries = (
            f'sum(increase({ANSWERED}{{api="batch", status="200"}}[{window}]))',
            f'sum(increase({ANSWERED}{{api=~"{GENERATION_APIS}", status="200"}}[{window}]))',
            f'sum(increase({TOKENS}{{kind="input"}}[{window}]))',
            f'sum(increase({ALL_TOKENS}{{kind="input"}}[{window}]))',
            f'sum(increase({TOKENS}{{kind="output"}}[{window}]))',
            f'sum(increase({ALL_TOKENS}{{kind="output"}}[{window}]))',
            f"sum({DECODING})",
            f"sum({PREFILL})",
        )
        try:
            values = await asyncio.to_thread(self._values, queries)
        except Exception as error:  # noqa: BLE001 - Prometheus away: size on what Dynamo saw, say so once
            if not self._unreadable:
                log.warning("cannot read batch work from Prometheus (%s): sizing for all traffic", error)
            self._unreadable = True
            return traffic, NO_BACKLOG
        self._unreadable = False
        batch, interactive, batch_in, all_in, batch_out, all_out, decoding, prefill = values
        shares = Shares(
            requests=_share(batch, batch + interactive),
            input_tokens=_share(batch_in, all_in),
            output_tokens=_share(batch_out, all_out),
        )
        held = Backlog(prefill_tokens=max(0.0, prefill), decode_requests=max(0.0, decoding))
        return without(traffic, shares), held

    def _values(self, queries: tuple[str, ...]) -> list[float]:
        assert self.prometheus is not None
        values = []
        for query in queries:
            result = self.prometheus.custom_query(query=query)
            value = float(result[0]["value"][1]) if result else 0.0
            values.append(value if math.isfinite(value) else 0.0)
        return values


class Shares(NamedTuple):
    """What part of the window's requests, prompt tokens and output tokens were batch work's, each counted by the
    gateway on both sides (so the two counts share their scrapes, and a window's edge cuts both alike)."""

    requests: float
    input_tokens: float
    output_tokens: float


def _share(part: float, whole: float) -> float:
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


def without(traffic: TrafficMetrics, batch: Shares) -> TrafficMetrics:
    """The traffic Dynamo saw less the batch's shares of it: its requests, and the mean ISL and OSL of those left
    (their tokens' share over their requests' share). When nearly all of it was batch work, what is left is too
    little to measure a mean from: it keeps the mean seen."""
    left = 1.0 - batch.requests
    if batch.requests <= 0:
        return traffic
    if left <= 0:
        return traffic.model_copy(update={"num_req": 0.0})
    isl, osl = traffic.isl, traffic.osl
    if left >= MEASURABLE:
        isl = max(1.0, isl * (1.0 - batch.input_tokens) / left)
        osl = max(1.0, osl * (1.0 - batch.output_tokens) / left)
    return traffic.model_copy(update={"num_req": traffic.num_req * left, "isl": isl, "osl": osl})


def less_batch(backlog: Backlog, batch: Backlog) -> Backlog:
    """The engines' backlog without what batch requests hold of it (never below none)."""
    return Backlog(
        prefill_tokens=max(0.0, backlog.prefill_tokens - batch.prefill_tokens),
        decode_requests=max(0.0, backlog.decode_requests - batch.decode_requests),
    )
