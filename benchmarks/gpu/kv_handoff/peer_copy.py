"""The yardstick for a GPU-to-GPU handoff: PyTorch copying the same bytes from cuda:0 to cuda:1.

Two baselines per size, both in one process with peer access, timed from the host after
synchronising both GPUs, median of repeats:
- one copy of the request's bytes as one contiguous range (what the project's facts call the peer
  copy, 391 GB/s measured before);
- one torch copy_ per block (a cudaMemcpyPeerAsync plus torch's cross-device stream ordering
  each), as many copies as a per-block handoff has descriptors, on one stream.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

REPEATS = 20


def _median_s(copy: Callable[[], None]) -> float:
    def synchronise() -> None:
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)

    copy()
    synchronise()
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        copy()
        synchronise()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(blocks: int, block_bytes: int) -> dict[str, float]:
    """GB/s of both baselines for `blocks` blocks."""
    source = torch.randint(0, 256, (blocks, block_bytes), dtype=torch.uint8, device="cuda:0")
    target = torch.empty_like(source, device="cuda:1")
    contiguous = _median_s(lambda: target.copy_(source, non_blocking=True))
    if not torch.equal(target.cpu(), source.cpu()):
        raise RuntimeError("peer copy did not reproduce its source")

    def per_block() -> None:
        for i in range(blocks):
            target[i].copy_(source[i], non_blocking=True)

    one_per_block = _median_s(per_block)
    nbytes = blocks * block_bytes
    return {"contiguous_gbps": nbytes / contiguous / 1e9, "per_block_gbps": nbytes / one_per_block / 1e9}
