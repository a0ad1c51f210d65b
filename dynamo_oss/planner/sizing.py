"""How many workers each pool needs for the graph's TTFT and ITL targets, from the calibrated model.

This is what Dynamo's `sla` mode asks AISimulate for, answered by the project's own performance
model (dynamo_oss.perf) for the pool's engine layout and GPU:

- decode: at `n` workers the decode batch settles where the pool's token rate meets the demand
  (requests/s x output tokens); ITL is the step time at that batch (per attention rank). The
  fewest `n` whose ITL is within the target is the size. Past the batch where the pool's KV cache
  or `max_batch` ends, the pool cannot keep up at all.
- prefill: each worker serves prompts one at a time (service time: the prompt's prefill, less the
  tokens the KV cache already holds); TTFT at its percentile is the queueing wait of an M/D/c
  queue (Erlang C, with the wait of deterministic service taken as half of exponential's) plus the
  prefill, the KV handoff and one decode step. The fewest `n` within the target is the size.
- aggregated: each step carries the decode batch and, on average, the prompts of the requests that
  arrive meanwhile (as `perf.search.steady_state` models it); ITL is that mixed step, TTFT the
  queued prefill.

The rate is seen over a window, so it lags a rising load by about half of it. What the engines hold
now (`Backlog`) does not lag: the decode batch is at least the sequences decoding now, and a
prompt's wait includes the prompts already queued, served by the pool's workers in turn.

A pool's size stays within its autoscale range; Dynamo's planner applies the GPU budget after.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from dynamo_oss.deployment.frozen import Frozen

from dynamo_oss.perf.costs import CostModel, attention_spans, fitted_factors, kv_handoff_ms
from dynamo_oss.perf.layout import Layout, Role
from dynamo_oss.perf.speculation import CHAT

# How closely the settled batch is found: a thousandth of a request per rank. The planner runs the
# bisection for every size it tries at every look, each step a cost-model step.
BATCH_TOLERANCE = 1e-3


class Load(Frozen):
    """The traffic a pool is sized for: what Dynamo's planner observes and predicts."""

    requests_per_s: float = Field(ge=0, description="arriving requests per second")
    isl: float = Field(ge=1, description="mean input tokens per request")
    osl: float = Field(ge=1, description="mean output tokens per request")
    kv_hit_rate: float = Field(default=0.0, ge=0, le=1, description="share of prompt tokens found in the KV cache")


class Backlog(Frozen):
    """What the pools' engines hold at the look (Dynamo's forward-pass metrics): work already arrived."""

    prefill_tokens: float = Field(default=0.0, ge=0, description="prompt tokens waiting to be prefilled")
    decode_requests: float = Field(default=0.0, ge=0, description="sequences decoding or waiting to decode")

    def describe(self) -> str:
        return f"{self.prefill_tokens:.0f} prompt tokens queued, {self.decode_requests:.0f} sequences decoding"


NO_BACKLOG = Backlog()


class Range(Frozen):
    min: int = Field(ge=1)
    max: int = Field(ge=1)


class SizingSpec(Frozen):
    """Everything the sizing needs about a graph, as plain data: the SLA plugin's kwargs."""

    layout: Layout = Field(description="the graph's pools as the performance model sees them (fixed pools' sizes)")
    ranges: dict[Role, Range] = Field(description="the autoscaled pools and their ranges")
    ttft_ms: float = Field(gt=0)
    itl_ms: float = Field(gt=0)
    percentile: float = Field(default=0.9, gt=0, lt=1, description="the TTFT percentile kept under ttft_ms")
    time_scale: float = Field(default=1.0, gt=0, description="the engine runs this many times slower than modelled")


class Sizing(Frozen):
    """A proposal and what the model predicts at it."""

    workers: dict[Role, int]
    ttft_ms: float = Field(description="predicted TTFT at the percentile")
    itl_ms: float = Field(description="predicted mean ITL")
    reason: str


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with `offered` = arrival rate x service time."""
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    utilisation = offered / servers
    return blocking / (1 - utilisation * (1 - blocking))


def queue_wait_ms(servers: int, requests_per_s: float, service_ms: float, percentile: float) -> float:
    """The wait at `percentile` before service starts, M/D/c: inf when the servers cannot keep up."""
    if requests_per_s <= 0:
        return 0.0
    offered = requests_per_s * service_ms / 1e3
    if offered >= servers:
        return math.inf
    waiting = erlang_c(servers, offered)
    if waiting <= 1 - percentile:
        return 0.0
    drain_per_ms = 2 * (servers / service_ms - requests_per_s / 1e3)  # deterministic service: half the wait
    return math.log(waiting / (1 - percentile)) / drain_per_ms


def settled_batch(tokens_per_s: float, step_ms: Callable[[float], float], largest: float) -> float | None:
    """The batch per rank at which a step of `step_ms(batch)` yields `tokens_per_s`; None past `largest`."""
    if tokens_per_s <= 0:
        return 1.0
    if largest * 1e3 / step_ms(largest) < tokens_per_s:
        return None
    low, high = 0.0, largest
    while high - low > BATCH_TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if middle * 1e3 / step_ms(middle) < tokens_per_s else (low, middle)
    return max(high, 1.0)


class Sizer:
    """Predicted TTFT and ITL of a graph's pools at any size, and the fewest workers that meet the targets."""

    def __init__(self, spec: SizingSpec) -> None:
        self.spec = spec
        factors = fitted_factors()
        self.costs = {role: CostModel.for_pool(spec.layout, role, factors) for role in spec.layout.pools}
        self.factors = factors

    def _workers(self, role: Role, sizes: dict[Role, int]) -> int:
        return sizes.get(role, self.spec.layout.pools[role].workers)

    def _largest_batch(self, role: Role, load: Load) -> float:
        cost = self.costs[role]
        return float(cost.largest_batch(int(load.isl + load.osl)))

    def _context(self, load: Load) -> float:
        return load.isl + load.osl / 2

    def prefill_ms(self, role: Role, load: Load) -> float:
        return self.spec.time_scale * self.costs[role].prompt_ms(load.isl, load.isl * load.kv_hit_rate)

    def decode_step_ms(self, batch: float, load: Load) -> float:
        return self.spec.time_scale * float(self.costs["decode"].decode_ms(batch, self._context(load)))

    def _gained(self, role: Role) -> float:
        """Tokens a decoding sequence gains a step: 1, or a speculative pool's accepted drafts plus one
        (chat traffic's acceptance: what the planner sees does not say how many drafts a workload keeps)."""
        return CHAT.tokens_per_step(self.costs[role].pool.draft_tokens)

    def decode_token_ms(self, batch: float, load: Load) -> float:
        """A decoding sequence's time per output token: its ITL."""
        return self.decode_step_ms(batch, load) / self._gained("decode")

    def _agg_token_ms(self, batch: float, load: Load) -> float:
        return self._agg_step_ms(batch, load) / self._gained("agg")

    def _agg_step_ms(self, batch: float, load: Load) -> float:
        new = load.isl * (1 - load.kv_hit_rate)
        full, window = attention_spans(load.isl - new, new, self.spec.layout.shape.sliding_window)
        step = self.costs["agg"].step_ms(
            prefill_tokens=(batch - 1) * new / load.osl,
            prefill_full_span=full,
            prefill_window_span=window,
            prefill_seqs=(batch - 1) / load.osl,
            decode_seqs=batch,
            decode_context=self._context(load),
        )
        return self.spec.time_scale * float(step)

    def predict(self, sizes: dict[Role, int], load: Load, backlog: Backlog = NO_BACKLOG) -> tuple[float, float]:
        """(TTFT at the percentile, mean ITL) in ms at these pool sizes; inf where a pool cannot keep up."""
        if "agg" in self.spec.layout.pools:
            return self._predict_agg(self._workers("agg", sizes), load, backlog)
        decode = self.costs["decode"].pool
        ranks = self._workers("decode", sizes) * decode.ranks
        largest = self._largest_batch("decode", load)
        batch = settled_batch(load.requests_per_s * load.osl / ranks, lambda b: self.decode_token_ms(b, load), largest)
        if batch is not None and backlog.decode_requests / ranks > largest:
            batch = None  # the sequences decoding now do not fit in the pool's KV cache
        if batch is not None:
            batch = max(batch, backlog.decode_requests / ranks)
        step = self.decode_step_ms(batch or largest, load)  # the first token waits one step (a full one if overrun)
        itl = self.decode_token_ms(batch or largest, load)
        prefill = self.prefill_ms("prefill", load)
        handoff = self.spec.time_scale * kv_handoff_ms(self.spec.layout, int(load.isl), self.factors)
        workers = self._workers("prefill", sizes)
        wait = queue_wait_ms(workers, load.requests_per_s, prefill, self.spec.percentile)
        wait += self._backlog_ms(backlog, prefill, load) / workers
        return wait + prefill + handoff + step, itl if batch is not None else math.inf

    def _backlog_ms(self, backlog: Backlog, prefill_ms: float, load: Load) -> float:
        """Time one worker needs to prefill the queued prompt tokens, at this load's cost per prompt token."""
        return backlog.prefill_tokens * prefill_ms / load.isl

    def _predict_agg(self, workers: int, load: Load, backlog: Backlog) -> tuple[float, float]:
        ranks = workers * self.costs["agg"].pool.ranks
        prefill = self.prefill_ms("agg", load)

        def request_ms_per_token(batch: float) -> float:  # a rank's time per output token of one request
            return (prefill + load.osl * self._agg_token_ms(batch, load)) / load.osl

        largest = self._largest_batch("agg", load)
        batch = settled_batch(load.requests_per_s * load.osl / ranks, request_ms_per_token, largest)
        if batch is None or backlog.decode_requests / ranks > largest:  # or what decodes now does not fit
            return math.inf, math.inf
        batch = max(batch, backlog.decode_requests / ranks)
        wait = queue_wait_ms(ranks, load.requests_per_s, prefill, self.spec.percentile)
        wait += self._backlog_ms(backlog, prefill, load) / ranks
        return wait + prefill, self._agg_token_ms(batch, load)

    def fastest_ms(self, load: Load) -> tuple[float, float]:
        """The best any size can do: (TTFT, ITL) of one request alone."""
        return self.predict(
            {role: 64 for role in self.spec.layout.pools}, load.model_copy(update={"requests_per_s": 0})
        )

    def size(self, load: Load, backlog: Backlog = NO_BACKLOG) -> Sizing:
        """The fewest workers per autoscaled pool that keep both targets, within the pools' ranges, for
        `load` arriving on top of what the engines hold now."""
        spec = self.spec
        sizes = {
            role: spec.ranges[role].min if role in spec.ranges else pool.workers
            for role, pool in spec.layout.pools.items()
        }
        reasons = []
        for role, kept in (("decode", "itl"), ("agg", "both"), ("prefill", "ttft")):
            if role not in spec.ranges:
                continue
            allowed = spec.ranges[role]
            for workers in range(allowed.min, allowed.max + 1):
                sizes[role] = workers
                predicted = self.predict(sizes, load, backlog)
                if self._meets(predicted, kept):
                    reasons.append(f"{role} {workers}")
                    break
            else:
                reasons.append(f"{role} {allowed.max} (its most; more would be needed)")
        ttft, itl = self.predict(sizes, load, backlog)
        held = f" on top of {backlog.describe()}" if backlog != NO_BACKLOG else ""
        return Sizing(
            workers={role: sizes[role] for role in spec.ranges},
            ttft_ms=ttft,
            itl_ms=itl,
            reason=f"{', '.join(reasons)} for {load.requests_per_s:.2f} req/s of ISL {load.isl:.0f} / OSL "
            f"{load.osl:.0f}, KV hit {load.kv_hit_rate:.0%}{held}: predicted TTFT p{spec.percentile * 100:.0f} "
            f"{ttft:.0f} ms (target {spec.ttft_ms:g}), ITL {itl:.1f} ms (target {spec.itl_ms:g})",
        )

    def _meets(self, predicted: tuple[float, float], kept: Literal["ttft", "itl", "both"]) -> bool:
        """Whether the pool being sized keeps its target: decode the ITL, prefill the TTFT, agg both."""
        ttft_ok, itl_ok = predicted[0] <= self.spec.ttft_ms, predicted[1] <= self.spec.itl_ms
        return {"ttft": ttft_ok, "itl": itl_ok, "both": ttft_ok and itl_ok}[kept]
