"""The static inputs of the decode steps the GPU model runner replays as CUDA graphs: which captured size a
batch pads to, the scratch block padding rows write to, and the padded arrays, for steps the real scheduler
makes (checked against kv_index's slots, the eager path's)."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.block_manager import KvCacheManager
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.graph_inputs import (
    captured_sizes,
    decode_inputs,
    graph_layout,
    pool_blocks,
)
from dynamo_oss.engines.gptoss.kv_index import TableError, step_index
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import BatchRow, step_batch
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from tests.support.gptoss import BLOCK, SMALL, kv_cache, sequence

FULL, WINDOW = 64, 64  # the block manager's blocks in each pool
POOLS = kv_cache(FULL, WINDOW).pools
ARGS = GptOssArgs.model_validate({"max_batch_size": 8, "cuda_graph_config": {"batch_sizes": [1, 2, 4, 8]}})
LAYOUT = graph_layout(ARGS, POOLS, {"full": FULL, "window": WINDOW}, 64, SMALL.num_key_value_heads)


def decode_step(prompts: dict[str, int]) -> list[BatchRow]:
    """A decode-only step of the real scheduler: each prompt computed, then its first token decoding."""
    sched = Scheduler(Limits(max_batch_size=8, max_num_tokens=256), kv_cache(FULL, WINDOW))
    for name, length in prompts.items():
        sched.add(sequence(name, list(range(100, 100 + length)), max_tokens=8))
    step = sched.schedule()
    sched.postprocess(step, [7] * len(step.scheduled))
    batch = step_batch(sched.schedule())
    assert batch.decode_only
    return batch.rows


def test_a_batch_pads_to_the_smallest_captured_size_that_holds_it_and_none_past_the_largest() -> None:
    assert [LAYOUT.size_for(n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert LAYOUT.size_for(9) is None
    assert captured_sizes([1, 8, 64, 256], 64) == (1, 8, 64)  # clipped to max_batch_size


def test_padding_rows_write_to_a_scratch_block_no_table_can_hold() -> None:
    assert pool_blocks({"full": FULL, "window": WINDOW}) == {"full": FULL + 1, "window": WINDOW + 1}
    assert LAYOUT.scratch == {"full": FULL, "window": WINDOW}  # the block past the block manager's
    kv = KvCacheManager(POOLS, {"full": FULL, "window": WINDOW}, reuse=False)
    for name, scratch in LAYOUT.scratch.items():
        handed_out = {kv.blocks[name].allocate() for _ in range(kv.blocks[name].num_free)}
        assert len(handed_out) == FULL and scratch not in handed_out


def test_live_rows_write_and_read_where_the_eager_index_says_and_padding_rows_read_nothing() -> None:
    rows = decode_step({"a": 5, "b": 22, "c": 13})  # b past the 8-token window
    inputs = decode_inputs(rows, LAYOUT)
    assert inputs is not None and inputs.size == 4
    eager = step_index(rows, POOLS)
    assert inputs.tokens.tolist() == [*eager.tokens.tolist(), 0]
    assert inputs.positions.tolist() == [*eager.positions.tolist(), 0]
    assert inputs.context_lens.tolist() == [5 + 1, 22 + 1, 13 + 1, 0]
    for name, pool in inputs.pools.items():
        index = eager.pools[name]
        assert pool.write_blocks.tolist() == [*index.write_blocks.tolist(), LAYOUT.scratch[name]]
        assert pool.write_offsets.tolist() == [*index.write_offsets.tolist(), 0]
        # The kernel reads positions first * block .. len - 1: the keys the eager path gathers.
        keys = inputs.context_lens[:3] - pool.first_blocks[:3] * BLOCK
        assert keys.tolist() == np.diff(index.cu_keys).tolist()
        for i, row in enumerate(rows):
            first, blocks = row.tables[name]
            assert pool.first_blocks[i] == first
            assert pool.tables[i, : len(blocks)].tolist() == blocks
            assert set(pool.tables[i, len(blocks) :].tolist()) <= {LAYOUT.scratch[name]}
        assert set(pool.tables[3].tolist()) == {LAYOUT.scratch[name]} and pool.first_blocks[3] == 0
    assert inputs.pools["window"].first_blocks[1] == (22 - SMALL.sliding_window + 1) // BLOCK > 0


def test_the_arrays_have_the_dtypes_the_graph_s_buffers_take() -> None:
    inputs = decode_inputs(decode_step({"a": 3}), LAYOUT)
    assert inputs is not None
    assert inputs.tokens.dtype == inputs.positions.dtype == np.int64
    assert inputs.context_lens.dtype == np.int32
    pool = inputs.pools["full"]
    assert pool.write_blocks.dtype == pool.write_offsets.dtype == np.int64
    assert pool.first_blocks.dtype == pool.tables.dtype == np.int32  # the kernel's


def test_a_step_that_cannot_be_replayed_is_left_to_the_eager_path() -> None:
    tables = {"full": (0, [1]), "window": (0, [2])}
    decode = BatchRow("d", [5], 2, tables, None)
    assert decode_inputs([decode] * 9, LAYOUT) is None  # more rows than the largest graph
    assert decode_inputs([decode, BatchRow("p", [5, 6], 0, tables, None)], LAYOUT) is None  # a prompt chunk
    wide = LAYOUT.widths["full"] + 1
    long = BatchRow("l", [5], wide * BLOCK - 1, {"full": (0, list(range(wide))), "window": (wide - 2, [1, 2])}, None)
    assert decode_inputs([long], LAYOUT) is None  # a table past max_seq_len's blocks


def test_a_table_that_does_not_cover_the_row_s_position_is_refused_naming_the_request() -> None:
    row = BatchRow("r", [5], 4, {"full": (0, [3]), "window": (0, [4, 5])}, None)
    with pytest.raises(TableError, match=r"request r: its full table holds positions 0\.\.3"):
        decode_inputs([row], LAYOUT)


def test_tables_are_as_wide_as_max_seq_len_in_the_full_pool_and_the_window_in_the_other() -> None:
    assert LAYOUT.widths == {"full": 64 // BLOCK, "window": POOLS["window"].most_blocks_a_decode_reads}
    pools = kv_pools(GPT_OSS_120B, 32)
    layout = graph_layout(GptOssArgs(), pools, {"full": 1000, "window": 100}, 131072, 8)
    assert layout.widths == {"full": 4096, "window": 5}
    assert layout.sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256)


def test_splits_fill_the_gpu_for_small_batches_and_never_outnumber_a_table_s_blocks() -> None:
    layout = graph_layout(GptOssArgs(), kv_pools(GPT_OSS_120B, 32), {"full": 1000, "window": 100}, 131072, 8)
    assert [layout.splits("full", size) for size in (1, 8, 64, 128, 256)] == [128, 16, 2, 1, 1]
    assert layout.splits("window", 1) == 5  # one a block of its five
    assert layout.splits("full", 1) * 8 >= 1024  # batch 1 at 32k: 1024 programs, not 8
