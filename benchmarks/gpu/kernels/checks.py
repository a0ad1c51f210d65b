"""Correct first: each timed kernel against a float32 reference on fresh random inputs.

Why: a fast wrong kernel (sinks applied with the wrong sign, groups misaligned) would make every
timing meaningless. Errors are benchmarks.gpu.common.checks.relative_error.
"""

from __future__ import annotations

import torch

from benchmarks.gpu.common.checks import relative_error
from benchmarks.gpu.kernels import attention, moe
from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.forward import attention as sink_attention
from dynamo_oss.engines.gptoss.forward.dense import router


def check_experts(m: ModelShape, device: str, tokens: int = 64) -> dict[str, float]:
    experts = moe.Experts.random(m, device)
    x = torch.randn(tokens, m.hidden_size, device=device, dtype=torch.bfloat16)
    routing = moe.route(router(m, device)(x), m.experts_per_token)
    rows = x[routing.token_of_row]
    hidden = moe.swiglu(moe.gate_up(experts, rows, routing))
    return {
        "grouped_mm gate_up": relative_error(
            moe.gate_up(experts, rows, routing), moe.loop_reference(experts, rows, routing, "gate_up")
        ),
        "grouped_mm down": relative_error(
            moe.down(experts, hidden, routing), moe.loop_reference(experts, hidden, routing, "down")
        ),
    }


def check_attention(m: ModelShape, device: str, tokens: int = 640, decode_batch: int = 2) -> dict[str, float]:
    sinks = torch.randn(m.num_attention_heads, device=device)
    errors = {}
    for window in (None, m.sliding_window):
        q, k, v = attention.random_qkv(m, 1, tokens, tokens, device)
        out = sink_attention.compiled_sink_attention(
            q, k, v, sinks, sink_attention.prefill_mask(tokens, window, device)
        )
        errors[f"prefill flex+sinks window={window}"] = relative_error(out, attention.reference(q, k, v, sinks, window))
    q, k, v = attention.random_qkv(m, decode_batch, 1, tokens, device)
    out = sink_attention.compiled_sink_attention(q, k, v, sinks, None)
    errors["decode flex+sinks"] = relative_error(out, attention.reference(q, k, v, sinks, None))
    q, k, v = attention.random_qkv(m, 1, tokens, tokens, device)
    errors["prefill sdpa causal"] = relative_error(
        attention.sdpa(q, k, v, causal=True), attention.reference(q, k, v, None, None)
    )
    q, k, v = attention.random_qkv(m, decode_batch, 1, tokens, device)
    errors["decode sdpa"] = relative_error(
        attention.sdpa(q, k, v, causal=False), attention.reference(q, k, v, None, None)
    )
    return errors


def run_checks(m: ModelShape, device: str) -> dict[str, float]:
    return {**check_experts(m, device), **check_attention(m, device)}
