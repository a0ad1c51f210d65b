"""The paged KV layout handed from prefill to decode, and which byte ranges a handoff moves.

Block-major, as TensorRT-LLM's KV cache pool is: one block holds `block_tokens` tokens of every
full-attention layer, K and V, so a block is one contiguous range
[layers, K/V, block_tokens, kv_heads, head_dim]. gpt-oss-120b in BF16 with 32-token blocks:
18 layers x 2 x 32 x 8 x 64 x 2 bytes = 1.125 MiB a block, 1024 blocks (1.125 GiB) for 32k tokens.
The sliding-window layers' at most 128 tokens (4.5 MiB a request) are left out: they do not grow
with the prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynamo_oss.catalog.models import ModelShape

BF16 = 2
FP8 = 1


@dataclass(frozen=True)
class BlockLayout:
    """Bytes of one KV block and how many blocks a prompt needs."""

    block_tokens: int
    block_bytes: int

    @classmethod
    def for_model(cls, m: ModelShape, block_tokens: int = 32, element_bytes: int = BF16) -> BlockLayout:
        return cls(block_tokens, int(m.kv_bytes_per_context_token(element_bytes)) * block_tokens)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_tokens)
