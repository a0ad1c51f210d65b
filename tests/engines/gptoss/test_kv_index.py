"""The table arithmetic the GPU model runner indexes its KV pools with: where each computed token's K/V
is written and which keys each row reads, in each pool, for steps the real scheduler makes."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.engines.gptoss.kv_index import TableError, step_index
from dynamo_oss.engines.gptoss.model_runner import BatchRow, step_batch
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from tests.support.gptoss import BLOCK, SMALL, kv_cache, sequence

POOLS = kv_cache(64, 64).pools  # SMALL's layout: 4-token blocks, an 8-token window


def slots(blocks: list[int], positions: range) -> list[tuple[int, int]]:
    """What a table's blocks give for positions of a table starting at logical block 0."""
    return [(blocks[p // BLOCK], p % BLOCK) for p in positions]


def test_a_mixed_step_writes_each_token_to_its_block_and_reads_each_row_s_context() -> None:
    sched = Scheduler(Limits(max_batch_size=4, max_num_tokens=12), kv_cache(64, 64))
    sched.add(sequence("decoding", [1, 2, 3, 4, 5], max_tokens=8))
    sched.postprocess(sched.schedule(), [50])  # its prompt, then one decode token at position 5
    sched.add(sequence("chunked", list(range(100, 130))))
    batch = step_batch(sched.schedule())
    decoding, chunked = batch.rows
    index = step_index(batch.rows, POOLS)
    assert index.tokens.tolist() == [50, *range(100, 111)]
    assert index.positions.tolist() == [5, *range(11)]
    assert index.cu_queries.tolist() == [0, 1, 12] and index.max_queries == 11
    full = index.pools["full"]
    blocks_d, blocks_c = decoding.tables["full"][1], chunked.tables["full"][1]
    written = list(zip(full.write_blocks.tolist(), full.write_offsets.tolist()))
    assert written == slots(blocks_d, range(5, 6)) + slots(blocks_c, range(11))
    read = list(zip(full.read_blocks.tolist(), full.read_offsets.tolist()))
    assert read == slots(blocks_d, range(6)) + slots(blocks_c, range(11))  # every key up to the row's last
    assert full.cu_keys.tolist() == [0, 6, 17] and full.max_keys == 11
    assert index.last_tokens([0, 1]).tolist() == [0, 11]


def test_a_window_row_reads_from_the_first_block_its_table_still_holds() -> None:
    sched = Scheduler(Limits(max_batch_size=2, max_num_tokens=32), kv_cache(64, 64))
    sched.add(sequence("long", list(range(200, 222)), max_tokens=8))  # 22 tokens: past the 8-token window
    sched.postprocess(sched.schedule(), [7])
    (row,) = step_batch(sched.schedule()).rows
    first, blocks = row.tables["window"]
    assert row.start == 22 and first == (22 - SMALL.sliding_window + 1) // BLOCK == 3
    window = step_index([row], POOLS).pools["window"]
    positions = range(first * BLOCK, 23)  # its table's first position up to the decoded token's
    expected = [(blocks[p // BLOCK - first], p % BLOCK) for p in positions]
    assert list(zip(window.read_blocks.tolist(), window.read_offsets.tolist())) == expected
    assert (window.write_blocks.tolist(), window.write_offsets.tolist()) == ([blocks[22 // BLOCK - first]], [2])
    assert window.cu_keys.tolist() == [0, len(positions)]


@pytest.mark.parametrize(
    ("tables", "names"),
    [
        (
            {"full": (0, [3]), "window": (0, [4, 5])},
            "its full table holds positions 0..3, but the step computes positions 4..5",
        ),
        ({"full": (0, [3, 4]), "window": (2, [5])}, "its window table holds positions 8..11"),
        ({"full": (0, [3, 4])}, "request r: no block table for the window pool"),
    ],
)
def test_a_table_that_does_not_cover_the_step_is_refused_naming_the_request(tables: dict, names: str) -> None:
    row = BatchRow("r", [1, 2], 4, tables, None)
    with pytest.raises(TableError, match=names.replace("..", r"\.\.")):
        step_index([row], POOLS)


def test_the_index_arrays_have_the_dtypes_the_kernels_take() -> None:
    row = BatchRow("r", [1, 2, 3], 0, {"full": (0, [9]), "window": (0, [8])}, None)
    index = step_index([row], POOLS)
    assert index.tokens.dtype == index.positions.dtype == np.int64
    assert index.cu_queries.dtype == index.pools["full"].cu_keys.dtype == np.int32  # flash's cumulative lengths
    assert index.pools["window"].write_blocks.dtype == np.int64
