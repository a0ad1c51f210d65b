"""Serving figures of a layout from Dynamo's offline replay (dynamo.replay), driven by the
mocker profiles of `profiles`.

The replay is a discrete-event simulation of the router and the mocker workers with no
wall-clock waiting; a closed loop keeps `concurrency` requests in flight, as aiperf does.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.engines import SimulatedTiming
from dynamo_oss.engines.mocker import replay_engine_args
from dynamo_oss.perf.costs import CostModel, Factors, fitted_factors, kv_handoff_ms
from dynamo_oss.perf.graphs import layout_from_deployment, simulated_timings
from dynamo_oss.perf.layout import Layout, Role, Workload
from dynamo_oss.perf.measured_steps import MeasuredSteps
from dynamo_oss.perf.metrics import RequestRecord, ServingPoint, serving_point
from dynamo_oss.perf.profiles import BLOCK_SIZE, simulated_timing

os.environ.setdefault("DYN_LOG", "warn")  # the replay logs every profile load at info


def default_requests(concurrency: int) -> int:
    """Requests per run: ten per slot, as InferenceMAX sends (num_prompts = 10 x concurrency),
    at least 40 so that low concurrencies are not a handful of samples."""
    return max(40, 10 * concurrency)


def batch_beside_chunk(layout: Layout, workload: Workload, concurrency: int) -> float:
    """Sequences decoding beside a prefill chunk on one rank of an aggregated pool, at `concurrency`
    requests in flight: the rank's other requests (its share of them, at most what its batch and
    its KV cache hold), at least one."""
    if layout.mode != "agg":
        return 1.0  # no pool mixes prefill and decode
    pool = layout.pools["agg"]
    held = CostModel.for_pool(layout, "agg").largest_batch(workload.isl + workload.osl)
    return max(1.0, min(concurrency / (pool.workers * pool.ranks), held) - 1)


def replay_args(
    layout: Layout,
    workload: Workload,
    folder: Path,
    factors: Factors,
    decode_batch: float = 1.0,
    cached_tokens: int = 0,
    steps: MeasuredSteps | None = None,
) -> dict[str, object]:
    """Engine arguments and worker counts for Dynamo's replay, profiles written to folder; the
    workload's ISL (its new tokens, after `cached_tokens` found in the KV cache), `decode_batch`,
    acceptance and an engine's measured `steps` as in `profiles.profile_tables`."""
    timings = {
        role: simulated_timing(
            layout,
            role,
            folder / f"{role}.npz",
            prompt_tokens=workload.isl,
            decode_batch=decode_batch,
            acceptance=workload.profile,
            cached_tokens=cached_tokens,
            factors=factors,
            steps=steps,
        )
        for role in layout.pools
    }
    return _engine_args(layout, timings)


def _engine_args(layout: Layout, timings: Mapping[Role, SimulatedTiming]) -> dict[str, object]:
    """The replay's engine arguments and worker counts for each pool's timing, its profile written."""
    args: dict[str, object] = {}
    for role, timing in timings.items():
        timing.profile.write()
        pool = layout.pools[role]
        engine = replay_engine_args(timing, role, pool.tp)
        if role == "agg":
            args.update(extra_engine_args=engine, num_workers=pool.workers)
        else:
            args.update({f"{role}_engine_args": engine, f"num_{role}_workers": pool.workers})
    return args


def simulate(
    layout: Layout,
    workload: Workload,
    concurrencies: Iterable[int],
    *,
    requests: int | None = None,
    factors: Factors | None = None,
    steps: MeasuredSteps | None = None,
) -> list[ServingPoint]:
    """Replay `workload` on `layout` at each concurrency; an aggregated pool's chunks are charged
    beside the decode batch of that concurrency (`batch_beside_chunk`); the steps an engine's measured
    ones where `steps` is given (measured_steps.py), else the cost model's."""
    from dynamo.replay import run_synthetic_trace_replay

    factors = factors or fitted_factors()
    points = []
    with tempfile.TemporaryDirectory(prefix="dynamo-perf-") as tmp:
        for concurrency in concurrencies:
            beside = batch_beside_chunk(layout, workload, concurrency)
            args = replay_args(layout, workload, Path(tmp), factors, beside, steps=steps)
            count = requests or default_requests(concurrency)
            report = run_synthetic_trace_replay(
                workload.isl, workload.osl, count, replay_concurrency=concurrency, capture_per_request=True, **args
            )
            points.append(
                serving_point(
                    [request_record(row) for row in report.per_request],
                    concurrency=concurrency,
                    gpus=layout.gpus,
                    gap_p99_ms=report.summary["p99_itl_ms"],
                )
            )
    return points


class TracePoint(BaseModel):
    """A trace replayed at `lanes` conversations at once: the serving figures and the KV cache's hits."""

    lanes: int
    serving: ServingPoint
    kv_hit_rate: float = Field(description="prompt tokens found in a prefix cache over all prompt tokens")


def replay_trace(
    layout: Layout,
    trace: Path,
    lanes: int,
    typical: Workload,
    *,
    cached_tokens: int,
    router: Literal["kv", "round_robin"] = "kv",
    factors: Factors | None = None,
    steps: MeasuredSteps | None = None,
) -> TracePoint:
    """Replay an agentic trace (Dynamo's `dynamo.agentic_mooncake` format: conversations whose turns
    wait on each other) with `lanes` conversations in flight, behind Dynamo's KV router or round
    robin. The profiles charge a prefill pass as `typical` new tokens after `cached_tokens` of
    cached context, and the decode batch as `lanes` spread over the ranks; the prefix caches'
    hits are the replay's own (its routers and mocker caches see each prompt's KV blocks); the steps an
    engine's measured ones where `steps` is given."""
    factors = factors or fitted_factors()
    decoding = layout.pools["agg" if layout.mode == "agg" else "decode"]
    beside = max(1.0, lanes / (decoding.workers * decoding.ranks) - 1) if layout.mode == "agg" else 1.0
    with tempfile.TemporaryDirectory(prefix="dynamo-perf-") as tmp:
        args = replay_args(layout, typical, Path(tmp), factors, beside, cached_tokens, steps)
        return _trace_point(layout, args, trace, lanes, router)


def replay_served_trace(
    deployment: Deployment, trace: Path, lanes: int, *, router: Literal["kv", "round_robin"] = "kv"
) -> TracePoint:
    """Replay an agentic trace (as `replay_trace`) at the speeds `dynamo serve --engine mocker` runs the
    deployment's workers at (`graphs.simulated_timings`: each prefill chunk charged as a whole prompt beside
    one decode, chat's acceptance), so that a live run of the trace and its replay time the same steps on
    the same KV caches, and what differs between them is the serving, not the model."""
    layout = layout_from_deployment(deployment)
    with tempfile.TemporaryDirectory(prefix="dynamo-perf-") as tmp:
        args = _engine_args(layout, simulated_timings(deployment, Path(tmp)))
        return _trace_point(layout, args, trace, lanes, router)


def _trace_point(
    layout: Layout, args: dict[str, object], trace: Path, lanes: int, router: Literal["kv", "round_robin"]
) -> TracePoint:
    from dynamo.replay import run_trace_replay

    report = run_trace_replay(
        str(trace),
        **args,
        trace_format="agentic_mooncake",
        trace_block_size=BLOCK_SIZE,
        agentic_lanes=lanes,
        router_mode="kv_router" if router == "kv" else "round_robin",
        execution_model=layout.model,
        capture_per_request=True,
    )
    serving = serving_point([request_record(row) for row in report.per_request], concurrency=lanes, gpus=layout.gpus)
    return TracePoint(lanes=lanes, serving=serving, kv_hit_rate=report.summary["prefix_cache_reused_ratio"])


def request_record(row: dict) -> RequestRecord:
    """One request of the replay's per-request capture, as a benchmark client would have timed it."""
    return RequestRecord(
        input_tokens=row["input_length"],
        output_tokens=row["output_length"],
        start_ms=row["arrival_time_ms"],
        ttft_ms=row["ttft_ms"],
        e2e_ms=row["e2e_latency_ms"],
    )


class StepCheck(BaseModel):
    """One step time as the cost model gives it and as the replay of a simple workload shows it."""

    step: str
    model_ms: float
    replay_ms: float

    @property
    def error(self) -> float:
        return self.replay_ms / self.model_ms - 1


def check_step_times(layout: Layout, isl: int, batch: int, factors: Factors | None = None) -> list[StepCheck]:
    """Replay simple workloads and read the cost model's step times back out of them.

    Disaggregated `layout`: one request alone gives TTFT = prompt prefill + KV handoff + one
    decode step, and its ITL the decode step at batch 1; `batch` long requests sent at once
    decode together, so their median ITL is the decode step at that batch (split over the
    attention ranks). Aggregated: the slowest step while prompts arrive beside `batch`
    decoding requests is a full prefill chunk beside the decode batch.
    """
    factors = factors or fitted_factors()
    short, long = Workload(isl=isl, osl=64), Workload(isl=isl, osl=2048)
    if layout.mode == "agg":
        cost = CostModel.for_pool(layout, "agg", factors)
        chunk = layout.pools["agg"].max_num_tokens
        point = simulate(layout, short, [batch], requests=4 * batch, factors=factors)[0]
        # The profile charges a chunk the mean attention span of its whole prompt.
        mixed = float(cost.mixed_ms(chunk, (isl - chunk) / 2, batch - 1, isl + 32))
        return [
            StepCheck(
                step=f"{chunk}-token chunk beside {batch - 1} decodes (p99 inter-token gap)",
                model_ms=mixed,
                replay_ms=point.gap_p99_ms or 0.0,
            )
        ]
    prefill = CostModel.for_pool(layout, "prefill", factors)
    decode = CostModel.for_pool(layout, "decode", factors)
    alone = simulate(layout, short, [1], requests=4, factors=factors)[0]
    together = simulate(layout, long, [batch], requests=batch, factors=factors)[0]
    per_rank = batch / (layout.pools["decode"].ranks * layout.pools["decode"].workers)
    ttft = prefill.prompt_ms(isl) + kv_handoff_ms(layout, isl, factors) + float(decode.decode_ms(1, isl))
    return [
        StepCheck(step=f"TTFT of one {isl}-token prompt", model_ms=ttft, replay_ms=alone.ttft_p50_ms),
        StepCheck(
            step="decode step, batch 1", model_ms=float(decode.decode_ms(1, isl + 32)), replay_ms=alone.itl_p50_ms
        ),
        StepCheck(
            step=f"decode step, {per_rank:g} per rank (ITL p50)",
            model_ms=float(decode.decode_ms(per_rank, isl + 1024)),
            replay_ms=together.itl_p50_ms,
        ),
    ]
