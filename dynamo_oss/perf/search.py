"""Which layout to run: enumerate aggregated and disaggregated layouts of a GPU budget,
screen them with a steady-state estimate, replay the promising ones, keep the Pareto front.

Replaying every layout at every concurrency would take minutes (8 GPUs already give about
40 layouts), so a closed-form steady state built on the same step costs picks, per mode,
the few layouts that together come closest to that mode's best tok/s/user at every
tok/s/GPU; only those are replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from pydantic import BaseModel

from dynamo_oss.catalog.hardware import HARDWARE, HardwareName
from dynamo_oss.catalog.models import PUBLISHED_DRAFT_HEADS, BuiltinModelName
from dynamo_oss.engines import MAX_DRAFT_TOKENS
from dynamo_oss.perf.costs import (
    CostModel,
    Factors,
    attention_spans,
    fitted_factors,
    kv_handoff_ms,
)
from dynamo_oss.perf.layout import (
    PREFILL_MAX_NUM_TOKENS,
    Engine,
    Layout,
    Mode,
    PoolLayout,
    Precision,
    Workload,
)
from dynamo_oss.perf.metrics import ServingPoint
from dynamo_oss.perf.replay import simulate

TP_CHOICES = (1, 2, 4, 8)
PREFILL_UTILISATION = 0.9  # above this the prefill queue, hence TTFT, grows without bound
SATURATION_GAIN = 0.03  # a sweep stops once doubling concurrency adds less tok/s/GPU than this


class LayoutPoint(BaseModel):
    """One replayed operating point of one layout."""

    layout: Layout
    serving: ServingPoint

    def meets(self, ttft_ms: float | None, itl_ms: float | None, ttft_p99_ms: float | None = None) -> bool:
        """Median TTFT and ITL within `ttft_ms` and `itl_ms`, and TTFT p99 within `ttft_p99_ms` (None: no limit)."""
        s = self.serving
        return (
            (ttft_ms is None or s.ttft_p50_ms <= ttft_ms)
            and (itl_ms is None or s.itl_p50_ms <= itl_ms)
            and (ttft_p99_ms is None or s.ttft_p99_ms <= ttft_p99_ms)
        )


class SearchResult(BaseModel):
    workload: Workload
    gpus: int
    points: list[LayoutPoint]

    def front(
        self,
        mode: Mode | None = None,
        ttft_ms: float | None = None,
        itl_ms: float | None = None,
        speed: Callable[[ServingPoint], float] = lambda s: s.tok_s_user,
        ttft_p99_ms: float | None = None,
    ) -> list[LayoutPoint]:
        """Pareto-optimal points (`speed`, by default aiperf's tok/s/user, against tok/s/GPU) within
        the limits, highest tok/s/GPU first."""
        chosen = [
            p for p in self.points if (mode is None or p.layout.mode == mode) and p.meets(ttft_ms, itl_ms, ttft_p99_ms)
        ]
        chosen.sort(key=lambda p: (-p.serving.tok_s_gpu, -speed(p.serving)))
        front, best = [], -1.0
        for p in chosen:
            if speed(p.serving) > best:
                front.append(p)
                best = speed(p.serving)
        return front


def _pools_of(gpus: int, role: str, drafts: Sequence[int] = (0,)) -> Iterable[PoolLayout]:
    """Pools of identical workers using exactly `gpus` GPUs; decoding pools with each of `drafts`
    EAGLE3 draft tokens a step (0: no speculation)."""
    for tp in TP_CHOICES:
        if gpus % tp:
            continue
        if role == "prefill":
            yield PoolLayout(workers=gpus // tp, tp=tp, max_num_tokens=PREFILL_MAX_NUM_TOKENS)
            continue
        for draft_tokens in drafts:
            yield PoolLayout(workers=gpus // tp, tp=tp, draft_tokens=draft_tokens)
            if tp > 1:
                yield PoolLayout(workers=gpus // tp, tp=tp, attention_dp=True, draft_tokens=draft_tokens)


def draft_choices(model: BuiltinModelName) -> tuple[int, ...]:
    """Draft tokens a step the search tries: none, and 1 to MAX_DRAFT_TOKENS where the model has a
    published EAGLE3 head for the engine files to name."""
    return (0, *range(1, MAX_DRAFT_TOKENS + 1)) if model in PUBLISHED_DRAFT_HEADS else (0,)


def candidate_layouts(
    model: BuiltinModelName,
    hardware: HardwareName,
    gpus: int,
    workload: Workload,
    *,
    modes: Sequence[Mode] = ("agg", "disagg"),
    precision: Precision | None = None,
    engine: Engine = "trtllm",
    drafts: Sequence[int] = (0,),
) -> list[Layout]:
    """Every layout using exactly `gpus` GPUs whose workers hold the weights and one request's KV.

    Aggregated: one pool, TP 1-8, attention TP or attention DP (EP = TP). Disaggregated:
    every split of the GPUs into a prefill pool (TP 1-8) and a decode pool (as aggregated).
    Decoding pools run each of `drafts` draft tokens a step; a disaggregated layout's prefill
    workers run its decode workers' speculation too (TensorRT-LLM drafts the first step there).
    """
    common = {"model": model, "hardware": hardware, "engine": engine, "precision": precision or Precision()}
    layouts = []
    if "agg" in modes:
        layouts += [Layout(**common, pools={"agg": pool}) for pool in _pools_of(gpus, "agg", drafts)]
    if "disagg" in modes:
        for prefill_gpus in range(1, gpus):
            for prefill in _pools_of(prefill_gpus, "prefill"):
                for decode in _pools_of(gpus - prefill_gpus, "decode", drafts):
                    drafting = prefill.model_copy(update={"draft_tokens": decode.draft_tokens})
                    layouts.append(Layout(**common, pools={"prefill": drafting, "decode": decode}))
    return [layout for layout in layouts if _fits(layout, workload)]


def _fits(layout: Layout, workload: Workload) -> bool:
    return all(
        CostModel.for_pool(layout, role).largest_batch(workload.isl + workload.osl) >= 1 for role in layout.pools
    )


def _queued_ms(service_ms: float, utilisation: np.ndarray) -> np.ndarray:
    """Mean time through a single server at this utilisation (M/D/1 wait plus service)."""
    rho = np.minimum(utilisation, 0.99)
    return service_ms * (1 + rho / (2 * (1 - rho)))


def steady_state(layout: Layout, workload: Workload, factors: Factors) -> np.ndarray:
    """Closed-form operating points over batch sizes: rows of (tok/s/GPU, tok/s/user, TTFT ms).

    Aggregated: a request's own prompt is prefilled before its first token; while it decodes,
    each step also carries on average the prompts of the other requests (batch - 1 times
    ISL / OSL new tokens), so tok/s/user is one over that mixed step. Disaggregated: decode
    steps carry only decode tokens, and a batch is feasible while the prefill pool keeps up
    with the requests it finishes. TTFT is the prefill queued behind the others.
    """
    isl, osl = workload.isl, workload.osl
    role = "agg" if layout.mode == "agg" else "decode"
    pool = layout.pools[role]
    cost = CostModel.for_pool(layout, role, factors)
    gained = workload.profile.tokens_per_step(pool.draft_tokens)  # tokens a decoding sequence gains a step
    largest = cost.largest_batch(isl + osl)
    batch = np.unique(np.geomspace(1, max(largest, 1), 24).round())
    if role == "agg":
        full, window = attention_spans(0, isl, layout.shape.sliding_window)
        step = cost.step_ms(
            prefill_tokens=(batch - 1) * isl / osl,
            prefill_full_span=full,
            prefill_window_span=window,
            prefill_seqs=(batch - 1) / osl,
            decode_seqs=batch,
            decode_context=isl + osl / 2,
        )
        prefill_ms = cost.prompt_ms(isl)
        step = step / gained  # per output token
        requests_per_s = batch / ((prefill_ms + osl * step) / 1e3)  # per rank
        ttft = _queued_ms(prefill_ms, requests_per_s * prefill_ms / 1e3)
        tok_s = requests_per_s * osl * pool.ranks * pool.workers
    else:
        whole = cost.decode_ms(batch, isl + osl / 2)  # the first token waits one whole step
        step = whole / gained  # per output token
        prefill = layout.pools["prefill"]
        prefill_ms = CostModel.for_pool(layout, "prefill", factors).prompt_ms(isl)
        tok_s = batch * pool.ranks * pool.workers / (step / 1e3)
        utilisation = tok_s / osl * prefill_ms / 1e3 / prefill.workers
        ttft = _queued_ms(prefill_ms, utilisation) + kv_handoff_ms(layout, isl, factors) + whole
        feasible = utilisation <= PREFILL_UTILISATION
        tok_s, step, ttft = tok_s[feasible], step[feasible], ttft[feasible]
    return np.column_stack([tok_s / layout.gpus, 1e3 / step, ttft])


def screen(
    layouts: Sequence[Layout],
    workload: Workload,
    keep: int,
    factors: Factors,
    ttft_ms: float | None = None,
    coverage: float = 0.98,
) -> list[Layout]:
    """The fewest layouts (at most `keep`) that together cover the steady-state Pareto front
    (within the TTFT limit, if any).

    Greedy: each pick maximises the mean, over tok/s/GPU levels, of the best tok/s/user the
    picked layouts reach at that level or above, relative to the best any layout reaches;
    picking stops once that mean reaches `coverage`.
    """
    curves = [steady_state(layout, workload, factors) for layout in layouts]
    if ttft_ms is not None:
        curves = [c[c[:, 2] <= ttft_ms] for c in curves]
    reachable = [c for c in curves if len(c)]
    if not reachable:
        return []
    allpoints = np.vstack(reachable)
    levels = np.geomspace(allpoints[:, 0].min(), allpoints[:, 0].max(), 48)

    def best_user(curve: np.ndarray) -> np.ndarray:
        return np.array([curve[curve[:, 0] >= x, 1].max(initial=0.0) for x in levels])

    users = np.array([best_user(c) for c in curves])
    envelope = users.max(axis=0)
    picked: list[int] = []
    covered = np.zeros_like(levels)
    while len(picked) < min(keep, len(layouts)) and np.mean(covered / envelope) < coverage:
        gains = [np.mean(np.maximum(covered, u) / envelope) if i not in picked else -1 for i, u in enumerate(users)]
        best = int(np.argmax(gains))
        picked.append(best)
        covered = np.maximum(covered, users[best])
    return [layouts[i] for i in picked]


def search(
    model: BuiltinModelName,
    hardware: HardwareName,
    gpus: int,
    workload: Workload,
    concurrencies: Sequence[int],
    *,
    keep: int = 4,
    ttft_limits: Sequence[float | None] = (None,),
    modes: Sequence[Mode] = ("agg", "disagg"),
    precision: Precision | None = None,
    factors: Factors | None = None,
    requests: int | None = None,
    drafts: Sequence[int] = (0,),
) -> SearchResult:
    """Screen every layout of `gpus` GPUs, then replay at each concurrency the few (at most
    `keep`) that cover each mode's front within each TTFT limit (None: no limit), with
    `requests` per replay (default: `replay.default_requests`)."""
    if hardware not in HARDWARE:
        raise ValueError(f"Got hardware {hardware!r}. It must be one of {sorted(HARDWARE)}.")
    factors = factors or fitted_factors()
    points = []
    for mode in modes:
        layouts = candidate_layouts(model, hardware, gpus, workload, modes=[mode], precision=precision, drafts=drafts)
        picked = {}
        for limit in ttft_limits:
            picked.update({layout.describe(): layout for layout in screen(layouts, workload, keep, factors, limit)})
        for layout in picked.values():
            points += sweep(layout, workload, concurrencies, factors, requests=requests)
    return SearchResult(workload=workload, gpus=gpus, points=points)


def sweep(
    layout: Layout,
    workload: Workload,
    concurrencies: Sequence[int],
    factors: Factors,
    *,
    requests: int | None = None,
) -> list[LayoutPoint]:
    """Replay rising concurrencies until the layout saturates: past that point more requests
    in flight only queue, adding no tok/s/GPU and so no point to any Pareto front."""
    points: list[LayoutPoint] = []
    for concurrency in sorted(concurrencies):
        serving = simulate(layout, workload, [concurrency], requests=requests, factors=factors)[0]
        points.append(LayoutPoint(layout=layout, serving=serving))
        if len(points) > 1 and serving.tok_s_gpu < (1 + SATURATION_GAIN) * points[-2].serving.tok_s_gpu:
            break
    return points
