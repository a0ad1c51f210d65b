"""Hopper's measured efficiencies: the committed file is what the measurements give, and H200
step times (only theirs: H100 was not measured) run at them."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu.hopper_factors import HANDOFF, KERNELS, MXFP4, derive
from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.perf.costs import (
    HOPPER_MEASURED_PATH,
    CostModel,
    Efficiencies,
    Factors,
    attention_spans,
    fitted_factors,
    hopper_measured,
    kv_handoff_ms,
)
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision
from dynamo_oss.perf.profiles import kv_transfer_bandwidth_gbps

MEASURED = hopper_measured()
MEASURED_FACTORS = fitted_factors()  # the committed factors: Hopper at MEASURED
# Hopper as before the H200 measurements: the three priors of `Factors`, the overheads as fitted.
PRIORS = MEASURED_FACTORS.model_copy(update={"hopper": None, "compute_efficiency": Factors().compute_efficiency})


def test_committed_file_is_what_the_measurements_give():
    derived = derive(*(json.loads(path.read_text()) for path in (KERNELS, HANDOFF, MXFP4)))
    assert json.loads(HOPPER_MEASURED_PATH.read_text()) == derived
    assert MEASURED == Efficiencies(**derived["efficiencies"])
    kernels = json.loads(KERNELS.read_text())
    assert MEASURED.compute == pytest.approx(kernels["ceilings"]["bf16_gemm_tflops"] / 989, abs=1e-4)
    assert MEASURED.memory == pytest.approx(kernels["ceilings"]["memory_gbps"] / 4800, abs=1e-4)
    # RESULTS.md's summaries: MoE grouped GEMMs at 60-66% of the weight-read floor, 67% compute-bound;
    # attention with sinks at 51-56% of the GEMM ceiling; NIXL contiguous at 71-77% of the 393 GB/s peer copy.
    assert 0.60 <= MEASURED.expert_memory <= 0.66 and MEASURED.expert_compute == pytest.approx(0.67, abs=0.01)
    assert 0.51 <= MEASURED.attention_compute <= 0.56
    assert 0.71 <= MEASURED.kv_handoff / MEASURED.link <= 0.77
    # mxfp4_experts/RESULTS.md: the W4A16 kernel's memory-dominated rows (16-256 tokens), 0.565 and 0.586 in two runs.
    assert MEASURED.expert_memory_mxfp4 == pytest.approx((0.5652 + 0.5858) / 2, abs=1e-4)


def test_the_h200_runs_at_the_measured_efficiencies_and_the_others_at_the_fit_and_priors():
    factors = fitted_factors()
    assert factors.efficiencies(HARDWARE["h200"]) == MEASURED
    for name in ("h100", "b200", "gb200"):
        others = factors.efficiencies(HARDWARE[name])
        assert (others.memory, others.link) == (0.90, 0.87)  # priors
        assert others.expert_memory == others.attention_compute == 1.0
        assert others.expert_memory_mxfp4 is None  # MXFP4 experts there read at expert_memory
    assert factors.efficiencies(HARDWARE["h100"]).compute == 0.76  # the prior: no long-input H100 rows
    for name in ("b200", "gb200"):  # fitted on Blackwell's 8k-input rows
        assert factors.efficiencies(HARDWARE[name]).compute == factors.compute_efficiency
    assert 0.3 <= factors.compute_efficiency <= 0.95
    assert PRIORS.efficiencies(HARDWARE["h200"]).compute == 0.76
    assert "hopper" not in factors.model_dump()  # kept in hopper_measured.json, not fitted_factors.json


def _terms(gpu: str, factors: Factors, **batch: float) -> dict[str, float]:
    cost = CostModel(GPT_OSS_120B, HARDWARE[gpu], PoolLayout(), Precision(kv_cache="fp8"), factors=factors)
    return {k: float(v) for k, v in cost.step_terms(**batch).items()}


def test_h200_step_terms_scale_by_the_measured_efficiencies():
    full, window = attention_spans(0, 16384, GPT_OSS_120B.sliding_window)
    prefill = {"prefill_tokens": 16384, "prefill_full_span": full, "prefill_window_span": window, "prefill_seqs": 1}
    after, before = _terms("h200", MEASURED_FACTORS, **prefill), _terms("h200", PRIORS, **prefill)
    # A 16k-token chunk is compute-bound in the experts, the attention and the projections.
    assert after["experts"] / before["experts"] == pytest.approx(0.76 / (MEASURED.compute * MEASURED.expert_compute))
    assert after["prefill_attention"] / before["prefill_attention"] == pytest.approx(
        0.76 / (MEASURED.compute * MEASURED.attention_compute)
    )
    assert after["attention_projections"] / before["attention_projections"] == pytest.approx(0.76 / MEASURED.compute)
    # A decode step at batch 64 reads the experts' weights: memory-bound, at the MXFP4 kernels' own share.
    decode = {"decode_seqs": 64, "decode_context": 32768}
    after, before = _terms("h200", MEASURED_FACTORS, **decode), _terms("h200", PRIORS, **decode)
    assert after["experts"] / before["experts"] == pytest.approx(
        0.90 / (MEASURED.memory * MEASURED.expert_memory_mxfp4)
    )
    bf16 = CostModel(GPT_OSS_120B, HARDWARE["h200"], PoolLayout(), Precision(experts="bf16"), factors=MEASURED_FACTORS)
    bf16_before = CostModel(GPT_OSS_120B, HARDWARE["h200"], PoolLayout(), Precision(experts="bf16"), factors=PRIORS)
    ratio = bf16.step_terms(**decode)["experts"] / bf16_before.step_terms(**decode)["experts"]
    assert ratio == pytest.approx(0.90 / (MEASURED.memory * MEASURED.expert_memory))  # BF16 experts: BF16's share
    assert after["layer_overhead"] == before["layer_overhead"]  # overheads are not efficiencies
    # The H200 measurements do not move Blackwell's step times.
    without_hopper = MEASURED_FACTORS.model_copy(update={"hopper": None})
    assert _terms("b200", MEASURED_FACTORS, **prefill) == _terms("b200", without_hopper, **prefill)


def test_h200_kv_handoff_runs_at_nixls_contiguous_rate():
    layout = Layout(
        hardware="h200",
        precision=Precision(kv_cache="fp8"),
        pools={"prefill": PoolLayout(max_num_tokens=16384), "decode": PoolLayout()},
    )
    nbytes = CostModel.for_pool(layout, "prefill").kv_cache.sequence_bytes(32768)
    assert kv_handoff_ms(layout, 32768, MEASURED_FACTORS) == pytest.approx(1e3 * nbytes / (450e9 * MEASURED.kv_handoff))
    assert kv_transfer_bandwidth_gbps(layout, MEASURED_FACTORS) == pytest.approx(450 * MEASURED.kv_handoff)
    assert kv_handoff_ms(layout, 32768, MEASURED_FACTORS) > kv_handoff_ms(layout, 32768, PRIORS)
    b200 = layout.model_copy(update={"hardware": "b200"})
    assert kv_handoff_ms(b200, 32768, MEASURED_FACTORS) == kv_handoff_ms(b200, 32768, PRIORS)
