"""The gptoss engine's paged KV cache: one pool per attention window, whose window pool keeps only the
blocks the next query reads; prefix reuse across both pools, kept apart by cache salt; and the KV events
Dynamo's router is told (the full-attention pool's)."""

from __future__ import annotations

import pytest

from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B
from dynamo_oss.engines.gptoss.block_manager import KvRemoved, KvStored, chain_hash
from dynamo_oss.engines.gptoss.block_pool import BlockPool
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.sequence import Sequence
from tests.support.gptoss import BLOCK, kv_cache, sequence


def run_prompt(kv, seq: Sequence) -> None:  # noqa: ANN001
    """Admit `seq` with what the cache holds and compute the rest of its prompt in one step."""
    hit = kv.prefix_hit(seq)
    assert kv.can_admit(seq, hit, seq.num_tokens)
    kv.admit(seq, hit)
    kv.grow(seq, seq.num_tokens)
    kv.commit(seq, seq.num_tokens)


def decode(kv, seq: Sequence, token: int) -> None:  # noqa: ANN001
    """One decode step of `seq`: its last token computed, `token` sampled."""
    kv.grow(seq, seq.num_tokens)
    kv.commit(seq, seq.num_tokens)
    seq.append(token)


def test_gpt_oss_layers_alternate_window_and_full_attention_from_a_window_layer() -> None:
    pools = kv_pools(GPT_OSS_120B, 32)
    assert pools["window"].layers == tuple(range(0, 36, 2)) and pools["window"].window == 128
    assert pools["full"].layers == tuple(range(1, 36, 2)) and pools["full"].window is None
    # 18 layers x K and V x 32 tokens x 8 heads x 64 x 2 bytes: TensorRT-LLM's 1.125 MiB block.
    assert pools["full"].block_bytes(GPT_OSS_120B) == pools["window"].block_bytes(GPT_OSS_120B) == 1_179_648
    assert pools["window"].most_blocks_a_decode_reads == 5  # 128 keys straddle five 32-token blocks
    assert pools["window"].first_block_read(127) == 0 and pools["window"].first_block_read(128) == 0
    assert pools["window"].first_block_read(159) == 1  # keys 32..159


@pytest.mark.parametrize("shape", [GPT_OSS_20B, GPT_OSS_120B], ids=lambda shape: shape.name)
@pytest.mark.parametrize("context", [1, 31, 32, 100, 128, 129, 160, 4096, 32768, 131072])
def test_a_sequence_holds_what_the_performance_model_counts_within_a_block_a_pool(shape, context: int) -> None:  # noqa: ANN001
    """The perf model's KV of a sequence (ModelShape.kv_bytes: every token in full layers, the last 128 in
    window layers) against the blocks the step computing its last token reads."""
    pools = kv_pools(shape, 32)
    held = sum(len(pool.blocks_read(context - 1, context)) * pool.block_bytes(shape) for pool in pools.values())
    modelled = shape.kv_bytes(context)
    assert modelled <= held < modelled + sum(pool.block_bytes(shape) for pool in pools.values())


def test_new_blocks_come_from_plain_ones_first_then_the_oldest_cached() -> None:
    pool = BlockPool(3)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    assert pool.num_free == 0
    pool.register(a, 11)
    pool.register(b, 22)
    for block in (b, a, c):  # b freed first: the oldest cached
        pool.release(block)
    assert pool.allocate() == c  # the plain block before any cached one
    assert pool.allocate() == b and pool.take_evicted() == [22] and pool.find(22) is None
    assert pool.find(11) == a
    pool.hold(a)  # a cache hit takes it off the free list
    assert pool.num_free == 0
    with pytest.raises(ValueError, match="released more often than held"):
        pool.release(c)
        pool.release(c)


def test_a_prompt_reuses_the_blocks_of_an_earlier_one_in_both_pools() -> None:
    kv = kv_cache(full=32, window=32)
    first = sequence("a", list(range(1, 21)))  # 20 tokens: five full 4-token blocks
    run_prompt(kv, first)
    assert kv.take_events() == [
        KvStored(first.block_hashes[:5], None, list(range(1, 21)), BLOCK, None),
    ]
    # The next query (position 20) reads keys 13..20: window blocks 3 and 4; blocks 0..2 went back.
    assert (first.tables["window"].first, len(first.tables["window"].blocks)) == (3, 2)
    assert len(first.tables["full"].blocks) == 5
    kv.free(first)
    second = sequence("b", [*range(1, 21), 7, 7, 7, 7, 7])
    hit = kv.prefix_hit(second)
    assert hit.tokens == 20
    run_prompt(kv, second)
    assert second.num_cached == 20
    (stored,) = kv.take_events()  # only the block the second prompt added
    assert stored.parent_hash == first.block_hashes[4] and stored.token_ids == [7, 7, 7, 7]


def test_the_prompt_s_last_token_is_always_computed_again() -> None:
    kv = kv_cache(full=32, window=32)
    run_prompt(kv, sequence("a", list(range(1, 9))))  # two full blocks
    again = sequence("b", list(range(1, 9)))
    assert kv.prefix_hit(again).tokens == 4  # block 1 holds the last token: its logits give the first output


def test_a_prefix_is_reused_only_as_far_as_the_window_pool_still_holds_its_last_window() -> None:
    kv = kv_cache(full=64, window=12)
    first = sequence("a", list(range(1, 41)))  # ten blocks
    run_prompt(kv, first)
    kv.free(first)
    # Fill the window pool: blocks 0..9 of the first prompt are evicted there, not in the full pool.
    filler = sequence("f", list(range(500, 548)))
    run_prompt(kv, filler)
    assert kv.prefix_hit(sequence("b", list(range(1, 41)) + [9])).tokens == 0
    kv.free(filler)
    survivor = sequence("c", list(range(1, 25)))  # six blocks; its window blocks 3..5 are the newest freed
    run_prompt(kv, survivor)
    kv.free(survivor)
    assert kv.prefix_hit(sequence("d", list(range(1, 41)) + [9])).tokens == 24


def test_tenants_never_share_blocks() -> None:
    kv = kv_cache(full=32, window=32)
    run_prompt(kv, sequence("a", list(range(1, 21)), salt="alice"))
    assert kv.prefix_hit(sequence("b", list(range(1, 21)), salt="bob")).tokens == 0
    assert kv.prefix_hit(sequence("c", list(range(1, 21)))).tokens == 0
    assert kv.prefix_hit(sequence("d", list(range(1, 21)), salt="alice")).tokens == 16
    assert chain_hash(None, [1, 2], "alice") != chain_hash(None, [1, 2], "bob")


def test_a_decoding_sequence_holds_at_most_its_window_s_blocks_in_the_window_pool() -> None:
    kv = kv_cache(full=64, window=8)
    seq = sequence("a", list(range(1, 11)), max_tokens=100)
    run_prompt(kv, seq)
    seq.append(5)
    most = kv.pools["window"].most_blocks_a_decode_reads
    for token in range(60):
        decode(kv, seq, token)
        assert kv.held_blocks("window") <= most
        assert len(seq.tables["full"].blocks) == kv.pools["full"].blocks_for(seq.num_computed)
    assert most == 3  # an 8-token window over 4-token blocks


def test_evicted_blocks_are_removed_events_and_nothing_is_told_without_reuse() -> None:
    kv = kv_cache(full=4, window=16)
    first = sequence("a", list(range(1, 13)))  # three blocks
    run_prompt(kv, first)
    kv.free(first)
    kv.take_events()
    run_prompt(kv, sequence("b", list(range(100, 112))))  # evicts two of them (one plain block was free)
    events = kv.take_events()
    assert events[0] == KvRemoved(first.block_hashes[2:3] + first.block_hashes[1:2])  # the last ones first
    assert isinstance(events[1], KvStored)
    quiet = kv_cache(full=8, window=8, reuse=False)
    run_prompt(quiet, sequence("c", list(range(1, 13))))
    assert quiet.take_events() == [] and quiet.prefix_hit(sequence("d", list(range(1, 13)))).tokens == 0
