"""Where a step's tokens write their K and V, and which keys each row reads, from the rows' block tables:
the arithmetic the GPU model runner turns into index tensors (numpy here, so it is tested without a GPU).

A row computes positions start..end-1 of one sequence. In each pool, position p lives in the row's
logical block p // block_tokens, which is physical block `blocks[p // block_tokens - first]` of the
row's table, at offset p % block_tokens. The row's queries read, in each pool, the consecutive key
positions first * block_tokens..end-1: every block its table still holds (the window pool's table starts
past the blocks its window has left behind), the tokens this step computes included. Which of those
keys a query may see (causal, the 128-token window) is the attention kernel's mask: the keys end at the
row's last query, so causality aligns each row's last query with its last key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.model_runner import BatchRow


class TableError(ValueError):
    """A row whose block table does not cover the positions it computes or reads: a scheduler bug."""


@dataclass(frozen=True)
class PoolIndex:
    """One pool's slots for one step."""

    write_blocks: np.ndarray  # int64 [tokens]: the physical block each computed token's K/V goes to
    write_offsets: np.ndarray  # int64 [tokens]: its slot in that block
    read_blocks: np.ndarray  # int64 [keys]: every row's key positions, row after row, as blocks ...
    read_offsets: np.ndarray  # ... and slots
    cu_keys: np.ndarray  # int32 [rows + 1]: row r's keys are read_*[cu_keys[r]:cu_keys[r + 1]]
    max_keys: int


@dataclass(frozen=True)
class StepIndex:
    tokens: np.ndarray  # int64 [tokens]: the rows' tokens, row after row
    positions: np.ndarray  # int64 [tokens]
    cu_queries: np.ndarray  # int32 [rows + 1]
    max_queries: int
    pools: dict[PoolName, PoolIndex]

    def last_tokens(self, rows: Sequence[int]) -> np.ndarray:
        """The index of each given row's last token (whose logits give its next token)."""
        return self.cu_queries[1:][list(rows)].astype(np.int64) - 1


def step_index(rows: Sequence[BatchRow], pools: Mapping[PoolName, KvPool]) -> StepIndex:
    """The step's index; TableError names the row whose table does not cover its positions."""
    if not rows or any(not row.token_ids for row in rows):
        raise TableError("a step computes at least one token in every row")
    counts = [len(row.token_ids) for row in rows]
    positions = np.concatenate([np.arange(row.start, row.start + n, dtype=np.int64) for row, n in zip(rows, counts)])
    return StepIndex(
        tokens=np.fromiter((token for row in rows for token in row.token_ids), np.int64, sum(counts)),
        positions=positions,
        cu_queries=_cumulative(counts),
        max_queries=max(counts),
        pools={name: _pool_index(rows, pool) for name, pool in pools.items()},
    )


def _pool_index(rows: Sequence[BatchRow], pool: KvPool) -> PoolIndex:
    size = pool.block_tokens
    write_blocks, write_offsets, read_blocks, read_offsets, key_counts = [], [], [], [], []
    for row in rows:
        first, blocks = row_table(row, pool)
        table = np.asarray(blocks, dtype=np.int64)
        end = row.start + len(row.token_ids)
        written = np.arange(row.start, end, dtype=np.int64)
        write_blocks.append(table[written // size - first])
        write_offsets.append(written % size)
        read = np.arange(first * size, end, dtype=np.int64)
        read_blocks.append(table[read // size - first])
        read_offsets.append(read % size)
        key_counts.append(len(read))
    return PoolIndex(
        write_blocks=np.concatenate(write_blocks),
        write_offsets=np.concatenate(write_offsets),
        read_blocks=np.concatenate(read_blocks),
        read_offsets=np.concatenate(read_offsets),
        cu_keys=_cumulative(key_counts),
        max_keys=max(key_counts),
    )


def row_table(row: BatchRow, pool: KvPool) -> tuple[int, list[int]]:
    """The row's first logical block and its blocks in `pool`; TableError when they do not cover the
    positions the row computes."""
    if pool.name not in row.tables:
        raise TableError(f"request {row.request_id}: no block table for the {pool.name} pool")
    first, blocks = row.tables[pool.name]
    size, end = pool.block_tokens, row.start + len(row.token_ids)
    if first * size > row.start or (first + len(blocks)) * size < end:
        held = f"positions {first * size}..{(first + len(blocks)) * size - 1}"
        raise TableError(
            f"request {row.request_id}: its {pool.name} table holds {held}, but the step computes "
            f"positions {row.start}..{end - 1}"
        )
    return first, blocks


def _cumulative(counts: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
