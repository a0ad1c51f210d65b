"""FLOPs and bytes of each gpt-oss building block, from the model's shapes, and the floor they imply.

Why: a measured time means little alone; over the time the card's measured ceilings allow
for the same work (METHOD.md's "two numbers") it says how much is left on the table.
Bytes are the fewest a kernel must move: each input read once, each output written once.
Cost and the ceilings they are set against are benchmarks.gpu.common.roofline.
"""

from __future__ import annotations

from benchmarks.gpu.common.roofline import Cost
from dynamo_oss.catalog.models import ModelShape

BF16_BYTES = 2


def linear(tokens: int, d_in: int, d_out: int, bias: bool = True) -> Cost:
    """y = x W^T + b for `tokens` rows."""
    elements = tokens * d_in + d_in * d_out + tokens * d_out + (d_out if bias else 0)
    return Cost(2.0 * tokens * d_in * d_out, BF16_BYTES * elements)


def qkv_projection(m: ModelShape, tokens: int) -> Cost:
    return linear(tokens, m.hidden_size, (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim)


def output_projection(m: ModelShape, tokens: int) -> Cost:
    return linear(tokens, m.num_attention_heads * m.head_dim, m.hidden_size)


def router(m: ModelShape, tokens: int) -> Cost:
    """The router's logits; top-k over 128 values per token is noise beside them."""
    return linear(tokens, m.hidden_size, m.num_experts)


def _grouped(routed_rows: float, touched: float, d_in: int, d_out: int, weight_bytes: float) -> Cost:
    """BF16 activations in and out; only the touched experts' weights are read, at `weight_bytes` a weight."""
    activations = BF16_BYTES * routed_rows * (d_in + d_out)
    return Cost(2.0 * routed_rows * d_in * d_out, activations + weight_bytes * touched * d_in * d_out)


def expert_gate_up(m: ModelShape, routed_rows: float, experts_touched: float, weight_bytes: float = BF16_BYTES) -> Cost:
    """Grouped GEMM hidden -> 2 x intermediate over the routed rows (MXFP4 weights: weight_bytes 4.25 / 8)."""
    return _grouped(routed_rows, experts_touched, m.hidden_size, 2 * m.intermediate_size, weight_bytes)


def expert_down(m: ModelShape, routed_rows: float, experts_touched: float, weight_bytes: float = BF16_BYTES) -> Cost:
    """Grouped GEMM intermediate -> hidden over the routed rows."""
    return _grouped(routed_rows, experts_touched, m.intermediate_size, m.hidden_size, weight_bytes)


def attended_pairs(queries: int, window: int | None) -> int:
    """(query, key) pairs a causal prefill of `queries` tokens scores, with an optional sliding window."""
    if window is None or queries <= window:
        return queries * (queries + 1) // 2
    return window * (window + 1) // 2 + (queries - window) * window


def attention_prefill(m: ModelShape, tokens: int, window: int | None) -> Cost:
    """Causal self-attention of one `tokens`-long prompt: QK^T and PV, 2 FLOPs per multiply-add each."""
    flops = 4.0 * m.num_attention_heads * m.head_dim * attended_pairs(tokens, window)
    elements = tokens * m.head_dim * (2 * m.num_attention_heads + 2 * m.num_key_value_heads)
    return Cost(flops, BF16_BYTES * elements)


def attention_decode(m: ModelShape, batch: int, context: int) -> Cost:
    """One new token per sequence over `context` cached tokens: reading K and V dominates."""
    flops = 4.0 * m.num_attention_heads * m.head_dim * batch * context
    elements = batch * (2 * m.num_key_value_heads * context * m.head_dim + 2 * m.num_attention_heads * m.head_dim)
    return Cost(flops, BF16_BYTES * elements)
