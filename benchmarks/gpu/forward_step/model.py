"""gpt-oss-120b as one GPU runs it: embedding, 36 decoder layers, final norm and output head.

Each layer is benchmarks/gpu/mixed_step/layer.py's (RMSNorm, QKV with bias, RoPE, GQA 64/8 heads of
64 with sinks, output projection, MoE); even layers attend within a 128-token window and odd ones to
everything, as gpt-oss starts with a window layer. The MoE is the checkpoint's: MXFP4 experts through
triton_kernels (benchmarks/gpu/mxfp4_experts/kernel.py: triton routing, gate-up with fused SwiGLU,
down with the weighted combine), the bf16 router before it; attention weights, norms, embedding and
output head are bf16 as in the checkpoint.

Attention kernels: decode through PyTorch's flash kernel with the 8 query heads of a KV head packed
and the exact sink rescale (layer.decode_sink_attention); prefill chunks through FlexAttention with
sinks and a causal or windowed block mask, also after a cached prefix. OpenAI's gpt_oss/triton/model.py
is not run as is: its decode attention is `attention_ref` (float32 scores over the whole cache with
K and V repeated per query head), one cache offset serves the whole batch, and its Triton prefill
kernel starts each query block's key loop at the chunk's own first key (`lo = start_q`), so a chunk
after a cached prefix would not see the prefix. Its MoE (gpt_oss/triton/moe.py) is what
kernel.moe_block runs.

KV cache: contiguous per sequence. Each full-attention layer has one K and one V pool of
`kv_capacity` token slots viewed as [batch, kv heads, context, head_dim] for a case; window layers
keep the last 128 tokens [max batch, kv heads, 128, head_dim]. A paged cache (TensorRT-LLM: 32-token
blocks) reads the same bytes through a block table. Logits are computed for each decoding sequence
and for the last token of a prefill chunk only, as engines do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from benchmarks.gpu.kernels import moe
from benchmarks.gpu.mixed_step import layer
from benchmarks.gpu.mxfp4_experts import kernel
from benchmarks.gpu.mxfp4_experts.checkpoint import CheckpointExperts
from dynamo_oss.catalog.models import ModelShape

NO_BF16_EXPERTS = moe.Experts(torch.empty(0), torch.empty(0))


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


@dataclass
class Model:
    m: ModelShape
    layers: list[layer.LayerWeights]  # bf16 attention, norms, router; experts in `experts`
    experts: list[kernel.Experts]
    embedding: torch.Tensor  # [vocab, hidden]
    final_norm: torch.Tensor
    head: torch.Tensor  # [vocab, hidden]
    cos: torch.Tensor
    sin: torch.Tensor

    @classmethod
    def random(cls, m: ModelShape, device: str, positions: int, seed: int = 0) -> Model:
        generator = torch.Generator(device).manual_seed(seed)
        layers, experts = [], []
        for _ in range(m.num_layers):
            layers.append(layer.LayerWeights.random(m, device, experts=NO_BF16_EXPERTS))
            experts.append(kernel.Experts.from_checkpoint(CheckpointExperts.random(m, device, generator)))
        scale = m.hidden_size**-0.5
        cos, sin = layer.rope_table(m, positions, device)
        return cls(
            m,
            layers,
            experts,
            torch.randn(m.vocab_size, m.hidden_size, device=device, dtype=torch.bfloat16),
            1 + 0.1 * torch.randn(m.hidden_size, device=device, dtype=torch.bfloat16),
            torch.randn(m.vocab_size, m.hidden_size, device=device, dtype=torch.bfloat16).mul_(scale),
            cos,
            sin,
        )

    def window(self, index: int) -> int | None:
        return self.m.sliding_window if index % 2 == 0 else None

    def decode_steps(self, caches: Caches, tokens: torch.Tensor, context: int) -> list[layer.Step]:
        """One Step per layer for `len(tokens)` sequences each decoding its token at position context - 1."""
        x = torch.empty(len(tokens), self.m.hidden_size, device=tokens.device, dtype=torch.bfloat16)
        steps = []
        for index in range(self.m.num_layers):
            k, v = caches.layer_kv(self.m, index, len(tokens), context)
            steps.append(layer.make_step(x, 0, len(tokens), context, self.window(index), k, v, str(tokens.device)))
        return steps

    def chunk_steps(self, caches: Caches, chunk: int, cached: int, device: str) -> list[layer.Step]:
        """One Step per layer for a prompt chunk of `chunk` tokens after `cached` of the same prompt
        (whose K and V the chunk appends to and reads from the prompt buffers when cached > 0)."""
        x = torch.empty(chunk, self.m.hidden_size, device=device, dtype=torch.bfloat16)
        masks = {window: layer.chunk_mask(chunk, cached, window, device) for window in (self.m.sliding_window, None)}
        positions = layer.positions_for(chunk, 0, 0, device, cached)
        return [
            layer.Step(
                x=x,
                positions=positions,
                chunk=chunk,
                batch=0,
                window=self.window(index),
                chunk_mask=masks[self.window(index)],
                cached=cached,
                chunk_k=caches.prompt_k[index][:, :, : cached + chunk] if cached else None,
                chunk_v=caches.prompt_v[index][:, :, : cached + chunk] if cached else None,
                k_cache=None,
                v_cache=None,
            )
            for index in range(self.m.num_layers)
        ]

    def forward(
        self, tokens: torch.Tensor, steps: list[layer.Step], logit_rows: slice, with_experts: bool = True
    ) -> torch.Tensor:
        """Hidden states through every layer, then logits [rows, vocab] for the rows that sample a token.
        `with_experts` False skips each MoE block (router and experts), to time what the rest of the step costs."""
        x = F.embedding(tokens, self.embedding)
        for weights, experts, step in zip(self.layers, self.experts, steps):

            def mxfp4_moe(
                h: torch.Tensor, w: layer.LayerWeights, k: int, experts: kernel.Experts = experts
            ) -> torch.Tensor:
                if not with_experts:
                    return torch.zeros_like(h)
                return kernel.moe_block(h, w.router.weight, w.router.bias, experts, k)

            x = layer.layer_forward(self.m, weights, replace(step, x=x), self.cos, self.sin, mxfp4_moe)
        h = F.rms_norm(x[logit_rows], (self.m.hidden_size,), self.final_norm, layer.NORM_EPS)
        return F.linear(h, self.head)
