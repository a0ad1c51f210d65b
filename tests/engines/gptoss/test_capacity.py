"""The gptoss engine's KV pools sized from what the GPU has free: the window pool for a full batch and one
step's chunks, the rest to the full-attention pool; more than the GPU holds refused with the numbers."""

from __future__ import annotations

import pytest

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.capacity import GIB, KvCapacityError, plan_kv_blocks, tokens_held
from dynamo_oss.engines.gptoss.config import GptOssArgs, KvCacheConfig, read_engine_args
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from tests.support.commands import REPO

AGG = read_engine_args(REPO / "graphs" / "gptoss" / "engines" / "gpt-oss-120b-h200-agg.yaml")
POOLS = kv_pools(GPT_OSS_120B, 32)
FREE = 70 * GIB  # an H200's 139 GiB less gpt-oss-120b's 61 GiB of weights and a step's activations


def test_the_pools_take_the_file_s_share_of_what_is_free_the_window_pool_sized_for_a_full_batch() -> None:
    blocks = plan_kv_blocks(GPT_OSS_120B, POOLS, AGG, FREE, max_seq_len=131_072)
    block = POOLS["full"].block_bytes(GPT_OSS_120B)
    assert blocks["window"] == 256 * 5 + 8192 // 32 + 256  # five blocks a decode, one step's chunks
    used = (blocks["full"] + blocks["window"]) * block
    assert 0.9 * FREE - block < used <= 0.9 * FREE
    assert tokens_held(POOLS, blocks) == blocks["full"] * 32 > 1_700_000  # 36 KiB a token: 1.7M tokens in 61 GiB


def test_max_tokens_caps_the_full_attention_pool_and_more_than_the_gpu_holds_is_refused_with_the_numbers() -> None:
    capped = AGG.model_copy(update={"kv_cache_config": KvCacheConfig(max_tokens=100_000)})
    assert plan_kv_blocks(GPT_OSS_120B, POOLS, capped, FREE, max_seq_len=65_536)["full"] == 3125
    greedy = AGG.model_copy(update={"kv_cache_config": KvCacheConfig(max_tokens=4_000_000)})
    with pytest.raises(KvCapacityError) as refused:
        plan_kv_blocks(GPT_OSS_120B, POOLS, greedy, FREE, max_seq_len=131_072)
    assert str(refused.value).startswith(
        "kv_cache_config.max_tokens: 4,000,000 tokens need 137.3 GiB of KV (36 KiB a token in 18 full-attention "
        "layers) and the window layers 2.0 GiB, but this GPU has 70.0 GiB free after weights and activations, "
        "63.0 GiB at free_gpu_memory_fraction 0.9: at most "
    )


def test_a_cache_too_small_for_one_longest_sequence_is_refused_at_start() -> None:
    with pytest.raises(KvCapacityError, match="fewer than one 131,072-token sequence needs"):
        plan_kv_blocks(GPT_OSS_120B, POOLS, GptOssArgs(), 4 * GIB, max_seq_len=131_072)
