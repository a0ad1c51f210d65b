"""A worker's KV cache as TensorRT-LLM lays it out for gpt-oss: blocks, one pool per attention window.

The one definition of what a sequence holds, what a worker's memory holds and what a
disaggregated handoff sends; the cost model, the mocker's profiles and the planner all ask it.

How TensorRT-LLM's PyTorch backend does it (read from its sources, NVIDIA/TensorRT-LLM):
- `kv_cache_config.max_attention_window` is each layer's window, repeating over the layers.
  Left out, every layer keeps the whole sequence: one pool, all 36 layers charged at full
  context (`_torch/pyexecutor/resource_manager.py`, KVCacheManager: `[max_seq_len]` when unset).
  gpt-oss's even layers attend a 128-token window (`_torch/models/modeling_gpt_oss.py`), so
  `[128, 131072]` makes two pools: the window layers' and the full layers'.
- With two windows the pools split the KV memory in equal shares unless TRTLLM_WINDOW_SIZE_SHARES
  says otherwise (`calculate_max_num_blocks_for_vswa`), so the full layers' pool gets half of it.
  Equal shares leave the capacity in context tokens where one pool had it; what the window saves
  is a sequence's footprint in the window pool and the handoff.
- A block holds `tokens_per_block` (32) tokens of every layer of its pool. A sequence holds
  ceil(L / 32) blocks of a full pool and, in a window pool, the blocks its last window spans plus
  the one being written: at most window / 32 + 1 (`kvCacheManager.cpp`, maxBlocksPerSeq with
  isUseOneMoreBlock). A handoff sends every block of a full pool and the last window / 32 + 1
  blocks of a window pool (`cacheFormatter.cpp`, getBlockRangeForSending), 5 of 32 tokens for gpt-oss.
So for a 64k gpt-oss-120b sequence in FP8, TensorRT-LLM holds and sends 1.125 GiB of full-layer KV
plus 2.8 MiB of window KV with the window set, and 2.25 GiB without it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, computed_field

from dynamo_oss.catalog.models import ModelShape

BLOCK_TOKENS = 32  # TensorRT-LLM's tokens_per_block when kv_cache_config does not say


def gpt_oss_windows(shape: ModelShape) -> tuple[int, int]:
    """The max_attention_window that gives gpt-oss's layers their own windows: the even (window)
    layers 128 tokens, the odd (full) layers the whole context."""
    return (shape.sliding_window, shape.max_context)


def window_problem(shape: ModelShape, windows: tuple[int, ...]) -> str | None:
    """Why a max_attention_window would change what gpt-oss computes, or None when it keeps it: a
    window layer may not see fewer than its 128 tokens, nor a full layer less than the whole context."""
    for layer in range(shape.num_layers):
        window = windows[layer % len(windows)]
        needed = shape.sliding_window if layer % 2 == 0 else shape.max_context
        if window < needed:
            kind = "window" if layer % 2 == 0 else "full-attention"
            return (
                f"gives layer {layer} ({kind}) a window of {window} tokens, fewer than the {needed} "
                f"gpt-oss attends there; use {list(gpt_oss_windows(shape))}"
            )
    return None


class WindowPool(BaseModel):
    """The blocks of the layers that share one attention window."""

    model_config = ConfigDict(frozen=True)

    window: int = Field(description="tokens each of its layers attends (the context, for full attention)")
    layers: int = Field(description="decoder layers in the pool")
    block_bytes: float = Field(description="bytes of one block on one GPU: its tokens in every layer of the pool")
    full: bool = Field(description="its layers keep the whole sequence")

    def blocks(self, context: int, block_tokens: int) -> int:
        """Blocks one sequence of `context` tokens holds in the pool (and a handoff sends)."""
        whole = math.ceil(context / block_tokens)
        return whole if self.full else min(whole, self.window // block_tokens + 1)


class KvCache(BaseModel):
    """One attention rank's KV cache: its pools, their blocks and what a sequence takes of them."""

    model_config = ConfigDict(frozen=True)

    shape: ModelShape
    element_bytes: float = Field(description="bytes per K or V element (1 for FP8, 2 for BF16)")
    kv_shards: int = Field(1, ge=1, description="GPUs that split one sequence's KV heads")
    windowed: bool = Field(description="max_attention_window gives the window layers pools of their own")
    block_tokens: int = Field(BLOCK_TOKENS, ge=1)

    @computed_field
    @property
    def pools(self) -> list[WindowPool]:
        s = self.shape
        layer_block = s.kv_bytes_per_layer_token(self.element_bytes) * self.block_tokens / self.kv_shards

        def pool(window: int, layers: int) -> WindowPool:
            full = window >= s.max_context
            return WindowPool(window=window, layers=layers, block_bytes=layers * layer_block, full=full)

        if not self.windowed:
            return [pool(s.max_context, s.num_layers)]
        return [pool(s.sliding_window, s.window_layers), pool(s.max_context, s.full_attention_layers)]

    @property
    def full_pool(self) -> WindowPool:
        return next(pool for pool in self.pools if pool.full)

    def sequence_bytes(self, context: int) -> float:
        """Bytes one sequence of `context` tokens holds, over the GPUs that split it: also what a
        disaggregated handoff of a `context`-token prompt sends."""
        return self.kv_shards * sum(pool.blocks(context, self.block_tokens) * pool.block_bytes for pool in self.pools)

    def pool_blocks(self, budget_bytes: float) -> dict[int, int]:
        """Blocks of each pool (by window) in `budget_bytes` of KV memory on one GPU, in TensorRT-LLM's
        default equal shares."""
        share = budget_bytes / len(self.pools)
        return {pool.window: max(0, int(share // pool.block_bytes)) for pool in self.pools}

    def context_tokens(self, budget_bytes: float) -> int:
        """Tokens of context the full-attention pool holds: what the mocker's blocks stand for."""
        return self.pool_blocks(budget_bytes)[self.full_pool.window] * self.block_tokens

    def sequences(self, budget_bytes: float, context: int) -> int:
        """How many sequences of `context` tokens the memory holds at once: the scarcer pool decides."""
        blocks = self.pool_blocks(budget_bytes)
        return min(blocks[pool.window] // pool.blocks(context, self.block_tokens) for pool in self.pools)
