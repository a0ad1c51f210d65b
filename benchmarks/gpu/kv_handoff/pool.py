"""A worker's KV block pool in host memory or on one GPU, and the content written into it.

Why one class for both: the handoff code must be the same on a machine with no GPU (the test) and
on two GPUs (the benchmark); only where the bytes live differs. The pool is one allocation, so
NIXL registers it once. Host pools use numpy; GPU pools use torch, imported only when asked for.
Content encodes (request seed, block, word) in every 8-byte word, so a block landing in the wrong
place, twice, or not at all fails the comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

POISON = 0xA5  # what a pool holds before anything is written, so blocks a handoff missed show
WORD = np.dtype("<u8")


class BlockPool:
    """`num_blocks` blocks of `block_bytes` each, on `device`: "cpu" or "cuda:N"."""

    def __init__(self, num_blocks: int, block_bytes: int, device: str) -> None:
        if block_bytes % WORD.itemsize:
            raise ValueError(f"block_bytes {block_bytes} is not a whole number of 8-byte words")
        self.num_blocks, self.block_bytes, self.device = num_blocks, block_bytes, device
        if device == "cpu":
            self._blocks = np.full((num_blocks, block_bytes), POISON, dtype=np.uint8)
            self.address = self._blocks.ctypes.data
            self.mem_type, self.device_id = "DRAM", 0
        else:
            import torch

            torch.cuda.set_device(device)  # NIXL's UCX transports work in the thread's current CUDA context
            self._blocks = torch.full((num_blocks, block_bytes), POISON, dtype=torch.uint8, device=device)
            self.address = self._blocks.data_ptr()
            self.mem_type, self.device_id = "VRAM", self._blocks.device.index

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.block_bytes

    def write(self, blocks: Sequence[int], content: np.ndarray) -> None:
        """Put content[i] (uint8 [len(blocks), block_bytes]) into blocks[i]."""
        if self.device == "cpu":
            self._blocks[list(blocks)] = content
        else:
            import torch

            index = torch.tensor(list(blocks), device=self.device)
            self._blocks[index] = torch.from_numpy(content).to(self.device)
            torch.cuda.synchronize(self.device)

    def read(self, blocks: Sequence[int]) -> np.ndarray:
        """A host copy of blocks, in the order given."""
        if self.device == "cpu":
            return self._blocks[list(blocks)].copy()
        import torch

        return self._blocks[torch.tensor(list(blocks), device=self.device)].cpu().numpy()


def request_content(seed: int, count: int, block_bytes: int) -> np.ndarray:
    """Deterministic bytes of a request's `count` blocks: each word says (seed, block, word)."""
    words = block_bytes // WORD.itemsize
    block = np.arange(count, dtype=WORD)[:, None] << np.uint64(32)
    word = np.arange(words, dtype=WORD)[None, :]
    salted = (block | word) ^ np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)
    return salted.astype(WORD).view(np.uint8).reshape(count, block_bytes)
