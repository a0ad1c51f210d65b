"""gpt-oss-120b's forward pass (the engine's: dynamo_oss/engines/gptoss/forward/model.py) over the
benchmark's contiguous KV cache, per sequence.

Each full-attention layer has one K and one V pool of `kv_capacity` token slots viewed as
[batch, kv heads, context, head_dim] for a case; window layers keep the last 128 tokens
[max batch, kv heads, 128, head_dim]; a chunked prompt keeps its own K and V. The engine's paged cache
(32-token blocks through block tables, engines/gptoss/gpu_runner.py) reads the same bytes through its
tables. Decode attention is layer.step_attention's flash kernel with the exact sink rescale; prefill
chunks FlexAttention with sinks and a causal or windowed block mask, also after a cached prefix.
OpenAI's gpt_oss/triton/model.py is not run as is: its decode attention is `attention_ref` (float32
scores over the whole cache with K and V repeated per query head), one cache offset serves the whole
batch, and its Triton prefill kernel starts each query block's key loop at the chunk's own first key
(`lo = start_q`), so a chunk after a cached prefix would not see the prefix. Its MoE
(gpt_oss/triton/moe.py) is what forward/experts.moe_block runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.forward import attention, layer
from dynamo_oss.engines.gptoss.forward.model import Model


@dataclass
class Caches:
    """KV of every layer: full layers' pools of `capacity` token slots, window layers' last 128 tokens."""

    full_k: list[torch.Tensor]  # [capacity * kv heads * head_dim] each
    full_v: list[torch.Tensor]
    window_k: list[torch.Tensor]  # [max batch, kv heads, window, head_dim] each
    window_v: list[torch.Tensor]
    prompt_k: list[torch.Tensor]  # [1, kv heads, longest prompt, head_dim]: a chunked prompt's own KV
    prompt_v: list[torch.Tensor]

    @classmethod
    def random(cls, m: ModelShape, capacity: int, max_batch: int, prompt: int, device: str) -> Caches:
        """Random contents (never zeros): attention time does not depend on the values, but a bug reading
        unwritten slots would show as NaN."""
        slot = m.num_key_value_heads * m.head_dim

        def pools(shape: tuple[int, ...], count: int) -> list[torch.Tensor]:
            return [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(count)]

        full, window = m.full_attention_layers, m.window_layers
        window_shape = (max_batch, m.num_key_value_heads, m.sliding_window, m.head_dim)
        prompt_shape = (1, m.num_key_value_heads, prompt, m.head_dim)
        return cls(
            pools((capacity * slot,), full),
            pools((capacity * slot,), full),
            pools(window_shape, window),
            pools(window_shape, window),
            pools(prompt_shape, m.num_layers),
            pools(prompt_shape, m.num_layers),
        )

    def layer_kv(self, m: ModelShape, index: int, batch: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s decode cache for `batch` sequences of `context` tokens."""
        if index % 2 == 0:
            return self.window_k[index // 2], self.window_v[index // 2]
        shape = (batch, m.num_key_value_heads, context, m.head_dim)
        count = batch * context * m.num_key_value_heads * m.head_dim
        k, v = self.full_k[index // 2], self.full_v[index // 2]
        return k[:count].view(shape), v[:count].view(shape)


def decode_steps(model: Model, caches: Caches, tokens: torch.Tensor, context: int) -> list[layer.Step]:
    """One Step per layer for `len(tokens)` sequences each decoding its token at position context - 1."""
    m = model.m
    x = torch.empty(len(tokens), m.hidden_size, device=tokens.device, dtype=torch.bfloat16)
    steps = []
    for index in range(m.num_layers):
        k, v = caches.layer_kv(m, index, len(tokens), context)
        steps.append(layer.make_step(x, 0, len(tokens), context, model.window(index), k, v, str(tokens.device)))
    return steps


def chunk_steps(model: Model, caches: Caches, chunk: int, cached: int, device: str) -> list[layer.Step]:
    """One Step per layer for a prompt chunk of `chunk` tokens after `cached` of the same prompt
    (whose K and V the chunk appends to and reads from the prompt buffers when cached > 0)."""
    m = model.m
    x = torch.empty(chunk, m.hidden_size, device=device, dtype=torch.bfloat16)
    masks = {window: attention.chunk_mask(chunk, cached, window, device) for window in (m.sliding_window, None)}
    positions = layer.positions_for(chunk, 0, 0, device, cached)
    return [
        layer.Step(
            x=x,
            positions=positions,
            chunk=chunk,
            batch=0,
            window=model.window(index),
            chunk_mask=masks[model.window(index)],
            cached=cached,
            chunk_k=caches.prompt_k[index][:, :, : cached + chunk] if cached else None,
            chunk_v=caches.prompt_v[index][:, :, : cached + chunk] if cached else None,
            k_cache=None,
            v_cache=None,
        )
        for index in range(m.num_layers)
    ]


def forward(
    model: Model, tokens: torch.Tensor, steps: list[layer.Step], logit_rows: slice, with_experts: bool = True
) -> torch.Tensor:
    """The engine's forward pass over the contiguous caches of `steps` (one a layer)."""
    return model.forward(
        tokens,
        steps[0].positions,
        lambda index: layer.step_attention(steps[index], model.layers[index].sinks),
        logit_rows,
        with_experts,
    )
