"""The dense pieces of a gpt-oss layer: QKV projection, output projection and the router, bf16 with bias.

Each is one cuBLAS GEMM through F.linear; the router adds top-4 and a softmax over the chosen
logits, which is how gpt-oss picks experts (moe.route does the same before dispatch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dynamo_oss.catalog.models import ModelShape


@dataclass(frozen=True)
class Linear:
    weight: torch.Tensor  # [out, in], nn.Linear's layout
    bias: torch.Tensor  # [out]

    @classmethod
    def random(cls, d_in: int, d_out: int, device: str) -> Linear:
        weight = torch.randn(d_out, d_in, device=device, dtype=torch.bfloat16).mul_(d_in**-0.5)
        return cls(weight, torch.randn(d_out, device=device, dtype=torch.bfloat16))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def qkv_projection(m: ModelShape, device: str) -> Linear:
    return Linear.random(m.hidden_size, (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim, device)


def output_projection(m: ModelShape, device: str) -> Linear:
    return Linear.random(m.num_attention_heads * m.head_dim, m.hidden_size, device)


def router(m: ModelShape, device: str) -> Linear:
    return Linear.random(m.hidden_size, m.num_experts, device)


def pick_experts(router_layer: Linear, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits, top-k experts per token and their softmax weights."""
    top_logits, experts = router_layer(x).topk(k, dim=-1)
    return top_logits.softmax(dim=-1), experts
