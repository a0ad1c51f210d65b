"""Calibration: the published gpt-oss-120b serving figures, the model's predictions of them
through Dynamo's replay, and the fit of the overhead factors.

Each figure is a published one and its row names the source (`PublishedRow.source`). A row is
"covered" when its configuration is one the model describes (layout, workload and
concurrency known, no speculative decoding, no CPU offload); covered rows are fitted and
must come within 25%. Check rows carry
an assumption the source does not state and are shown, not fitted. Rows left out entirely
are listed in `LEFT_OUT` with the reason.

Refit with `dynamo calibrate --refit` (all of `FITTED`) or `dynamo calibrate --refit vllm`
(only the named ones); either writes costs.FITTED_FACTORS_PATH. The efficiencies are not
fitted: Hopper's are measured (costs.HOPPER_MEASURED_PATH), the others are priors.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from dynamo_oss.perf.costs import FITTED_FACTORS_PATH, Factors, fitted_factors
from dynamo_oss.perf.layout import Layout, PoolLayout, Workload
from dynamo_oss.perf.replay import simulate

TOLERANCE = 0.25
# tok_s_user: aiperf's definition; tok_s_user_tpot: InferenceMAX's 1000 / TPOT, which its rows
# publish; tok_s_user_e2e: output tokens per second per user over the whole request (the NVL72
# blog's 1.5M tok/s over 50,000 users). See dynamo_oss.perf.metrics.DEFINITIONS.
Metric = Literal["tok_s_user", "tok_s_user_tpot", "tok_s_user_e2e", "tok_s_gpu", "ttft_ms"]


class PublishedRow(BaseModel):
    """One published measurement and the configuration it was taken on."""

    key: str
    source: str
    layout: Layout
    workload: Workload
    concurrency: int
    requests: int = Field(description="requests the replay sends: the source's own count where known")
    published: dict[Metric, float]
    covered: bool = True
    assumption: str = ""


class Comparison(BaseModel):
    key: str
    metric: Metric
    published: float
    predicted: float
    covered: bool

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def _agg(hardware: str, tp: int, engine: str = "trtllm", **pool: object) -> Layout:
    return Layout(hardware=hardware, engine=engine, pools={"agg": PoolLayout(tp=tp, **pool)})


_BLOG9 = "TensorRT-LLM tech blog 9 (deploying gpt-oss)"
_INFERENCEMAX = "InferenceMAX nightly (third-party extraction)"
_1K1K = Workload(isl=1024, osl=1024)

PUBLISHED: list[PublishedRow] = [
    PublishedRow(
        key="b200-tp8-batch1-1k2k",
        source=_BLOG9,
        layout=_agg("b200", 8),
        workload=Workload(isl=1024, osl=2048),
        concurrency=1,
        requests=40,
        published={"tok_s_user": 420},
    ),
    PublishedRow(
        key="b200-dep4-maxtput-1k2k",
        source=_BLOG9,
        layout=_agg("b200", 4, attention_dp=True, max_batch=640),
        workload=Workload(isl=1024, osl=2048),
        concurrency=2560,
        requests=2 * 2560,
        published={"tok_s_gpu": 19_500},
        assumption="max throughput taken as the engine full: max_batch_size 640 per attention-DP rank "
        "(blog 9's max-throughput config), so 2,560 in flight",
    ),
    PublishedRow(
        key="b200-tp8-c4-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("b200", 8),
        workload=_1K1K,
        concurrency=4,
        requests=40,
        published={"tok_s_user_tpot": 463, "tok_s_gpu": 221, "ttft_ms": 33},
    ),
    PublishedRow(
        key="b200-tp1-c128-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("b200", 1),
        workload=_1K1K,
        concurrency=128,
        requests=1280,
        published={"tok_s_user_tpot": 78, "tok_s_gpu": 9_671, "ttft_ms": 120},
    ),
    PublishedRow(
        key="h200-vllm-tp8-c4-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("h200", 8, engine="vllm"),
        workload=_1K1K,
        concurrency=4,
        requests=40,
        published={"tok_s_user_tpot": 272, "tok_s_gpu": 131, "ttft_ms": 33},
    ),
    PublishedRow(
        key="h100-vllm-tp8-c4-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("h100", 8, engine="vllm"),
        workload=_1K1K,
        concurrency=4,
        requests=40,
        published={"tok_s_user_tpot": 270, "tok_s_gpu": 130, "ttft_ms": 33},
    ),
    PublishedRow(
        key="h100-vllm-tp2-c64-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("h100", 2, engine="vllm"),
        workload=_1K1K,
        concurrency=64,
        requests=640,
        published={"tok_s_user_tpot": 66, "tok_s_gpu": 2_056, "ttft_ms": 164},
    ),
    PublishedRow(
        key="gb200-nvl72-1.5M",
        source="NVIDIA blog, Aug 2025 (1.5M tok/s, 50k users, 72 GPUs)",
        layout=_agg("gb200", 4, attention_dp=True, max_batch=800),
        workload=_1K1K,
        concurrency=2778,
        requests=2 * 2778,
        published={"tok_s_user_e2e": 30, "tok_s_gpu": 20_800},
        covered=False,
        assumption="ISL/OSL and layout unpublished: assumed 1k/1k on 4-GPU TP4/EP4/attention-DP workers "
        "(the aggregated GB200 recipe, batch up to 800), 50,000/72 = 694 users per GPU",
    ),
]

LEFT_OUT: dict[str, str] = {
    "GB200, Dynamo + TensorRT-LLM disaggregated, 1k/1k c1 / c2560": "layout per point unpublished; the GPU "
    "counts the figures imply (about 4 at c1, about 7 at c2560: tok/s/user x concurrency / tok/s/GPU) fit "
    "no single published recipe",
    "8xB200, Dynamo + vLLM, agentic trace, aggregated / 2P6D": "EAGLE3 speculative decoding, 90% KV hits "
    "on a trace that is not published",
    "8xH200, same trace, aggregated + CPU offload / 4P4D": "CPU KV offload and EAGLE3 speculative decoding",
    "B200, Dynamo + TensorRT-LLM, very long ISL, up to 4x": "no values published: it is the claim "
    "benchmarks/isl32k tests",
}


def predict(row: PublishedRow, factors: Factors) -> dict[Metric, float]:
    """The row's metrics as the replay gives them with `factors`.

    Client-side TTFT is the replay's mean TTFT plus one step (TensorRT-LLM's overlap scheduler
    and vLLM's async scheduling hand a step's tokens out after launching the next step) plus
    the request path outside the engine (`client_ttft_overhead_ms`).
    """
    (point,) = simulate(row.layout, row.workload, [row.concurrency], requests=row.requests, factors=factors)
    return {
        "tok_s_user": point.tok_s_user,
        "tok_s_user_tpot": point.tok_s_user_tpot,
        "tok_s_user_e2e": point.tok_s_user_e2e,
        "tok_s_gpu": point.tok_s_gpu,
        "ttft_ms": point.ttft_mean_ms + point.itl_p50_ms + factors.client_ttft_overhead_ms,
    }


def compare(factors: Factors | None = None, rows: list[PublishedRow] | None = None) -> list[Comparison]:
    """Every published figure beside its prediction."""
    factors = factors or fitted_factors()
    out = []
    for row in PUBLISHED if rows is None else rows:
        predicted = predict(row, factors)
        out.extend(
            Comparison(key=row.key, metric=m, published=v, predicted=predicted[m], covered=row.covered)
            for m, v in row.published.items()
        )
    return out


# The fitted factors and their bounds; "vllm" is vLLM's engine_overhead_factor (TensorRT-LLM's is 1).
FITTED: dict[str, tuple[float, float]] = {
    "layer_overhead_us": (0, 200),
    "sequence_overhead_us": (0, 200),
    "client_ttft_overhead_ms": (0, 100),
    "vllm": (0.5, 5),
}


def _value(factors: Factors, name: str) -> float:
    return factors.engine_overhead_factor["vllm"] if name == "vllm" else getattr(factors, name)


def _factors_at(x: np.ndarray, base: Factors, names: tuple[str, ...]) -> Factors:
    update: dict[str, object] = {}
    for name, value in zip(names, map(float, x), strict=True):
        if name == "vllm":
            update["engine_overhead_factor"] = {"trtllm": 1.0, "vllm": value}
        else:
            update[name] = value
    return base.model_copy(update=update)


def fit(base: Factors | None = None, names: tuple[str, ...] = tuple(FITTED)) -> Factors:
    """Least squares on the log ratio of prediction to figure over the covered rows.

    Only the factors named (of `FITTED`: the layer, per-sequence and client overheads and
    vLLM's engine factor) move, each starting from its prior; every other factor keeps
    `base`'s value (the efficiencies: measured for Hopper, priors for Blackwell; the
    collective latency: its prior). Fitting only "vllm" leaves every TensorRT-LLM prediction
    as it was: the published vLLM rows are all on Hopper, the TensorRT-LLM rows all on Blackwell.
    """
    base = base or Factors()
    covered = [row for row in PUBLISHED if row.covered]

    def residuals(x: np.ndarray) -> np.ndarray:
        comparisons = compare(_factors_at(x, base, names), covered)
        return np.array([math.log(c.predicted / c.published) for c in comparisons])

    x0 = np.array([_value(Factors(), name) for name in names])  # so a refit does not depend on the last one
    bounds = ([FITTED[name][0] for name in names], [FITTED[name][1] for name in names])
    from scipy.optimize import least_squares  # only refits need scipy; it costs every command 0.6 s to load

    result = least_squares(residuals, x0, bounds=bounds, diff_step=0.05, xtol=1e-3)
    return _factors_at(result.x, base, names)


def refit(names: tuple[str, ...] = tuple(FITTED)) -> Factors:
    """Fit the named factors and store the result where `costs.fitted_factors` reads it: all of
    them from the priors, or some of them with the others kept as stored."""
    factors = fit(Factors() if set(names) == set(FITTED) else fitted_factors(), names)
    FITTED_FACTORS_PATH.write_text(factors.model_dump_json(indent=2) + "\n")
    return factors


def verdict(comparison: Comparison) -> str:
    """ok, OVER 25%, or that a check row is not fitted."""
    if not comparison.covered:
        return "check, not fitted"
    return "ok" if abs(comparison.error) <= TOLERANCE else f"OVER {TOLERANCE:.0%}"


def misses(comparisons: list[Comparison]) -> list[Comparison]:
    """Covered figures beyond TOLERANCE: what fails `dynamo calibrate`."""
    return [c for c in comparisons if verdict(c).startswith("OVER")]


def table_markdown(comparisons: list[Comparison]) -> str:
    """The calibration table: each figure, the prediction and the error."""
    rows = {row.key: row for row in PUBLISHED}
    lines = [
        "| row | source | metric | published | model | error | |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for c in comparisons:
        lines.append(
            f"| {c.key} | {rows[c.key].source} | {c.metric} | {c.published:,.0f} | {c.predicted:,.0f} "
            f"| {c.error:+.1%} | {verdict(c)} |"
        )
    notes = [f"- {row.key}: {row.assumption}" for row in PUBLISHED if row.assumption]
    left_out = [f"- {what}: {why}" for what, why in LEFT_OUT.items()]
    return "\n".join(
        lines
        + ["", "Assumptions:", *notes]
        + ["", "Left out:", *left_out]
    )
