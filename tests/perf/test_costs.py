"""The cost model: shapes, step costs and KV handoff behave as the physics says."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B
from dynamo_oss.perf.costs import CostModel, Factors, attention_spans, kv_handoff_ms
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision

B200, H200 = HARDWARE["b200"], HARDWARE["h200"]


def cost(gpu=B200, shape=GPT_OSS_120B, kv="bf16", **pool) -> CostModel:
    return CostModel(shape, gpu, PoolLayout(**pool), Precision(kv_cache=kv))


def test_kv_bytes_honour_the_sliding_window():
    c = cost()
    naive = 32768 * GPT_OSS_120B.num_layers * GPT_OSS_120B.kv_bytes_per_layer_token()
    assert c.kv_cache.sequence_bytes(32768) == pytest.approx(naive / 2, rel=0.01)  # half the layers keep 128 tokens
    assert cost(kv="fp8").kv_cache.sequence_bytes(32768) == pytest.approx(c.kv_cache.sequence_bytes(32768) / 2)
    assert c.kv_cache.sequence_bytes(32768) == pytest.approx(
        1.2e9, rel=0.05
    )  # facts: about 1.2 GB for one 32k sequence
    whole = PoolLayout(windowed_kv=False)
    assert CostModel(GPT_OSS_120B, B200, whole).kv_cache.sequence_bytes(32768) == pytest.approx(naive)


def test_weights_match_the_checkpoint_and_split_over_gpus():
    for shape in (GPT_OSS_20B, GPT_OSS_120B):
        assert cost(shape=shape).weight_bytes_per_gpu() == pytest.approx(shape.checkpoint_bytes, rel=0.1)
    one, four, four_dp = cost(), cost(tp=4), cost(tp=4, attention_dp=True)
    assert four.weight_bytes_per_gpu() == pytest.approx(one.weight_bytes_per_gpu() / 4, rel=0.01)
    assert four_dp.weight_bytes_per_gpu() > four.weight_bytes_per_gpu()  # attention and head replicated
    assert four.kv_capacity_tokens() > 4 * one.kv_capacity_tokens()  # more room once weights are split


def test_decode_step_grows_with_batch_and_context():
    c = cost(tp=4)
    by_batch = c.decode_ms(np.array([1, 8, 64, 256]), 8192)
    by_context = c.decode_ms(64, np.array([1024, 8192, 32768, 131072]))
    assert np.all(np.diff(by_batch) > 0) and np.all(np.diff(by_context) > 0)
    # Beyond the window, context adds KV reads of the full-attention layers only.
    assert c.decode_ms(64, 100) == pytest.approx(c.decode_ms(64, 120), rel=0.01)


def test_prefill_pays_attention_over_the_cached_context():
    c = cost()
    assert c.prefill_ms(8192, cached_tokens=24576) > 1.2 * c.prefill_ms(8192)
    assert c.prompt_ms(32768) == pytest.approx(sum(c.prefill_ms(8192, k * 8192) for k in range(4)), rel=0.05)
    # One 32k prompt is about 0.5 PFLOP: at least 110 ms at FP8 peak on a B200 (facts/performance.md).
    assert 110 < c.prompt_ms(32768) < 400


def test_mixed_step_shares_the_weights_and_overheads():
    c = cost(tp=2)
    alone = c.prefill_ms(8192, 8192) + c.decode_ms(32, 16384)
    mixed = c.mixed_ms(8192, 8192, 32, 16384)
    assert max(c.prefill_ms(8192, 8192), c.decode_ms(32, 16384)) < mixed < alone


def test_hopper_runs_mxfp4_experts_at_the_bf16_rate():
    assert cost(H200).prompt_ms(32768) > 2 * cost(B200).prompt_ms(32768)
    fp8_experts = CostModel(GPT_OSS_120B, H200, PoolLayout(), Precision(experts="fp8"))
    assert fp8_experts.prompt_ms(32768) < cost(H200).prompt_ms(32768)  # Hopper has FP8 tensor cores


def test_attention_spans():
    full, window = attention_spans(1000, 24, 128)
    assert full == pytest.approx(1012.5) and window == pytest.approx(128)
    full, window = attention_spans(0, 256, 128)
    assert full == pytest.approx(128.5) and window == pytest.approx((128 * 129 / 2 + 128 * 128) / 256)


def test_engine_factor_scales_overheads_only():
    base = Factors()
    vllm = CostModel(GPT_OSS_120B, H200, PoolLayout(tp=8), engine="vllm", factors=base)
    trt = CostModel(GPT_OSS_120B, H200, PoolLayout(tp=8), engine="trtllm", factors=base)
    t_v, t_t = vllm.step_terms(decode_seqs=4, decode_context=1500), trt.step_terms(decode_seqs=4, decode_context=1500)
    assert t_v["experts"] == pytest.approx(t_t["experts"])
    assert t_v["layer_overhead"] == pytest.approx(base.engine_overhead_factor["vllm"] * t_t["layer_overhead"])


def test_kv_handoff_over_nvlink_and_nic_matches_the_facts():
    ideal = Factors(link_efficiency=1.0)
    pools = {"prefill": PoolLayout(), "decode": PoolLayout()}
    node = Layout(hardware="b200", pools=pools)
    assert kv_handoff_ms(node, 32768, ideal) == pytest.approx(1.3, rel=0.1)  # facts: about 1.3 ms over NVLink 5
    far = node.model_copy(update={"pools": {"prefill": PoolLayout(workers=8), "decode": PoolLayout(workers=8)}})
    assert kv_handoff_ms(far, 32768, ideal) == pytest.approx(24, rel=0.1)  # facts: about 24 ms over 400 Gb/s
    wide = Layout(hardware="b200", pools={"prefill": PoolLayout(tp=4), "decode": PoolLayout(tp=4)})
    assert kv_handoff_ms(wide, 32768, ideal) == pytest.approx(kv_handoff_ms(node, 32768, ideal) / 4)


def _prefill_attention_ms(hardware: str, kv_cache: str, prompt: int) -> float:
    cost = CostModel.for_pool(
        Layout(hardware=hardware, precision=Precision(kv_cache=kv_cache), pools={"agg": PoolLayout()}), "agg"
    )
    full, window = attention_spans(0.0, float(prompt), GPT_OSS_120B.sliding_window)
    terms = cost.step_terms(prefill_tokens=prompt, prefill_full_span=full, prefill_window_span=window)
    return 1e3 * float(terms["prefill_attention"])


def test_an_fp8_kv_cache_stores_attention_s_keys_but_does_not_compute_them():
    """gpt-oss's attention runs in BF16 (its checkpoint quantizes only the experts): an FP8 cache halves
    the bytes, not the time of a long prompt's attention."""
    for hardware in ("b200", "h200"):
        assert _prefill_attention_ms(hardware, "fp8", 32768) == pytest.approx(
            _prefill_attention_ms(hardware, "bf16", 32768), rel=0.01
        )


def test_a_long_prompt_s_attention_is_no_faster_than_the_exponential_units_take_its_softmax():
    """One exponential per query-key pair and head: a 32k prompt's 18 full layers are 32768 x 16384 x 64
    x 18 of them (plus the window layers' few), at 16 an SM and clock; on a B200 that bound is above the
    tensor cores' time for the products, so it is what the model charges."""
    pairs = 32768 * (18 * attention_spans(0.0, 32768.0, 128)[0] + 18 * attention_spans(0.0, 32768.0, 128)[1]) * 64
    b200 = HARDWARE["b200"]
    assert b200.exp_rate == pytest.approx(2250e12 * 16 / 8192)
    assert _prefill_attention_ms("b200", "fp8", 32768) == pytest.approx(1e3 * pairs / b200.exp_rate, rel=1e-6)
    # On Hopper the tensor cores do half the FLOPs per exponential: their time is the larger there.
    assert _prefill_attention_ms("h200", "fp8", 32768) > 1e3 * pairs / HARDWARE["h200"].exp_rate
