"""gpt-oss's KV cache as TensorRT-LLM holds and hands it over, against TensorRT-LLM's own arithmetic.

The expected figures are worked out here from TensorRT-LLM's rules (dynamo_oss/perf/kv_cache.py names
the sources): 32-token blocks; a block of a pool holds its tokens in every layer of the pool, 1 KiB a
layer and token in FP8 (2 x 8 KV heads x 64 x 1 byte); a sequence holds ceil(L / 32) blocks of the
full-attention pool and at most 128 / 32 + 1 = 5 of the window pool, and a handoff sends those.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.perf.costs import CostModel, kv_handoff_ms, kv_handoff_bandwidth
from dynamo_oss.perf.graphs import graph_files, layout_from_file
from dynamo_oss.perf.kv_cache import KvCache, window_problem
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision
from dynamo_oss.perf.profiles import kv_transfer_bytes_per_token, simulated_timing
from tests.support.commands import REPO

GIB = 2**30
LAYER_TOKEN_FP8 = 2 * 8 * 64  # bytes of one token in one layer
BLOCK_18_LAYERS = 32 * 18 * LAYER_TOKEN_FP8  # a block of either pool when the window layers have their own
BLOCK_36_LAYERS = 32 * 36 * LAYER_TOKEN_FP8  # a block of the one pool otherwise

# Context length: (blocks of the full pool, of the window pool), as TensorRT-LLM allocates and sends them.
TRTLLM_BLOCKS = {8192: (256, 5), 65536: (2048, 5), 131072: (4096, 5)}


def fp8_cache(windowed: bool) -> KvCache:
    return KvCache(shape=GPT_OSS_120B, element_bytes=1.0, windowed=windowed)


@pytest.mark.parametrize("context", sorted(TRTLLM_BLOCKS))
def test_a_sequence_holds_what_tensorrt_llm_allocates_and_sends(context: int) -> None:
    full, window = TRTLLM_BLOCKS[context]
    assert fp8_cache(windowed=True).sequence_bytes(context) == (full + window) * BLOCK_18_LAYERS
    assert fp8_cache(windowed=False).sequence_bytes(context) == full * BLOCK_36_LAYERS


def test_the_64k_sequence_is_the_1_13_gib_tensorrt_llm_holds_not_2_26() -> None:
    """The figure AIConfigurator got wrong (issue 42): 2.26 GiB modelled, 1.13 GiB held with the window."""
    assert fp8_cache(windowed=True).sequence_bytes(65536) / GIB == pytest.approx(1.128, abs=0.001)
    assert fp8_cache(windowed=False).sequence_bytes(65536) / GIB == pytest.approx(2.25, abs=0.001)


def test_short_sequences_hold_only_their_own_blocks_in_the_window_pool() -> None:
    cache = fp8_cache(windowed=True)
    assert cache.sequence_bytes(100) == (4 + 4) * BLOCK_18_LAYERS  # 100 tokens: 4 blocks in each pool
    assert cache.sequence_bytes(160) == (5 + 5) * BLOCK_18_LAYERS


def test_equal_shares_keep_the_capacity_one_pool_had() -> None:
    """TensorRT-LLM gives each window's pool an equal share of the KV memory by default, so the full
    layers' pool gets half of it: as many context tokens as one pool of all 36 layers held."""
    budget = 100 * GIB
    windowed, single = fp8_cache(windowed=True), fp8_cache(windowed=False)
    assert windowed.pool_blocks(budget) == {128: budget // 2 // BLOCK_18_LAYERS, 131072: budget // 2 // BLOCK_18_LAYERS}
    assert single.pool_blocks(budget) == {131072: budget // BLOCK_36_LAYERS}
    assert windowed.context_tokens(budget) == single.context_tokens(budget) == 32 * (budget // BLOCK_36_LAYERS)
    blocks = budget // BLOCK_36_LAYERS
    for context, (full, _) in TRTLLM_BLOCKS.items():
        assert windowed.sequences(budget, context) == single.sequences(budget, context) == blocks // full


def test_tensor_parallel_ranks_split_the_kv_heads_and_replicate_them_past_eight() -> None:
    one, four, sixteen = (KvCache(shape=GPT_OSS_120B, element_bytes=1.0, windowed=True, kv_shards=n) for n in (1, 4, 8))
    assert four.full_pool.block_bytes == one.full_pool.block_bytes / 4
    assert four.sequence_bytes(65536) == one.sequence_bytes(65536) == sixteen.sequence_bytes(65536)
    budget = 20 * GIB
    assert four.context_tokens(budget) == pytest.approx(4 * one.context_tokens(budget), rel=1e-4)


def test_the_cost_model_and_the_mocker_profile_charge_the_same_kv(tmp_path: Path) -> None:
    layout = Layout(
        hardware="b200",
        precision=Precision(kv_cache="fp8"),
        pools={"prefill": PoolLayout(max_num_tokens=16384), "decode": PoolLayout(max_batch=256)},
    )
    decode = CostModel.for_pool(layout, "decode")
    full_blocks = decode.kv_cache.pool_blocks(decode.kv_budget_bytes())[131072]
    timing = simulated_timing(layout, "decode", tmp_path / "d.npz")
    assert timing.num_gpu_blocks == full_blocks  # a mocker block stands for a full-pool block
    assert decode.largest_batch(65536 + 1024) == min(256, full_blocks // 2080)
    for context in TRTLLM_BLOCKS:
        sent = sum(TRTLLM_BLOCKS[context]) * BLOCK_18_LAYERS
        assert kv_transfer_bytes_per_token(layout, context) * context == pytest.approx(sent, rel=1e-4)
        assert kv_handoff_ms(layout, context) == pytest.approx(1e3 * sent / kv_handoff_bandwidth(layout))


def test_a_window_that_would_change_the_answers_is_refused() -> None:
    assert window_problem(GPT_OSS_120B, (128, 131072)) is None
    assert window_problem(GPT_OSS_120B, (131072,)) is None  # everything kept: wasteful, not wrong
    assert "layer 1 (full-attention)" in window_problem(GPT_OSS_120B, (128,))
    assert "layer 0 (window)" in window_problem(GPT_OSS_120B, (64, 131072))
    assert "layer 1" in window_problem(GPT_OSS_120B, (131072, 128))  # the pattern starts with a window layer


def test_the_graphs_engine_files_give_the_window_layers_their_pool_and_plan_writes_it_too() -> None:
    layout = layout_from_file(REPO / "graphs" / "disagg.yaml")
    assert all(pool.windowed_kv for pool in layout.pools.values())
    planned = graph_files(layout, "planned")
    for name, text in planned.items():
        if name.startswith("engines/"):
            assert yaml.safe_load(text)["kv_cache_config"]["max_attention_window"] == [128, 131072]


def test_an_engine_file_without_the_window_charges_every_layer_at_full_context(tmp_path: Path) -> None:
    graph = yaml.safe_load((REPO / "graphs" / "agg.yaml").read_text())
    engine = yaml.safe_load((REPO / "graphs" / graph["pools"]["agg"]["engine_args"]).read_text())
    del engine["kv_cache_config"]["max_attention_window"]
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(engine))
    graph["pools"]["agg"]["engine_args"] = "engine.yaml"
    (tmp_path / "graph.yaml").write_text(yaml.safe_dump(graph))
    layout = layout_from_file(tmp_path / "graph.yaml")
    assert not layout.pools["agg"].windowed_kv
    cost = CostModel.for_pool(layout, "agg")
    assert cost.kv_cache.sequence_bytes(65536) == 2048 * BLOCK_36_LAYERS

    engine["kv_cache_config"]["max_attention_window"] = [131072, 128]
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(engine))
    with pytest.raises(
        GraphError, match=r"pools\.agg\.engine_args: kv_cache_config\.max_attention_window gives layer 1"
    ):
        layout_from_file(tmp_path / "graph.yaml")


def test_a_kv_memory_cap_in_the_engine_file_is_the_budget_where_it_is_the_smaller(tmp_path: Path) -> None:
    """kv_cache_config.max_gpu_total_bytes: TensorRT-LLM allocates the smaller of it and the memory fraction's
    share (KvCacheConfig), and with the window layers' pools splits that budget as it would the fraction's."""
    graph = yaml.safe_load((REPO / "graphs" / "agg.yaml").read_text())
    engine = yaml.safe_load((REPO / "graphs" / graph["pools"]["agg"]["engine_args"]).read_text())
    graph["pools"]["agg"]["engine_args"] = "engine.yaml"
    (tmp_path / "graph.yaml").write_text(yaml.safe_dump(graph))
    uncapped = CostModel.for_pool(layout_from_file(REPO / "graphs" / "agg.yaml"), "agg")

    engine["kv_cache_config"]["max_gpu_total_bytes"] = 10 * GIB
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(engine))
    layout = layout_from_file(tmp_path / "graph.yaml")
    assert layout.pools["agg"].kv_memory_bytes == 10 * GIB
    capped = CostModel.for_pool(layout, "agg")
    assert capped.kv_budget_bytes() == 10 * GIB < uncapped.kv_budget_bytes()
    assert capped.kv_capacity_tokens() == 32 * (10 * GIB // 2 // BLOCK_18_LAYERS)
    assert simulated_timing(layout, "agg", tmp_path / "agg.npz").num_gpu_blocks == 10 * GIB // 2 // BLOCK_18_LAYERS
    planned = yaml.safe_load(graph_files(layout, "planned")["engines/planned-agg.yaml"])
    assert planned["kv_cache_config"]["max_gpu_total_bytes"] == 10 * GIB  # plan writes the cap back

    engine["kv_cache_config"]["max_gpu_total_bytes"] = 10_000 * GIB  # above what the GPU has: no cap
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(engine))
    assert CostModel.for_pool(layout_from_file(tmp_path / "graph.yaml"), "agg").kv_budget_bytes() == (
        uncapped.kv_budget_bytes()
    )
