"""A stand-in for the gptoss engine's GPU model runner (which needs a GPU) in the engine core's tests:
the KV pools in host memory, laid out and sized as the GPU's, the handoff through the real KvTransfer
(NIXL over host memory), and, in place of the forward pass, a rule whose token depends on every key a
row attends to. Each computed token's id goes into its K/V slot (the slot's first 8 bytes), and a row
samples from the ids at the positions its attention reads: every earlier position in the full pool, the
window's in the window pool. So a decode worker that got any key wrong, or read a slot never written
(the pools start poisoned), samples other tokens than an aggregated worker, or fails."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.kv_index import step_index
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.kv_transfer import HandsOver, KvTransfer, PoolMemory
from dynamo_oss.engines.gptoss.model_runner import StepBatch

POISON = -1  # every slot before a step or a handoff writes it


class HostRunner(HandsOver):
    def __init__(self, shape: ModelShape, pools: Mapping[PoolName, KvPool], hands_over: bool, timeout_s: float = 10.0):
        self.shape, self.pools, self.hands_over, self.timeout_s = shape, dict(pools), hands_over, timeout_s
        self.kv: dict[PoolName, np.ndarray] = {}
        self.transfer: KvTransfer | None = None

    def free_kv_bytes(self) -> int:
        return 64 * sum(pool.block_bytes(self.shape) for pool in self.pools.values())

    def allocate_kv(self, blocks: Mapping[PoolName, int]) -> None:
        memory = {}
        for name, count in blocks.items():
            pool = self.pools[name]
            array = np.full((count, pool.block_tokens, pool.block_bytes(self.shape) // pool.block_tokens // 8), POISON)
            self.kv[name] = array
            memory[name] = PoolMemory(array.ctypes.data, count, pool.block_bytes(self.shape), 0, "DRAM")
        if self.hands_over:
            self.transfer = KvTransfer(memory, self.timeout_s)

    def execute(self, batch: StepBatch) -> list[int]:
        index = step_index(batch.rows, self.pools)
        for name, pool_index in index.pools.items():
            self.kv[name][pool_index.write_blocks, pool_index.write_offsets, 0] = index.tokens
        sampled = []
        for r, row in enumerate(batch.rows):
            if row.sampling is None:
                continue
            position = row.start + len(row.token_ids) - 1
            mix = position
            for name, pool_index in index.pools.items():
                keys = slice(pool_index.cu_keys[r], pool_index.cu_keys[r + 1])
                ids = self.kv[name][pool_index.read_blocks[keys], pool_index.read_offsets[keys], 0]
                window = self.pools[name].window or position + 1
                seen = ids[-window:]  # the keys end at the row's last position
                assert (seen != POISON).all(), f"request {row.request_id} read a {name} slot nothing wrote"
                mix = (mix * 31 + int((seen * np.arange(1, len(seen) + 1)).sum())) % self.shape.vocab_size
            sampled.append(int(mix))
        return sampled

    def close(self) -> None:
        if self.transfer is not None:
            self.transfer.close()
