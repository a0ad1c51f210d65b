"""The static inputs of the decode steps the GPU model runner replays as CUDA graphs (decode_graphs.py): which
captured size a batch pads to, the block padding rows write to, how wide each pool's tables are and in how
many splits the attention kernel reads each row's keys, and the padded arrays copied in before a replay.
numpy only, so it is tested without a GPU, as kv_index.py is.

A graph fixes every shape, so one is captured per size of cuda_graph_config.batch_sizes (those up to
max_batch_size) and a decode step of n rows replays the smallest size >= n. Its rows past n are padding:
token 0 at position 0 with no keys (context length 0: the kernel gives them zeros and reads nothing),
their K/V written to the scratch block, one block past those the block manager hands out in each pool, so
no table holds it. Tables are padded to the widest a decode row holds: max_seq_len's blocks in the
full-attention pool, the window's in the other (KvPool.most_blocks_a_decode_reads). A step with a row of
more than one token, more rows than the largest size or a wider table runs eagerly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.kv_index import row_table
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.model_runner import BatchRow

SCRATCH_BLOCKS = 1  # beyond the block manager's, in each pool: where padding rows write
TARGET_PROGRAMS = 1024  # attention programs (rows x KV heads x splits) that keep an H200's 132 SMs busy


def captured_sizes(batch_sizes: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """The configured sizes no step exceeds: a larger one is never replayed (at least one is kept)."""
    kept = tuple(size for size in batch_sizes if size <= max_batch_size)
    return kept or (max_batch_size,)


def pool_blocks(blocks: Mapping[PoolName, int]) -> dict[PoolName, int]:
    """Blocks each pool tensor holds: the block manager's, then the scratch block."""
    return {name: count + SCRATCH_BLOCKS for name, count in blocks.items()}


@dataclass(frozen=True)
class GraphLayout:
    sizes: tuple[int, ...]  # captured, ascending
    pools: dict[PoolName, KvPool]
    widths: dict[PoolName, int]  # each pool's table columns
    scratch: dict[PoolName, int]  # each pool's scratch block
    kv_heads: int

    def size_for(self, batch: int) -> int | None:
        """The captured size a batch of `batch` rows pads to; None past the largest."""
        return next((size for size in self.sizes if size >= batch), None)

    def splits(self, name: PoolName, size: int) -> int:
        """Flash-decoding splits of each row's keys in the pool's layers for the graph of `size` rows: enough
        programs to fill the GPU, none shorter than a block of the widest table."""
        return max(1, min(self.widths[name], math.ceil(TARGET_PROGRAMS / (size * self.kv_heads))))


def graph_layout(
    args: GptOssArgs, pools: Mapping[PoolName, KvPool], blocks: Mapping[PoolName, int], max_seq_len: int, kv_heads: int
) -> GraphLayout:
    """The graphs' layout over pools of `blocks` blocks (the block manager's count), sequences up to max_seq_len."""
    widths = {}
    for name, pool in pools.items():
        widths[name] = pool.blocks_for(max_seq_len)
        if pool.most_blocks_a_decode_reads is not None:
            widths[name] = min(widths[name], pool.most_blocks_a_decode_reads)
    sizes = captured_sizes(args.cuda_graph_config.batch_sizes, args.max_batch_size)
    return GraphLayout(sizes, dict(pools), widths, {name: blocks[name] for name in pools}, kv_heads)


@dataclass(frozen=True)
class PoolInputs:
    write_blocks: np.ndarray  # int64 [size]: the block each row's new K/V goes to
    write_offsets: np.ndarray  # int64 [size]: its slot in that block
    first_blocks: np.ndarray  # int32 [size]: each table's first logical block
    tables: np.ndarray  # int32 [size, step's widest table]: the columns past it are never read this step


@dataclass(frozen=True)
class DecodeInputs:
    size: int  # the captured size replayed
    tokens: np.ndarray  # int64 [size]
    positions: np.ndarray  # int64 [size]
    context_lens: np.ndarray  # int32 [size]: keys 0..len-1 exist, the query at len-1; 0 for padding rows
    pools: dict[PoolName, PoolInputs]


def decode_inputs(rows: Sequence[BatchRow], layout: GraphLayout) -> DecodeInputs | None:
    """The padded inputs of a decode step; None when it cannot be replayed (then it runs eagerly), TableError
    when a row's table does not cover its position."""
    size = layout.size_for(len(rows))
    if size is None or not rows or any(len(row.token_ids) != 1 for row in rows):
        return None
    live = len(rows)
    positions = np.zeros(size, np.int64)
    positions[:live] = [row.start for row in rows]
    tokens = np.zeros(size, np.int64)
    tokens[:live] = [row.token_ids[0] for row in rows]
    context_lens = np.zeros(size, np.int32)
    context_lens[:live] = positions[:live] + 1
    pools = {}
    for name, pool in layout.pools.items():
        tables = [row_table(row, pool) for row in rows]
        width = max(len(blocks) for _, blocks in tables)
        if width > layout.widths[name]:
            return None
        scratch = layout.scratch[name]
        padded = np.full((size, width), scratch, np.int32)
        first_blocks = np.zeros(size, np.int32)
        write_blocks = np.full(size, scratch, np.int64)
        for i, (first, blocks) in enumerate(tables):
            padded[i, : len(blocks)] = blocks
            first_blocks[i] = first
            write_blocks[i] = blocks[rows[i].start // pool.block_tokens - first]
        write_offsets = np.zeros(size, np.int64)
        write_offsets[:live] = positions[:live] % pool.block_tokens
        pools[name] = PoolInputs(write_blocks, write_offsets, first_blocks, padded)
    return DecodeInputs(size, tokens, positions, context_lens, pools)
