"""The seat of the GPU model runner: what the engine asks of the forward pass, and the one place that opens it.

Everything else in this package is CPU-side Python with no torch (the project's install has none); the
runner owns the GPU: the weights, the KV pools' memory, one forward step over a batch and its sampling,
and the KV's moves between workers. It is imported only by `open_runner`, in the worker process.

`gpu_runner.py` beside this file is the `GpuModelRunner(RunnerSetup)` that implements `ModelRunner`
(issue 44); what it does and does not yet do is in its docstring. What it must do, from what
benchmarks/gpu has measured on an H200:
- weights: a checked `checkpoint.Checkpoint` (its arrays mapped from disk, BF16 as uint16) or, without
  one, random weights of the shape (seeded by `seed`); the MXFP4 experts through triton_kernels'
  `matmul_ogs` with float32 biases (../shared/facts/performance.md), the forward pass being
  forward/model.py's (moved here from benchmarks/gpu/forward_step, which imports it back);
- `free_kv_bytes()`: device memory left after the weights, one run of the largest step (max_num_tokens
  of prompt, then max_batch_size decodes) and the decode CUDA graphs, which capacity.plan_kv_blocks divides;
- `allocate_kv(blocks)`: one BF16 tensor a pool, block-major [blocks, layers of the pool, K/V, block
  tokens, KV heads, head dim] as TensorRT-LLM's pools (benchmarks/gpu/kv_handoff/layout.py), then one
  scratch block, where a graph's padding rows write (graph_inputs.py);
- `execute(batch)`: write each computed token's K and V into its block (block `position // block_tokens`
  at index `position // block_tokens - table.first` of the pool's table), attend with the sinks over the
  whole context or the 128-token window through the tables, compute logits for the sampling rows only,
  and draw with `sampling.sample(torch, ...)` on the device, each request's noise from its own generator
  (its seed, else the engine's); a decode-only step replays the CUDA graph of the next size in
  cuda_graph_config.batch_sizes;
- the handoff over NIXL (kv_transfer.py, for a setup that `hands_over`): `transfer_source()` (the agent's
  name, metadata and pools a decode worker reads from), `receive(handoff, pairs)` (start a READ of those
  block pairs, pool by pool, notifying the prefill worker when done), `poll_transfers()` (handoffs
  received and failed, on the decode side; handoffs read, on the prefill side), with a deadline, so a
  handoff whose peer is gone fails and never hangs.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.checkpoint import Checkpoint
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.engine import GPU_RUNNER_MODULE
from dynamo_oss.engines.gptoss.handoff import KvHandoff, TransferSource
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.sampling import SamplingParams
from dynamo_oss.engines.gptoss.scheduler import Step


class RunnerUnavailable(RuntimeError):
    """The GPU model runner cannot be opened here; the message says why."""


@dataclass(frozen=True)
class RunnerSetup:
    shape: ModelShape
    args: GptOssArgs
    pools: Mapping[PoolName, KvPool]
    checkpoint: Checkpoint | None  # None: random weights of the shape
    hands_over: bool = False  # a prefill or decode worker's: its pools are offered to, or read from, a peer


@dataclass(frozen=True)
class BatchRow:
    """One scheduled sequence of a step: the tokens it computes, where its KV goes, how it samples."""

    request_id: str
    token_ids: list[int]  # at positions start, start + 1, ...
    start: int
    tables: dict[PoolName, tuple[int, list[int]]]  # per pool: its first logical block, then the blocks
    sampling: SamplingParams | None  # None: a prompt chunk that does not reach its last token


@dataclass(frozen=True)
class StepBatch:
    rows: list[BatchRow] = field(default_factory=list)

    @property
    def decode_only(self) -> bool:
        """Every row one token: a step the runner can replay from a CUDA graph."""
        return all(len(row.token_ids) == 1 for row in self.rows)


def step_batch(step: Step) -> StepBatch:
    """What the runner computes for a scheduled step (the tables as they stand once it has grown them)."""
    rows = []
    for item in step.scheduled:
        seq = item.seq
        rows.append(
            BatchRow(
                request_id=seq.request_id,
                token_ids=seq.token_ids[item.start : item.start + item.count],
                start=item.start,
                tables={name: (table.first, list(table.blocks)) for name, table in seq.tables.items()},
                sampling=seq.sampling if item.samples else None,
            )
        )
    return StepBatch(rows)


@dataclass(frozen=True)
class TransferProgress:
    received: list[str] = field(default_factory=list)  # request ids whose KV has arrived (decode side)
    failed: list[str] = field(default_factory=list)  # request ids whose KV never will (decode side)
    read: list[str] = field(default_factory=list)  # handoff ids a decode worker has read (prefill side)


class ModelRunner(Protocol):
    def free_kv_bytes(self) -> int:
        """Device bytes left for the KV pools once the weights are loaded and the largest step has run."""

    def allocate_kv(self, blocks: Mapping[PoolName, int]) -> None:
        """The KV pools' memory, `blocks[name]` blocks for each pool."""

    def execute(self, batch: StepBatch) -> list[int]:
        """One forward step; the token sampled for each row that samples, in row order."""

    def transfer_source(self) -> TransferSource:
        """Where a decode worker reads this worker's blocks from (a handoff's `source`)."""

    def receive(self, request_id: str, handoff: KvHandoff, pairs: Mapping[PoolName, list[tuple[int, int]]]) -> None:
        """Start reading a handoff's blocks into this worker's: (sender's block, receiver's block) per pool."""

    def poll_transfers(self) -> TransferProgress:
        """The transfers finished since the last call."""

    def close(self) -> None:
        """Release the GPU (the engine calls it once, on shutdown)."""


def open_runner(setup: RunnerSetup) -> ModelRunner:
    """The GPU model runner, imported here and nowhere else; RunnerUnavailable when it cannot run."""
    try:
        module = importlib.import_module(GPU_RUNNER_MODULE)
    except ModuleNotFoundError as missing:
        raise RunnerUnavailable(f"the gptoss engine cannot start: {missing.name} is missing") from None
    return module.GpuModelRunner(setup)
