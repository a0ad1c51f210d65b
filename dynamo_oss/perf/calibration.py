"""Calibration: the published gpt-oss-120b serving figures, the model's predictions of them
through Dynamo's replay, and the fit of the overhead factors.

Each figure is a published one and its row names the source (`PublishedRow.source`). A row is
"covered" when its configuration is one the model describes (layout, workload and
concurrency known, no speculative decoding, no CPU offload); covered rows are fitted and
must come within 25%. Check rows carry
an assumption the source does not state and are shown, not fitted. Rows left out entirely
are listed in `LEFT_OUT` with the reason.

Refit with `dynamo calibrate --refit` (all of `FITTED`) or `dynamo calibrate --refit vllm`
(only the named ones); either writes costs.FITTED_FACTORS_PATH. Hopper's efficiencies are
measured (costs.HOPPER_MEASURED_PATH) and not fitted; of the others, the compute efficiency is
fitted (the 8k-input rows are what pins it: prefill is most of their work), memory and link
stay priors.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from dynamo_oss.perf.aic import AicReference, aic_metric
from dynamo_oss.perf.costs import FITTED_FACTORS_PATH, Factors, fitted_factors
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.replay import simulate

TOLERANCE = 0.25
# tok_s_user: aiperf's definition; tok_s_user_tpot: InferenceMAX's 1000 / TPOT, which its rows
# publish; tok_s_user_e2e: output tokens per second per user over the whole request (the NVL72
# blog's 1.5M tok/s over 50,000 users). See dynamo_oss.perf.metrics.DEFINITIONS.
# ttft_ms is the mean client-side TTFT; ttft_p50_ms the median, used where a closed loop's start-up
# burst dominates the mean (InferenceMAX's 8k/1k rows: p99 TTFT 10-30 x the median).
Metric = Literal["tok_s_user", "tok_s_user_tpot", "tok_s_user_e2e", "tok_s_gpu", "ttft_ms", "ttft_p50_ms"]


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
    known_misses: dict[Metric, str] = Field(
        default_factory=dict,
        description="figures of a covered row the model misses for a stated reason outside it: shown, not fitted",
    )


class Comparison(BaseModel):
    key: str
    metric: Metric
    published: float
    predicted: float
    covered: bool

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def _agg(hardware: str, tp: int, engine: str = "trtllm", precision: Precision | None = None, **pool: object) -> Layout:
    return Layout(
        hardware=hardware, engine=engine, precision=precision or Precision(), pools={"agg": PoolLayout(tp=tp, **pool)}
    )


_BLOG9 = "TensorRT-LLM tech blog 9 (deploying gpt-oss)"
_INFERENCEMAX = "InferenceMAX nightly (third-party extraction)"
_1K1K = Workload(isl=1024, osl=1024)
# InferenceMAX draws lengths uniformly from 0.8 to 1 x nominal (its client's --random-range-ratio 0.8):
# the replay sends the mean lengths.
_IMAX_8K1K = Workload(isl=7373, osl=922)
_IMAX_1K1K = Workload(isl=922, osl=922)
# InferenceMAX's result files, as copied verbatim by gminneci/mantile @ 11a8e896
# (reconcile/sources/inferencemax/raw/run_<id>/agg_bmk.json); metric code SemiAnalysisAI/InferenceX
# utils/process_result.py @ 77f3e680. tok/s/GPU is output over all GPUs: for disaggregated runs the
# file's output_tput_per_gpu is per decode GPU, so it is scaled by decode / all GPUs here.
_IMAX_RUNS = "InferenceMAX run {run} (agg_bmk.json, third-party copy: gminneci/mantile @ 11a8e896)"
_TRT_PERF = (
    "TensorRT-LLM perf overview, offline trtllm-bench max throughput "
    "(docs/source/developer-guide/perf-overview.md @ 03e27c7d)"
)
_FP8 = Precision(kv_cache="fp8")
_VLLM_SHORT_PREFILL = (
    "vLLM's TP8 TTFT at 4 in flight wants a smaller fixed cost per prefill step than its TP2 TTFT at 64 in "
    "flight, its decode speed and TensorRT-LLM's TTFTs allow: one engine factor and one client overhead "
    "cannot fit them all, and a profile of vLLM's prefill steps on a Hopper GPU would pin it"
)
_MARLIN_PREFILL = (
    "Hopper's MXFP4 experts run in vLLM 0.13's Marlin W4A16 kernels (VLLM_MXFP4_USE_MARLIN=1) while the H200's "
    "expert efficiencies were measured on BF16 grouped GEMMs and triton_kernels' MXFP4 GEMMs; prefill on Marlin "
    "is slower, and only a Marlin measurement on an H200 can pin by how much"
)


def _disagg(hardware: str, prefill: PoolLayout, decode: PoolLayout) -> Layout:
    return Layout(hardware=hardware, precision=_FP8, pools={"prefill": prefill, "decode": decode})


def _b200_trt(tp: int) -> Layout:
    """InferenceMAX's B200 TensorRT-LLM 1.2.0rc2 server: 20k-token steps, batch up to 512, FP8 KV."""
    return Layout(
        hardware="b200", precision=_FP8, pools={"agg": PoolLayout(tp=tp, max_batch=512, max_num_tokens=20000)}
    )


def _h200_vllm(tp: int, concurrency: int) -> Layout:
    """InferenceMAX's H200 vLLM 0.13 server: 8k-token steps, max-num-seqs = concurrency, default (BF16) KV."""
    return _agg("h200", tp, engine="vllm", max_batch=concurrency, max_num_tokens=8192)


_PREFILL_TP1 = PoolLayout(tp=1, max_batch=32, max_num_tokens=20000)  # InferenceMAX's GB200 prefill workers


def _decode(tp: int, max_batch: int) -> PoolLayout:
    """A GB200 decode worker of InferenceMAX's sweep: TP with EP1, 20k-token steps."""
    return PoolLayout(tp=tp, ep=1, max_batch=max_batch, max_num_tokens=20000)


def _imax(
    key: str,
    run: int,
    layout: Layout,
    workload: Workload,
    concurrency: int,
    published: dict[Metric, float],
    rounds: int = 10,
    **extra: object,
) -> PublishedRow:
    """One InferenceMAX run's figures: `rounds` x concurrency requests, as its client sends them."""
    return PublishedRow(
        key=key,
        source=_IMAX_RUNS.format(run=run),
        layout=layout,
        workload=workload,
        concurrency=concurrency,
        requests=rounds * concurrency,
        published=published,
        **extra,
    )


def _offline(key: str, layout: Layout, isl: int, tok_s_gpu: float, requests: int) -> PublishedRow:
    return PublishedRow(
        key=key,
        source=_TRT_PERF,
        layout=layout,
        workload=Workload(isl=isl, osl=1024),
        concurrency=requests,
        requests=requests,
        published={"tok_s_gpu": tok_s_gpu},
        covered=False,
        assumption="offline: every request queued at once, as trtllm-bench throughput runs them; the row's "
        "max batch, token budget and KV memory fraction are not read, so the model's defaults stand in",
    )


# Speculative decoding (issue 42): TensorRT-LLM's own EAGLE3 runs of gpt-oss-120b, total output tok/s of a
# closed batch, without and with the EAGLE3 head; the first figure per batch is without speculation.
_PR_12130 = (
    "TensorRT-LLM pull request 12130 (gpt-oss-120b, gpt-oss-120b-Eagle3, 8 x H200 TP8, MT-Bench, 2,048-token "
    "outputs), as a third-party survey of the PR tabulates it"
)
_PR_12130_TOK_S = {
    1: (370.45, 731.33),
    4: (1244.39, 2195.98),
    8: (2175.31, 3601.65),
    16: (3761.68, 5523.94),
    32: (5594.57, 7303.50),
    64: (7585.72, 11305.00),
    128: (11806.55, 11820.91),
}
_MT_BENCH = Workload(isl=128, osl=2048)  # MT-Bench prompts are short; the PR gives no mean input length


def _pr_12130(batch: int, drafts: int) -> PublishedRow:
    tok_s = _PR_12130_TOK_S[batch][1 if drafts else 0]
    note = "draft length not stated: 3 taken, TensorRT-LLM's gpt-oss EAGLE3 example (tech blog 11); " if drafts else ""
    stopped = batch == 128 and drafts
    return PublishedRow(
        key=f"h200-tp8-{f'eagle3x{drafts}' if drafts else 'plain'}-bs{batch}",
        source=_PR_12130,
        layout=_agg("h200", 8, draft_tokens=drafts),
        workload=_MT_BENCH,
        concurrency=batch,
        requests=2 * batch,
        published={"tok_s_gpu": tok_s / 8},
        covered=False,
        assumption=f"{note}mean input of 128 tokens assumed; BF16 KV (the checkpoint's default)"
        + (
            "; at batch 128 the published EAGLE3 figure equals the plain one within 0.1%, as if speculation "
            "were off there"
            if stopped
            else ""
        ),
    )


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
        known_misses={"ttft_ms": _VLLM_SHORT_PREFILL},
    ),
    PublishedRow(
        key="h100-vllm-tp8-c4-1k1k",
        source=_INFERENCEMAX,
        layout=_agg("h100", 8, engine="vllm"),
        workload=_1K1K,
        concurrency=4,
        requests=40,
        published={"tok_s_user_tpot": 270, "tok_s_gpu": 130, "ttft_ms": 33},
        known_misses={"ttft_ms": _VLLM_SHORT_PREFILL},
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
    # Long input and disaggregated serving (issue 9): 8k/1k aggregated on B200 and H200, 8k/1k and 1k/1k
    # disaggregated on GB200, and the offline ceilings at 8k/1k and 32k/1k.
    _imax(
        "b200-trt-tp1-c64-8k1k",
        20308883467,
        _b200_trt(1),
        _IMAX_8K1K,
        64,
        {"tok_s_user_tpot": 72.5, "tok_s_gpu": 4_434, "ttft_p50_ms": 147},
    ),
    _imax(
        "b200-trt-tp1-c128-8k1k",
        20764588467,
        _b200_trt(1),
        _IMAX_8K1K,
        128,
        {"tok_s_user_tpot": 46.0, "tok_s_gpu": 5_620, "ttft_p50_ms": 176},
    ),
    _imax(
        "b200-trt-tp4-c32-8k1k",
        20764588467,
        _b200_trt(4),
        _IMAX_8K1K,
        32,
        {"tok_s_user_tpot": 214.0, "tok_s_gpu": 1_616, "ttft_p50_ms": 72},
    ),
    _imax(
        "h200-vllm-tp1-c16-8k1k",
        20667906037,
        _h200_vllm(1, 16),
        _IMAX_8K1K,
        16,
        {"tok_s_user_tpot": 62.1, "tok_s_gpu": 934, "ttft_p50_ms": 354},
        known_misses={"ttft_p50_ms": _MARLIN_PREFILL},
    ),
    _imax(
        "h200-vllm-tp8-c16-8k1k",
        20667906037,
        _h200_vllm(8, 16),
        _IMAX_8K1K,
        16,
        {"tok_s_user_tpot": 176.0, "tok_s_gpu": 329, "ttft_p50_ms": 120},
        known_misses={"ttft_p50_ms": _MARLIN_PREFILL},
    ),
    # GB200 Dynamo + TensorRT-LLM (runtime 0.7.0.post2): the file's output tok/s per decode GPU is
    # rescaled to all GPUs. Shown, not fitted: see benchmarks/calibration/README.md.
    _imax(
        "gb200-disagg-p1-d4-c64-8k1k",
        20764588467,
        _disagg("gb200", _PREFILL_TP1, _decode(4, 128)),
        _IMAX_8K1K,
        64,
        {"tok_s_user_tpot": 235.3, "tok_s_gpu": 2_937 * 4 / 5, "ttft_p50_ms": 644},
        rounds=8,
        covered=False,
        assumption="1 prefill TP1 + 1 decode TP4/EP1; FP8 KV assumed",
    ),
    _imax(
        "gb200-disagg-p2-d2-c384-8k1k",
        20764588467,
        _disagg("gb200", _PREFILL_TP1.model_copy(update={"workers": 2}), _decode(2, 512)),
        _IMAX_8K1K,
        384,
        {"tok_s_user_tpot": 74.7, "tok_s_gpu": 11_869 * 2 / 4, "ttft_p50_ms": 1087},
        rounds=8,
        covered=False,
        assumption="2 prefill TP1 + 1 decode TP2/EP1; FP8 KV assumed",
    ),
    _imax(
        "gb200-disagg-p1-d4-c1-1k1k",
        20764588467,
        _disagg("gb200", _PREFILL_TP1, _decode(4, 4)),
        _IMAX_1K1K,
        1,
        {"tok_s_user_tpot": 528.2, "tok_s_gpu": 129 * 4 / 5, "ttft_p50_ms": 40},
        rounds=40,
        covered=False,
        assumption="1 prefill TP1 + 1 decode TP4/EP1; FP8 KV assumed",
    ),
    _imax(
        "gb200-disagg-p1-d2xdep2-c2560-1k1k",
        20786863188,
        _disagg(
            "gb200", _PREFILL_TP1, PoolLayout(workers=2, tp=2, attention_dp=True, max_batch=512, max_num_tokens=20000)
        ),
        _IMAX_1K1K,
        2560,
        {"tok_s_user_tpot": 76.2, "tok_s_gpu": 27_064 * 4 / 5, "ttft_p50_ms": 8_238},
        rounds=2,
        covered=False,
        assumption="1 prefill TP1 + 2 decode TP2/EP2 with attention DP; FP8 KV assumed; TTFT is the queue at "
        "the single prefill GPU; 2 rounds of requests replayed where InferenceMAX sent 8",
    ),
    _offline("b200-dep2-offline-8k1k", _agg("b200", 2, attention_dp=True, precision=_FP8), 8192, 6_111, 1500),
    _offline("gb200-tp1-offline-8k1k", _agg("gb200", 1, precision=_FP8), 8192, 6_835, 1500),
    _offline("h200-tp1-offline-8k1k", _agg("h200", 1), 8192, 1_828, 1500),
    _offline("b200-dep2-offline-32k1k", _agg("b200", 2, attention_dp=True, precision=_FP8), 32768, 1_392, 1000),
    _offline("gb200-tp1-offline-32k1k", _agg("gb200", 1, precision=_FP8), 32768, 1_645, 1000),
    _offline("h200-tp1-offline-32k1k", _agg("h200", 1), 32768, 519, 1000),
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

PUBLISHED += [_pr_12130(batch, drafts) for batch in _PR_12130_TOK_S for drafts in (0, 3)]

LEFT_OUT: dict[str, str] = {
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
    client_ms = factors.client_ttft_overhead_ms
    return {
        "tok_s_user": point.tok_s_user,
        "tok_s_user_tpot": point.tok_s_user_tpot,
        "tok_s_user_e2e": point.tok_s_user_e2e,
        "tok_s_gpu": point.tok_s_gpu,
        "ttft_ms": point.ttft_mean_ms + point.itl_p50_ms + client_ms,
        "ttft_p50_ms": point.ttft_p50_ms + point.itl_p50_ms + client_ms,
    }


def compare(factors: Factors | None = None, rows: list[PublishedRow] | None = None) -> list[Comparison]:
    """Every published figure beside its prediction."""
    factors = factors or fitted_factors()
    out = []
    for row in PUBLISHED if rows is None else rows:
        predicted = predict(row, factors)
        out.extend(
            Comparison(
                key=row.key,
                metric=m,
                published=v,
                predicted=predicted[m],
                covered=row.covered and m not in row.known_misses,
            )
            for m, v in row.published.items()
        )
    return out


# The fitted factors and their bounds; "vllm" is vLLM's engine_overhead_factor (TensorRT-LLM's is 1).
FITTED: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.3, 0.95),  # Blackwell's; its 8k/1k rows pin it
    "layer_overhead_us": (0, 200),
    "sequence_overhead_us": (0, 200),
    "client_ttft_overhead_ms": (0, 100),
    "vllm": (0.5, 5),
}
# The speculative step's factors, fitted on the speedups of _PR_12130's EAGLE3 rows over its plain ones
# (batches 1-64: at 128 speculation looks off), so that the model's own error on the plain rows, which
# both sides share, does not move them.
SPECULATIVE: dict[str, tuple[float, float]] = {
    "verify_routing_overlap": (0, 1),
    "draft_step_layers": (0, 10),
    "verified_draft_overhead_us": (0, 100),
}
SPECULATIVE_BATCHES = (1, 4, 8, 16, 32, 64)
# Fitted names that are one engine's entry of a per-engine field.
_PER_ENGINE = {"vllm": ("engine_overhead_factor", "vllm")}


def _value(factors: Factors, name: str) -> float:
    if name in _PER_ENGINE:
        field, engine = _PER_ENGINE[name]
        return getattr(factors, field)[engine]
    return getattr(factors, name)


def _factors_at(x: np.ndarray, base: Factors, names: tuple[str, ...]) -> Factors:
    update: dict[str, object] = {}
    for name, value in zip(names, map(float, x), strict=True):
        if name in _PER_ENGINE:
            field, engine = _PER_ENGINE[name]
            update[field] = {**update.get(field, getattr(base, field)), engine: value}
        else:
            update[name] = value
    return base.model_copy(update=update)


def fit(base: Factors | None = None, names: tuple[str, ...] = tuple(FITTED)) -> Factors:
    """Least squares on the log ratio of prediction to figure over the covered rows.

    Only the factors named (of `FITTED`: Blackwell's compute efficiency, the layer, per-sequence
    and client overheads and vLLM's engine factor) move, each starting from its prior; every other factor keeps
    `base`'s value (the efficiencies: measured for Hopper, priors for Blackwell; the
    collective latency: its prior). Fitting only "vllm" leaves every TensorRT-LLM prediction
    as it was: the published vLLM rows are all on Hopper, the TensorRT-LLM rows all on Blackwell.
    """
    base = base or Factors()
    covered = [row for row in PUBLISHED if row.covered]

    def residuals(x: np.ndarray) -> np.ndarray:
        comparisons = compare(_factors_at(x, base, names), covered)
        return np.array([math.log(c.predicted / c.published) for c in comparisons if c.covered])

    x0 = np.array([_value(Factors(), name) for name in names])  # so a refit does not depend on the last one
    bounds = ([FITTED[name][0] for name in names], [FITTED[name][1] for name in names])
    from scipy.optimize import least_squares  # only refits need scipy; it costs every command 0.6 s to load

    result = least_squares(residuals, x0, bounds=bounds, diff_step=0.05, xtol=1e-3)
    return _factors_at(result.x, base, names)


class Speedup(BaseModel):
    """A batch's EAGLE3 output rate over its plain one, published and predicted (and AIConfigurator's)."""

    batch: int
    published: float
    predicted: float
    aic: float | None = None


def speedups(
    factors: Factors | None = None, batches: tuple[int, ...] = tuple(_PR_12130_TOK_S), aic: AicReference | None = None
) -> list[Speedup]:
    """What speculation gains at each batch of _PR_12130, as published, as the replay has it, and as
    AIConfigurator's estimates (`aic`) have it."""
    factors = factors or fitted_factors()
    rows = {row.key: row for row in PUBLISHED}
    estimates = aic.by_key() if aic is not None else {}
    out = []
    for batch in batches:
        plain, eagle3 = (rows[f"h200-tp8-{kind}-bs{batch}"] for kind in ("plain", "eagle3x3"))
        aic_plain, aic_eagle3 = (aic_metric(estimates.get(row.key), "tok_s_gpu") for row in (plain, eagle3))
        out.append(
            Speedup(
                batch=batch,
                published=eagle3.published["tok_s_gpu"] / plain.published["tok_s_gpu"],
                predicted=predict(eagle3, factors)["tok_s_gpu"] / predict(plain, factors)["tok_s_gpu"],
                aic=aic_eagle3 / aic_plain if aic_plain and aic_eagle3 else None,
            )
        )
    return out


def fit_speculation(base: Factors, names: tuple[str, ...] = tuple(SPECULATIVE)) -> Factors:
    """Least squares on the log ratio of predicted to published speedup, batches SPECULATIVE_BATCHES."""

    def residuals(x: np.ndarray) -> np.ndarray:
        factors = _factors_at(x, base, names)
        return np.array([math.log(s.predicted / s.published) for s in speedups(factors, SPECULATIVE_BATCHES)])

    x0 = np.array([_value(base, name) for name in names])
    bounds = ([SPECULATIVE[name][0] for name in names], [SPECULATIVE[name][1] for name in names])
    from scipy.optimize import least_squares

    result = least_squares(residuals, x0, bounds=bounds, diff_step=0.05, xtol=1e-3)
    return _factors_at(result.x, base, names)


def refit(names: tuple[str, ...] = (*FITTED, *SPECULATIVE)) -> Factors:
    """Fit the named factors and store the result where `costs.fitted_factors` reads it: all of
    them from the priors, or some of them with the others kept as stored."""
    everything = set(names) == set(FITTED) | set(SPECULATIVE)
    factors = Factors() if everything else fitted_factors()
    main = tuple(name for name in names if name in FITTED)
    if main:
        factors = fit(factors, main)
    speculative = tuple(name for name in names if name in SPECULATIVE)
    if speculative:
        factors = fit_speculation(factors, speculative)
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


def table_markdown(comparisons: list[Comparison], aic: AicReference | None = None) -> str:
    """The calibration table: each figure, the prediction and the error; with `aic`, AIConfigurator's
    estimate of the figure beside them (blank where it was not asked or gave none)."""
    rows = {row.key: row for row in PUBLISHED}
    estimates = aic.by_key() if aic is not None else {}
    head = "| row | source | metric | published | model | error | |"
    rule = "|---|---|---|---:|---:|---:|---|"
    if aic is not None:
        head += f" AIConfigurator {aic.aiconfigurator} | its error |"
        rule += "---:|---:|"
    lines = [head, rule]
    for c in comparisons:
        line = (
            f"| {c.key} | {rows[c.key].source} | {c.metric} | {c.published:,.0f} | {c.predicted:,.0f} "
            f"| {c.error:+.1%} | {verdict(c)} |"
        )
        if aic is not None:
            value = aic_metric(estimates.get(c.key), c.metric)
            line += " |  |" if value is None else f" {value:,.0f} | {value / c.published - 1:+.1%} |"
        lines.append(line)
    notes = [f"- {row.key}: {row.assumption}" for row in PUBLISHED if row.assumption]
    notes += [
        f"- {row.key}, {metric}: not fitted: {why}" for row in PUBLISHED for metric, why in row.known_misses.items()
    ]
    left_out = [f"- {what}: {why}" for what, why in LEFT_OUT.items()]
    return "\n".join(lines + ["", "Assumptions:", *notes] + ["", "Left out:", *left_out])


def speedup_markdown(rows: list[Speedup]) -> str:
    """The EAGLE3 speedups of _PR_12130 beside the model's: what its speculative factors are fitted on."""
    lines = [
        f"EAGLE3 over plain decoding, output tok/s ({_PR_12130}; the model's fitted on batches "
        f"{', '.join(map(str, SPECULATIVE_BATCHES))}):",
        "",
        "| batch | published | model | error | AIConfigurator |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s.batch} | {s.published:.2f}x | {s.predicted:.2f}x | {s.predicted / s.published - 1:+.1%} | "
        + (f"{s.aic:.2f}x |" if s.aic is not None else " |")
        for s in rows
    ]
    return "\n".join(lines)
