"""gpt-oss's mixture of experts at its real shapes: top-4 routing over 128 experts, two grouped GEMMs.

The expert GEMMs go through `torch._grouped_mm(a, b, offs=...)` (PyTorch 2.8 and later): `a` holds
the routed rows sorted by expert, [rows, K]; `b` is [experts, K, N], here a transposed view of
weights stored [experts, N, K] like nn.Linear's (the layout torchtitan passes); `offs` is int32,
the end row of each expert's group (a cumulative sum of counts, empty groups allowed). On sm90 in
bf16 it runs a CUTLASS grouped GEMM with no host sync, so it can be graph-captured.
Weights are bf16 (the checkpoint's experts are MXFP4: a quarter of these bytes; bf16 is what
PyTorch can multiply here). Expert biases are left out: each adds one row-broadcast add.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.forward.layer import LayerWeights, MoeFn

SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702


@dataclass(frozen=True)
class Routing:
    """Where each token's top-k rows go, sorted by expert as the grouped GEMM wants them."""

    token_of_row: torch.Tensor  # [tokens * k] source token of each routed row
    gate_of_row: torch.Tensor  # [tokens * k] its routing weight
    offsets: torch.Tensor  # [experts] int32 end row of each expert's group


@dataclass(frozen=True)
class Experts:
    """All experts of one layer: fused gate/up projection and down projection."""

    gate_up: torch.Tensor  # [experts, 2 * intermediate, hidden]
    down: torch.Tensor  # [experts, hidden, intermediate]

    @classmethod
    def random(cls, m: ModelShape, device: str) -> Experts:
        def weight(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device=device, dtype=torch.bfloat16).mul_(0.02)

        return cls(
            gate_up=weight(m.num_experts, 2 * m.intermediate_size, m.hidden_size),
            down=weight(m.num_experts, m.hidden_size, m.intermediate_size),
        )


def route(logits: torch.Tensor, k: int) -> Routing:
    """gpt-oss routing: top-k logits, softmax over those k; rows sorted by expert, counted without a host sync."""
    top_logits, experts = logits.topk(k, dim=-1)
    gates = top_logits.softmax(dim=-1, dtype=torch.float32).to(logits.dtype)
    flat = experts.flatten()
    order = flat.argsort(stable=True)
    counts = torch.zeros(logits.shape[-1], dtype=torch.int32, device=logits.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    return Routing(
        token_of_row=order // k,
        gate_of_row=gates.flatten()[order],
        offsets=counts.cumsum(0, dtype=torch.int32),
    )


def experts_touched(routing: Routing) -> int:
    """Experts with at least one row: only their weights must be read."""
    counts = torch.diff(routing.offsets, prepend=routing.offsets.new_zeros(1))
    return int((counts > 0).sum())


def gate_up(experts: Experts, rows: torch.Tensor, routing: Routing) -> torch.Tensor:
    return torch._grouped_mm(rows, experts.gate_up.transpose(-2, -1), offs=routing.offsets)


def down(experts: Experts, rows: torch.Tensor, routing: Routing) -> torch.Tensor:
    return torch._grouped_mm(rows, experts.down.transpose(-2, -1), offs=routing.offsets)


def swiglu(fused: torch.Tensor) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU over interleaved gate/up columns."""
    gate = fused[..., ::2].clamp(max=SWIGLU_LIMIT)
    up = fused[..., 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
    return (up + 1) * gate * torch.sigmoid(SWIGLU_ALPHA * gate)


def moe_block(
    x: torch.Tensor, router_weight: torch.Tensor, router_bias: torch.Tensor, experts: Experts, k: int
) -> torch.Tensor:
    """The whole block: router, dispatch (gather), both GEMMs and the activation, weighted combine."""
    routing = route(F.linear(x, router_weight, router_bias), k)
    rows = x[routing.token_of_row]
    hidden = swiglu(gate_up(experts, rows, routing))
    out = down(experts, hidden, routing) * routing.gate_of_row[:, None]
    return torch.zeros_like(x).index_add_(0, routing.token_of_row, out)


def local_moe(experts: Experts) -> MoeFn:
    """All of a layer's experts on this GPU in bf16, as the layer's MoE: moe_block over every token of the step."""

    def run(x: torch.Tensor, w: LayerWeights, k: int) -> torch.Tensor:
        return moe_block(x, w.router.weight, w.router.bias, experts, k)

    return run


def loop_reference(experts: Experts, rows: torch.Tensor, routing: Routing, which: str) -> torch.Tensor:
    """One float32 matmul per expert: what the grouped GEMM must equal."""
    weights = experts.gate_up if which == "gate_up" else experts.down
    ends = routing.offsets.tolist()
    starts = [0, *ends[:-1]]
    return torch.cat([rows[s:e].float() @ weights[i].float().T for i, (s, e) in enumerate(zip(starts, ends))])
