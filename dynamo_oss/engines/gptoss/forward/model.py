"""gpt-oss as one GPU runs it: embedding, the decoder layers, final norm and output head.

Each layer is `layer.decoder_layer` (RMSNorm, QKV with bias, RoPE, GQA with sinks, output projection,
MoE); even layers attend within a 128-token window and odd ones to everything, as gpt-oss starts with a
window layer. The MoE is the checkpoint's: MXFP4 experts through triton_kernels (experts.py: triton
routing, gate-up with fused SwiGLU, down with the weighted combine), the bf16 router before it;
attention weights, norms, embedding and output head are bf16 as in the checkpoint. Attention is the
caller's (`forward`'s `attend`): the engine's paged attention, or a benchmark's contiguous caches.
Logits are computed for the rows that sample a token only, as engines do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.checkpoint import Checkpoint
from dynamo_oss.engines.gptoss.forward import experts as mxfp4_experts
from dynamo_oss.engines.gptoss.forward import layer
from dynamo_oss.engines.gptoss.forward.dense import Linear
from dynamo_oss.engines.gptoss.forward.mxfp4 import CheckpointExperts, Mxfp4Weight

AttendFor = Callable[[int], layer.Attend]  # a layer's index -> its attention over the step's K/V


@dataclass
class Model:
    m: ModelShape
    layers: list[layer.LayerWeights]  # bf16 attention, norms, router; experts in `experts`
    experts: list[mxfp4_experts.Experts]
    embedding: torch.Tensor  # [vocab, hidden]
    final_norm: torch.Tensor
    head: torch.Tensor  # [vocab, hidden]
    cos: torch.Tensor
    sin: torch.Tensor

    @classmethod
    def random(cls, m: ModelShape, device: str, positions: int, seed: int = 0) -> Model:
        """Random weights of the real shapes: bf16 ones from torch's global generator (seed it first for
        the same weights), the MXFP4 experts from a generator seeded by `seed`."""
        generator = torch.Generator(device).manual_seed(seed)
        layers, experts = [], []
        for _ in range(m.num_layers):
            layers.append(layer.LayerWeights.random(m, device))
            experts.append(mxfp4_experts.Experts.from_checkpoint(CheckpointExperts.random(m, device, generator)))
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

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, device: str, positions: int) -> Model:
        """The checked checkpoint's tensors on the GPU: BF16 as stored, q/k/v fused into one projection,
        sinks and expert biases in float32, the experts swizzled for Hopper from their MXFP4 blocks."""
        m = checkpoint.shape

        def bf16(name: str) -> torch.Tensor:
            stored = np.array(checkpoint.array(name))  # one copy from the mapped file, uint16, writable
            return torch.from_numpy(stored.view(np.int16)).to(device).view(torch.bfloat16)

        def u8(name: str) -> torch.Tensor:
            return torch.from_numpy(np.array(checkpoint.array(name))).to(device)

        layers, experts = [], []
        for index in range(m.num_layers):
            attn, mlp = f"model.layers.{index}.self_attn", f"model.layers.{index}.mlp"
            qkv = [f"{attn}.{name}_proj" for name in ("q", "k", "v")]
            layers.append(
                layer.LayerWeights(
                    norm1=bf16(f"model.layers.{index}.input_layernorm.weight"),
                    qkv=Linear(
                        torch.cat([bf16(f"{name}.weight") for name in qkv]),
                        torch.cat([bf16(f"{name}.bias") for name in qkv]),
                    ),
                    o=Linear(bf16(f"{attn}.o_proj.weight"), bf16(f"{attn}.o_proj.bias")),
                    norm2=bf16(f"model.layers.{index}.post_attention_layernorm.weight"),
                    router=Linear(bf16(f"{mlp}.router.weight"), bf16(f"{mlp}.router.bias")),
                    sinks=bf16(f"{attn}.sinks").float(),
                )
            )
            stored = {
                name: (
                    Mxfp4Weight(u8(f"{mlp}.experts.{name}_blocks"), u8(f"{mlp}.experts.{name}_scales")),
                    bf16(f"{mlp}.experts.{name}_bias").float(),
                )
                for name in ("gate_up_proj", "down_proj")
            }
            ckpt = CheckpointExperts(*stored["gate_up_proj"], *stored["down_proj"])
            experts.append(mxfp4_experts.Experts.from_checkpoint(ckpt))
        cos, sin = layer.rope_table(m, positions, device)
        return cls(
            m,
            layers,
            experts,
            bf16("model.embed_tokens.weight"),
            bf16("model.norm.weight"),
            bf16("lm_head.weight"),
            cos,
            sin,
        )

    def window(self, index: int) -> int | None:
        return self.m.sliding_window if index % 2 == 0 else None

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attend_for: AttendFor,
        logit_rows: slice | torch.Tensor,
        with_experts: bool = True,
    ) -> torch.Tensor:
        """Hidden states through every layer, then logits [rows, vocab] for the rows that sample a token.
        `with_experts` False skips each MoE block (router and experts), to time what the rest of the step costs."""
        x = F.embedding(tokens, self.embedding)
        for index, (weights, experts) in enumerate(zip(self.layers, self.experts)):

            def mxfp4_moe(
                h: torch.Tensor, w: layer.LayerWeights, k: int, experts: mxfp4_experts.Experts = experts
            ) -> torch.Tensor:
                if not with_experts:
                    return torch.zeros_like(h)
                return mxfp4_experts.moe_block(h, w.router.weight, w.router.bias, experts, k)

            x = layer.decoder_layer(self.m, weights, x, positions, self.cos, self.sin, attend_for(index), mxfp4_moe)
        h = F.rms_norm(x[logit_rows], (self.m.hidden_size,), self.final_norm, layer.NORM_EPS)
        return F.linear(h, self.head)
