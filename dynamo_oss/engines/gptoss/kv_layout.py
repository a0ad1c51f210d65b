"""The KV cache as TensorRT-LLM lays it out for gpt-oss: one pool of blocks per attention window.

gpt-oss alternates layers that attend to the whole context with layers that attend to the last 128
tokens (a query at position p reads keys p-127..p), starting with a window layer. Each pool holds the
K and V of its layers in blocks of `block_tokens` tokens, one block covering that stretch of tokens in
every layer of the pool, so a sequence's KV is a list of blocks per pool:
- the full-attention pool grows with the context: blocks 0..ceil(tokens / block_tokens) - 1;
- the window pool keeps only the blocks the next query still reads: at most ceil(127 / block_tokens) + 1
  (five 32-token blocks), the earlier ones given back as the sequence moves on.

gpt-oss's attention sinks are one learned logit per head and layer (`self_attn.sinks`, [64] in the
checkpoint), added to each softmax's denominator: parameters, not cached tokens, so they cost no KV.
The performance model (catalog.models.ModelShape.kv_bytes) counts 128 tokens a sequence in each window
layer; a block table holds whole blocks, so the pools hold up to one block more per pool than that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dynamo_oss.catalog.models import ModelShape

PoolName = Literal["full", "window"]
BF16_BYTES = 2


@dataclass(frozen=True)
class KvPool:
    """The layers sharing one attention window, cached in blocks of `block_tokens` tokens."""

    name: PoolName
    window: int | None  # how far back a query reads, itself included; None: the whole context
    layers: tuple[int, ...]
    block_tokens: int

    def blocks_for(self, tokens: int) -> int:
        """Blocks that positions 0..tokens-1 span."""
        return math.ceil(tokens / self.block_tokens)

    def first_block_read(self, position: int) -> int:
        """The first block a query at `position` reads: 0 with full attention, else the window's start."""
        if self.window is None:
            return 0
        return max(0, position - self.window + 1) // self.block_tokens

    def blocks_read(self, start: int, end: int) -> range:
        """The blocks a step computing positions start..end-1 reads or writes."""
        return range(self.first_block_read(start), self.blocks_for(end))

    def blocks_kept(self, computed: int) -> range:
        """The blocks a sequence of `computed` cached tokens keeps for its next query, at position `computed`:
        all of them with full attention, the window's last ones otherwise."""
        return self.blocks_read(computed, computed)

    @property
    def most_blocks_a_decode_reads(self) -> int | None:
        """Blocks one decoding sequence holds at most (the window straddles one more block when its start
        is not a block's); None for full attention, which holds them all."""
        if self.window is None:
            return None
        return math.ceil((self.window - 1) / self.block_tokens) + 1

    def block_bytes(self, shape: ModelShape, element_bytes: int = BF16_BYTES) -> int:
        """K and V of one block in every layer of the pool."""
        return len(self.layers) * int(shape.kv_bytes_per_layer_token(element_bytes)) * self.block_tokens


def kv_pools(shape: ModelShape, block_tokens: int) -> dict[PoolName, KvPool]:
    """gpt-oss's two pools: the window layers (even, from the first) and the full-attention ones (odd)."""
    layers = range(shape.num_layers)
    return {
        "full": KvPool("full", None, tuple(i for i in layers if i % 2 == 1), block_tokens),
        "window": KvPool("window", shape.sliding_window, tuple(i for i in layers if i % 2 == 0), block_tokens),
    }
