"""The GPU model runner (model_runner.py's seat): the weights, the KV pools, one forward step over a
scheduled batch through the block tables, and sampling on the device.

- Weights: a checked checkpoint's (forward/model.py: Model.from_checkpoint) or random ones of the shape,
  seeded by the engine file's `seed`.
- KV: one BF16 tensor a pool, block-major [blocks, layers of the pool, K/V, block tokens, KV heads, head
  dim], as TensorRT-LLM's pools; filled with NaN when allocated, so a read of a slot no step wrote shows
  as NaN logits rather than plausible ones.
- A step: every row's tokens in one packed tensor; in each layer each token's K and V are written to its
  slot (kv_index.py), then every row's keys are gathered through its table into one packed K/V and one
  varlen flash call attends for all rows, prompt chunks and decodes alike, with the sinks, causal, the
  window layers within 128 tokens (forward/attention.py: paged_attention). The gather copies each row's
  context once a layer: correct first, and what a paged kernel would save. Logits for the sampling rows
  only; `sampling.sample` draws on the device, a seeded request's noise from its seed and the token's
  position (the same draws however it is batched), the others' from the engine's generator.
- Decode under CUDA graphs (decode_graphs.py): once the pools are allocated, one graph a size of
  cuda_graph_config.batch_sizes of the decode step over the pools (forward/paged_decode.py's kernel, no
  gather); a decode-only step pads to the next size and replays it, every other step runs eagerly as above.
  Each pool tensor holds one block more than the block manager's, where padding rows write; what the
  graphs keep is measured before the pools are sized.
- The handoff (a prefill or decode worker's runner): kv_transfer.KvTransfer's NIXL agent over the
  pools' device memory, registered once they are allocated; a decode worker READs a request's blocks
  from its prefill worker's pools, GPU to GPU. The prefill's KV is written before its first token is
  read back to the host, so the blocks it offers are whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from dynamo_oss.engines.gptoss import decode_graphs, sampling
from dynamo_oss.engines.gptoss.forward import attention, layer
from dynamo_oss.engines.gptoss.forward import experts as mxfp4_experts
from dynamo_oss.engines.gptoss.forward.model import Model
from dynamo_oss.engines.gptoss.graph_inputs import pool_blocks
from dynamo_oss.engines.gptoss.kv_index import StepIndex, step_index
from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.kv_transfer import HandsOver, KvTransfer, PoolMemory
from dynamo_oss.engines.gptoss.model_runner import BatchRow, RunnerSetup, StepBatch

DEVICE = "cuda"
ACTIVATION_HEADROOM_BYTES = 2 * 2**30  # beyond the measured peak: cuBLAS and triton workspaces, fragmentation
SEED_MIX = 0x9E3779B97F4A7C15  # spreads (seed, position) over the generator's 64-bit seeds


class GpuModelRunner(HandsOver):
    def __init__(self, setup: RunnerSetup) -> None:
        self.setup = setup
        self.shape, args = setup.shape, setup.args
        self.max_seq_len = args.max_seq_len or self.shape.max_context
        mxfp4_experts.pin_hopper_options()
        if setup.checkpoint is not None:
            self.model = Model.from_checkpoint(setup.checkpoint, DEVICE, self.max_seq_len + 1)
        else:
            torch.manual_seed(args.seed)
            self.model = Model.random(self.shape, DEVICE, self.max_seq_len + 1, seed=args.seed)
        self.generator = torch.Generator(DEVICE).manual_seed(args.seed)
        self.slot_of_layer = {
            index: (name, pool.layers.index(index)) for name, pool in setup.pools.items() for index in pool.layers
        }
        self.kv: dict[PoolName, torch.Tensor] = {}
        self.transfer: KvTransfer | None = None
        self.graphs: decode_graphs.DecodeGraphs | None = None  # captured by allocate_kv
        self.attention_check = check_paged_kernel(self.shape)
        block_tokens = args.kv_cache_config.tokens_per_block
        self.decode_check = decode_graphs.check_kernel(self.shape, block_tokens)
        self._free_kv_bytes = self._measure_free_bytes()
        if decode_graphs.kernel_passes(self.decode_check):
            layout = decode_graphs.layout(setup, dict.fromkeys(setup.pools, 0), self.max_seq_len)
            held = decode_graphs.held_bytes(self.model, self._pool_tensor, layout)
            self._free_kv_bytes = max(0, self._free_kv_bytes - held)

    # Memory.

    def _pool_tensor(self, name: PoolName, blocks: int) -> torch.Tensor:
        pool, m = self.setup.pools[name], self.shape
        shape = (blocks, len(pool.layers), 2, pool.block_tokens, m.num_key_value_heads, m.head_dim)
        return torch.full(shape, float("nan"), device=DEVICE, dtype=torch.bfloat16)

    def _measure_free_bytes(self) -> int:
        """Run the largest step once (max_num_tokens of one prompt, then max_batch_size decodes) over
        pools just large enough, and keep what it took beside the weights."""
        args, pools = self.setup.args, self.setup.pools
        prompt = min(args.max_num_tokens, self.max_seq_len - 1)
        decodes = args.max_batch_size
        blocks = {name: pool.blocks_for(prompt) + decodes for name, pool in pools.items()}
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        self.kv = {name: self._pool_tensor(name, count) for name, count in blocks.items()}
        pools_bytes = torch.cuda.memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        tables = {name: (0, list(range(pool.blocks_for(prompt)))) for name, pool in pools.items()}
        self.execute(StepBatch([BatchRow("size-prompt", [0] * prompt, 0, tables, sampling.SamplingParams(0))]))
        first_free = {name: pool.blocks_for(prompt) for name, pool in pools.items()}
        rows = [
            BatchRow(
                f"size-{i}", [0], 0, {name: (0, [first_free[name] + i]) for name in pools}, sampling.SamplingParams()
            )
            for i in range(decodes)
        ]
        self.execute(StepBatch(rows))
        torch.cuda.synchronize()
        activations = torch.cuda.max_memory_allocated() - base - pools_bytes
        self.kv = {}
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        return max(0, free - activations - ACTIVATION_HEADROOM_BYTES)

    def free_kv_bytes(self) -> int:
        return self._free_kv_bytes

    def allocate_kv(self, blocks: Mapping[PoolName, int]) -> None:
        self.graphs = None
        self.kv = {name: self._pool_tensor(name, count) for name, count in pool_blocks(blocks).items()}
        if decode_graphs.kernel_passes(self.decode_check):
            layout = decode_graphs.layout(self.setup, blocks, self.max_seq_len)
            self.graphs = decode_graphs.DecodeGraphs(self.model, self.kv, layout)
        if self.setup.hands_over:
            memory = {
                name: PoolMemory(pool.data_ptr(), pool.shape[0], pool[0].nbytes, pool.device.index or 0, "VRAM")
                for name, pool in self.kv.items()
            }
            handoff = self.setup.args.handoff_config
            timing_log = Path(handoff.timing_log) if handoff.timing_log else None
            self.transfer = KvTransfer(memory, handoff.transfer_timeout_s, timing_log=timing_log)

    # One step.

    def execute(self, batch: StepBatch) -> list[int]:
        sampling_rows = [i for i, row in enumerate(batch.rows) if row.sampling is not None]
        logits = None
        if self.graphs is not None and batch.decode_only:
            logits = self.graphs.logits(batch.rows, sampling_rows)  # None: too many rows, or a table too wide
        if logits is None:
            logits = self.logits(batch, sampling_rows)
        return self.sample(logits, [batch.rows[i] for i in sampling_rows]).tolist() if sampling_rows else []

    def logits(self, batch: StepBatch, rows: list[int]) -> torch.Tensor:
        """The step's forward pass: K/V written through the tables, float32 logits [len(rows), vocab] of
        the given rows' last tokens."""
        index = step_index(batch.rows, self.setup.pools)
        tokens = _device(index.tokens)
        positions = _device(index.positions)
        reads = self._reads(index)
        last = _device(index.last_tokens(rows))
        with torch.no_grad():
            return self.model.forward(tokens, positions, lambda i: self._attend(i, index, reads), last).float()

    def _reads(self, index: StepIndex) -> dict[PoolName, tuple[torch.Tensor, ...]]:
        """Each pool's write and read slots and key offsets on the device, once a step."""
        reads = {}
        for name, pool_index in index.pools.items():
            reads[name] = (
                _device(pool_index.write_blocks),
                _device(pool_index.write_offsets),
                _device(pool_index.read_blocks),
                _device(pool_index.read_offsets),
                _device(pool_index.cu_keys),
            )
        return reads

    def _attend(self, layer_index: int, index: StepIndex, reads: dict) -> layer.Attend:
        name, slot = self.slot_of_layer[layer_index]
        write_blocks, write_offsets, read_blocks, read_offsets, cu_keys = reads[name]
        pool = self.kv[name]
        cu_queries = _device(index.cu_queries)
        cu_host = index.pools[name].cu_keys.tolist()
        q_host = index.cu_queries.tolist()
        bounds = [(q_host[r], q_host[r + 1], cu_host[r], cu_host[r + 1]) for r in range(len(q_host) - 1)]
        sinks = self.model.layers[layer_index].sinks
        window = self.model.window(layer_index)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = pool[:, slot, 0], pool[:, slot, 1]  # [blocks, block tokens, KV heads, head dim]
            keys[write_blocks, write_offsets] = k
            values[write_blocks, write_offsets] = v
            return attention.paged_attention(
                q,
                keys[read_blocks, read_offsets],
                values[read_blocks, read_offsets],
                cu_queries,
                cu_keys,
                bounds,
                window,
                sinks,
            )

        return attend

    def sample(self, logits: torch.Tensor, rows: list[BatchRow]) -> torch.Tensor:
        """One token a row by sampling.sample, on the device."""
        temperatures, uniforms = [], torch.empty_like(logits)
        for i, row in enumerate(rows):
            params = row.sampling
            assert params is not None, "a sampling row"
            temperatures.append(params.temperature)
            if params.greedy:
                uniforms[i] = 0.5  # unused: the row's argmax is its token
                continue
            generator = self.generator
            if params.seed is not None:
                position = row.start + len(row.token_ids)  # of the token drawn
                generator = torch.Generator(DEVICE).manual_seed((params.seed * SEED_MIX + position) % 2**63)
            uniforms[i].uniform_(generator=generator)
        temperature = torch.tensor(temperatures, device=DEVICE, dtype=torch.float32)
        return sampling.sample(torch, logits, temperature, uniforms)

    def close(self) -> None:
        if self.transfer is not None:
            self.transfer.close()
        self.graphs = None
        self.kv = {}
        del self.model
        torch.cuda.empty_cache()


def check_paged_kernel(m, tolerance: float = 2e-2) -> dict[str, float]:
    """The varlen flash kernel against the float32 masked one on rows of every kind (a decode, a whole
    prompt, a chunk after a prefix, each with and without the window); the masked one is used if it fails."""
    generator = torch.Generator(DEVICE).manual_seed(1)
    shapes = [(1, 300), (77, 77), (40, 200), (1, 9)]  # (queries, keys) of each row
    rows, q_at, k_at = [], 0, 0
    for queries, keys in shapes:
        rows.append((q_at, q_at + queries, k_at, k_at + keys))
        q_at, k_at = q_at + queries, k_at + keys

    def rand(count: int, heads: int) -> torch.Tensor:
        shape = (count, heads, m.head_dim)
        return torch.randn(shape, device=DEVICE, generator=generator, dtype=torch.float32).to(torch.bfloat16)

    q, keys, values = (
        rand(q_at, m.num_attention_heads),
        rand(k_at, m.num_key_value_heads),
        rand(k_at, m.num_key_value_heads),
    )
    sinks = torch.randn(m.num_attention_heads, device=DEVICE, generator=generator)
    cu_q = torch.tensor([0] + [r[1] for r in rows], device=DEVICE, dtype=torch.int32)
    cu_k = torch.tensor([0] + [r[3] for r in rows], device=DEVICE, dtype=torch.int32)
    errors = {}
    attention.PAGED_KERNEL["name"] = "flash"
    for window in (None, m.sliding_window):
        want = attention.masked_paged_attention(q, keys, values, rows, window, sinks).float()
        try:
            got = attention.paged_attention(q, keys, values, cu_q, cu_k, rows, window, sinks).float()
            error = float((got - want).norm() / want.norm())
        except RuntimeError:
            error = float("inf")
        errors[f"flash varlen vs float32, window {window}"] = error if error == error else float("inf")
    if not all(error < tolerance for error in errors.values()):
        attention.PAGED_KERNEL["name"] = "masked"
    errors["kernel"] = attention.PAGED_KERNEL["name"]  # type: ignore[assignment]
    return errors


def _device(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).to(DEVICE, non_blocking=True)
