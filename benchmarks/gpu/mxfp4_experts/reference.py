"""Float32 references for the MXFP4 expert kernels, from the checkpoint's exactly dequantised weights.

Why independent of triton_kernels: the check must catch a wrong layout, nibble order or scale
placement, so the reference reads the checkpoint format (checkpoint.Mxfp4Weight.dequantise) and
loops over experts with plain matmuls; it takes from the kernel's routing only which rows go where.
"""

from __future__ import annotations

import torch

from benchmarks.gpu.kernels.moe import swiglu
from dynamo_oss.engines.gptoss.forward.experts import Route
from dynamo_oss.engines.gptoss.forward.mxfp4 import CheckpointExperts, Mxfp4Weight


def grouped(rows: torch.Tensor, expert_of_row: torch.Tensor, weight: Mxfp4Weight, bias: torch.Tensor) -> torch.Tensor:
    """rows [R, in] through each row's expert: [R, out] float32."""
    out = torch.empty(rows.shape[0], weight.shape[1], device=rows.device, dtype=torch.float32)
    for expert in expert_of_row.unique().tolist():
        mask = expert_of_row == expert
        out[mask] = rows[mask].float() @ weight.dequantise(expert).T + bias[expert].float()
    return out


def sorted_rows(r: Route, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each expert-sorted row of the kernel's routing: its token, its expert and its gate."""
    token = r.gather.src_indx.long() // k
    ends = r.data.expt_hist.long().cumsum(0)
    expert = torch.searchsorted(ends, torch.arange(token.numel(), device=token.device), right=True)
    return token, expert, r.data.gate_scal.float()


def gate_up(x: torch.Tensor, w: CheckpointExperts, r: Route, k: int) -> torch.Tensor:
    token, expert, _ = sorted_rows(r, k)
    return grouped(x[token], expert, w.gate_up, w.gate_up_bias)


def down(h: torch.Tensor, w: CheckpointExperts, r: Route, k: int, tokens: int) -> torch.Tensor:
    token, expert, gate = sorted_rows(r, k)
    rows = grouped(h, expert, w.down, w.down_bias) * gate[:, None]
    return torch.zeros(tokens, rows.shape[1], device=h.device).index_add_(0, token, rows)


def moe_block(x: torch.Tensor, logits: torch.Tensor, w: CheckpointExperts, k: int) -> torch.Tensor:
    """The whole block from the router's logits: torch top-k and softmax, SwiGLU in float32, weighted sum."""
    top = logits.float().topk(k, dim=-1)
    gates = top.values.softmax(dim=-1).flatten()
    expert = top.indices.flatten()
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)
    hidden = swiglu(grouped(x[token], expert, w.gate_up, w.gate_up_bias))
    rows = grouped(hidden, expert, w.down, w.down_bias) * gates[:, None]
    return torch.zeros(x.shape[0], rows.shape[1], device=x.device).index_add_(0, token, rows)
