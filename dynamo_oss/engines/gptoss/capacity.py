"""How many blocks each KV pool gets, from the memory the GPU has left once the weights are loaded and the
largest step has run once (the model runner measures it): the window pool what a full batch reads plus the prompt chunks of one
step, the full-attention pool the rest of the engine file's share (or its max_tokens). A file asking more
than the GPU holds, or a cache too small for one longest sequence, is refused at start with the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName

GIB = 2**30


class KvCapacityError(ValueError):
    """KV cache settings this GPU cannot hold; the message gives the numbers."""


def window_blocks(pool: KvPool, args: GptOssArgs) -> int:
    """A full batch of decodes, each reading its window, and one step's prompt chunks, whose window blocks
    are held until the step is over (with one block more for each chunk's unaligned start)."""
    assert pool.most_blocks_a_decode_reads is not None
    decodes = args.max_batch_size * pool.most_blocks_a_decode_reads
    return decodes + pool.blocks_for(args.max_num_tokens) + args.max_batch_size


def plan_kv_blocks(
    shape: ModelShape, pools: Mapping[PoolName, KvPool], args: GptOssArgs, free_bytes: int, max_seq_len: int
) -> dict[PoolName, int]:
    """Blocks for each pool within `free_bytes` (what the GPU has after weights and activations)."""
    kv = args.kv_cache_config
    budget = kv.free_gpu_memory_fraction * free_bytes
    full, window = pools["full"], pools["window"]
    window_count = window_blocks(window, args)
    window_bytes = window_count * window.block_bytes(shape)
    full_block = full.block_bytes(shape)
    fits = max(0, int((budget - window_bytes) // full_block))
    if kv.max_tokens is not None:
        wanted = full.blocks_for(kv.max_tokens)
        if wanted > fits:
            raise KvCapacityError(
                f"kv_cache_config.max_tokens: {kv.max_tokens:,} tokens need {wanted * full_block / GIB:.1f} GiB of KV "
                f"({full_block // full.block_tokens // 1024} KiB a token in {len(full.layers)} full-attention layers) "
                f"and the window layers {window_bytes / GIB:.1f} GiB, but this GPU has {free_bytes / GIB:.1f} GiB "
                f"free after weights and activations, {budget / GIB:.1f} GiB at free_gpu_memory_fraction "
                f"{kv.free_gpu_memory_fraction:g}: at most {fits * full.block_tokens:,} tokens"
            )
        fits = wanted
    longest = full.blocks_for(max_seq_len)
    if fits < longest:
        raise KvCapacityError(
            f"the KV cache holds {fits * full.block_tokens:,} tokens ({budget / GIB:.1f} GiB of the "
            f"{free_bytes / GIB:.1f} GiB free after weights and activations, the window layers' "
            f"{window_bytes / GIB:.1f} GiB for {args.max_batch_size} sequences included), fewer than one "
            f"{max_seq_len:,}-token sequence needs: lower max_seq_len or max_batch_size"
        )
    return {"full": fits, "window": window_count}


def tokens_held(pools: Mapping[PoolName, KvPool], blocks: Mapping[PoolName, int]) -> int:
    """Context tokens the full-attention pool holds: what the worker registers as its capacity."""
    return blocks["full"] * pools["full"].block_tokens
