"""gpt-oss's experts through triton_kernels' `matmul_ogs`, with the Hopper layouts vLLM 0.33 gives MXFP4 weights.

What vLLM's `_swizzle_mxfp4` does on sm90, step for step: the checkpoint's blocks [E, out, in/2] and
scales [E, out, in/32] are transposed (no copy) so the quantised axis is dim 1, the scales padded to
a multiple of 4 groups along it (vLLM's patch for triton_kernels before 3.8), then swizzled into
`HopperMXValueLayout` and `HopperMXScaleLayout` (num_warps 8), and split-K is pinned to 1.
Biases are float32 (triton_kernels refuses bf16 ones: "Mismatched type for bias"). Activations are
bf16; the MMA is bf16 wgmma after the kernel upcasts each FP4 tile (Hopper has no FP4 tensor cores),
so its compute ceiling is the bf16 GEMM's.

Routing is triton_kernels' own (`routing`: top-k, softmax over the k, rows sorted by expert), as
vLLM and OpenAI's reference run it; gate-up gathers the tokens' rows, down scatters its rows back to
tokens weighted by the gates, summing each token's k rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton_kernels.swiglu
from triton_kernels.matmul_ogs import FlexCtx, FnSpecs, FusedActivation, PrecisionConfig, matmul_ogs
from triton_kernels.matmul_ogs_details import opt_flags
from triton_kernels.numerics import InFlexData
from triton_kernels.routing import GatherIndx, RoutingData, ScatterIndx, routing
from triton_kernels.tensor import FP4, Tensor, convert_layout, wrap_torch_tensor
from triton_kernels.tensor_details import layout

from dynamo_oss.engines.gptoss.forward.mxfp4 import CheckpointExperts, Mxfp4Weight

SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0
SCALE_NUM_WARPS = 8
KERNEL = "triton_kernels.matmul_ogs (vLLM 0.33.0's vendored copy), MXFP4 weights x bf16 activations, Hopper layouts"


def pin_hopper_options() -> None:
    """vLLM's sm90 constraint: no split-K."""
    opt_flags.update_opt_flags_constraints({"split_k": 1})


@dataclass(frozen=True)
class HopperWeight:
    """One projection of all experts, swizzled for Hopper, with its scales and float32 bias."""

    value: Tensor
    precision: PrecisionConfig
    bias: torch.Tensor  # [experts, out] float32

    @classmethod
    def from_checkpoint(cls, weight: Mxfp4Weight, bias: torch.Tensor) -> HopperWeight:
        experts, d_out, d_in = weight.shape
        values = weight.blocks.view(experts, d_out, d_in // 2).transpose(-2, -1)  # [E, in/2, out], in packed
        scales = F.pad(weight.scales, (0, -weight.scales.shape[-1] % 4)).transpose(-2, -1)
        value_layout, value_options = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        scale_layout, scale_options = layout.make_default_matmul_mxfp4_w_scale_layout(
            mx_axis=1, num_warps=SCALE_NUM_WARPS
        )
        value = convert_layout(wrap_torch_tensor(values, dtype=FP4), value_layout, **value_options)
        scale = convert_layout(wrap_torch_tensor(scales), scale_layout, **scale_options)
        precision = PrecisionConfig(weight_scale=scale, flex_ctx=FlexCtx(rhs_data=InFlexData()))
        return cls(value, precision, bias.float())


@dataclass(frozen=True)
class Experts:
    """All experts of one layer: gate-up (hidden -> 2 x intermediate, gate and up interleaved) and down."""

    gate_up: HopperWeight
    down: HopperWeight

    @classmethod
    def from_checkpoint(cls, w: CheckpointExperts) -> Experts:
        return cls(
            HopperWeight.from_checkpoint(w.gate_up, w.gate_up_bias), HopperWeight.from_checkpoint(w.down, w.down_bias)
        )


@dataclass(frozen=True)
class Route:
    """triton_kernels' routing of one batch: per-expert row counts and the gather/scatter indices."""

    data: RoutingData
    gather: GatherIndx
    scatter: ScatterIndx


def route(logits: torch.Tensor, k: int) -> Route:
    return Route(*routing(logits, k))


def gate_up(x: torch.Tensor, experts: Experts, r: Route) -> torch.Tensor:
    """[tokens, hidden] -> [tokens * k, 2 x intermediate], rows sorted by expert (no activation)."""
    w = experts.gate_up
    return matmul_ogs(x, w.value, w.bias, r.data, gather_indx=r.gather, precision_config=w.precision)


_SWIGLU = FusedActivation(
    FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit")), (SWIGLU_ALPHA, SWIGLU_LIMIT), 2
)


def gate_up_swiglu(x: torch.Tensor, experts: Experts, r: Route) -> torch.Tensor:
    """Gate-up with gpt-oss's clamped SwiGLU fused into the epilogue: [tokens * k, intermediate]."""
    w = experts.gate_up
    return matmul_ogs(
        x, w.value, w.bias, r.data, gather_indx=r.gather, precision_config=w.precision, fused_activation=_SWIGLU
    )


def down(h: torch.Tensor, experts: Experts, r: Route) -> torch.Tensor:
    """[tokens * k, intermediate] sorted rows -> [tokens, hidden]: each token's k rows, gate-weighted, summed."""
    w = experts.down
    return matmul_ogs(
        h, w.value, w.bias, r.data, scatter_indx=r.scatter, precision_config=w.precision, gammas=r.data.gate_scal
    )


def moe_block(x: torch.Tensor, router_weight: torch.Tensor, router_bias: torch.Tensor, experts: Experts, k: int):
    """The engine's MoE: bf16 router GEMM, triton routing, fused gate-up + SwiGLU, down with the weighted combine."""
    r = route(F.linear(x, router_weight, router_bias), k)
    return down(gate_up_swiglu(x, experts, r), experts, r)
