"""One gpt-oss-120b decoder layer over one packed token tensor, the way an engine batches a step.

The step's tokens are one tensor [tokens, hidden]: first the `chunk` tokens of one prompt being
prefilled (positions 0 .. chunk-1, attending to themselves, causally or in the 128-token window),
then one token per decoding sequence (`batch` of them, each at position context-1, attending to
its KV cache of `context` tokens, or of the last 128 in a window layer). Every GEMM runs once over
all tokens (RMSNorm, QKV projection, RoPE, output projection, router, the experts: their weights
are read once per step); only attention is per sequence, as TensorRT-LLM's attention op does it:
one kernel for the context (prefill) requests and one for the generation (decode) requests of the
same step, each over all of its sequences. Nothing is looped per sequence.

- Prefill attention: FlexAttention with sinks and a causal or sliding-window block mask
  (`benchmarks.gpu.kernels.attention`, compiled, static shapes).
- Decode attention with sinks: PyTorch's flash-attention kernel (`aten._scaled_dot_product_flash_attention`,
  which returns the log-sum-exp the sink rescale needs) with the 8 query heads of each KV head packed
  as 8 queries of one (sequence, KV head) pair (flash-decoding's GQA packing). FlexAttention's own
  decode kernel runs at 2-26% of the memory floor below batch 64 (kernels/RESULTS.md) and fails at
  batch 256 x 32k, so it is only the fallback (`DECODE_KERNEL`).
- MoE: `benchmarks.gpu.kernels.moe.moe_block` (router, top-4 of 128, `torch._grouped_mm` experts,
  clamped SwiGLU, weighted combine) over all tokens at once, or any function of the same signature
  (the expert-parallel one of benchmarks/gpu/adp_lockstep).

torch is imported lazily by the callers' process (this module imports it at the top, so import it
only where torch is installed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmarks.gpu.kernels import attention, dense, moe
from dynamo_oss.catalog.models import ModelShape

ROPE_THETA = 150_000.0  # gpt-oss's rope_theta (YaRN scaling changes the table, not the cost)
NORM_EPS = 1e-5

# "flash" (default) or "flex": set by the runner when the flash kernel fails its check.
DECODE_KERNEL = {"name": "flash"}


@dataclass(frozen=True)
class LayerWeights:
    """Everything one decoder layer reads besides the KV cache; experts may be this rank's share."""

    norm1: torch.Tensor
    qkv: dense.Linear
    o: dense.Linear
    norm2: torch.Tensor
    router: dense.Linear
    sinks: torch.Tensor  # [query heads] float32
    experts: moe.Experts

    @classmethod
    def random(cls, m: ModelShape, device: str, experts: moe.Experts | None = None) -> LayerWeights:
        """Random weights at the real shapes. Biases are small (std BIAS_STD): `dense.Linear.random`'s
        unit-variance biases add the same vector to every token, which skews top-4 routing onto ~50 of
        the 128 experts (seen here: 52 experts touched by a 16k-token chunk); with small biases every
        token routes independently and nearly uniformly, as the model's `touched` formula assumes and
        a router trained for load balance does."""
        return cls(
            norm1=1 + 0.1 * torch.randn(m.hidden_size, device=device, dtype=torch.bfloat16),
            qkv=_small_bias(dense.qkv_projection(m, device)),
            o=_small_bias(dense.output_projection(m, device)),
            norm2=1 + 0.1 * torch.randn(m.hidden_size, device=device, dtype=torch.bfloat16),
            router=_small_bias(dense.router(m, device)),
            sinks=torch.randn(m.num_attention_heads, device=device),
            experts=experts if experts is not None else moe.Experts.random(m, device),
        )


BIAS_STD = 0.02


def _small_bias(linear: dense.Linear) -> dense.Linear:
    return dense.Linear(linear.weight, linear.bias.mul_(BIAS_STD))


@dataclass(frozen=True)
class Step:
    """The tokens of one step and what their attention reads. chunk or batch may be 0."""

    x: torch.Tensor  # [chunk + batch, hidden]
    positions: torch.Tensor  # [chunk + batch] int64
    chunk: int
    batch: int
    window: int | None  # None: a full-attention layer; 128: a sliding-window layer
    chunk_mask: object | None  # FlexAttention BlockMask for the chunk (None when chunk == 0)
    cached: int  # prompt tokens before the chunk (0: the prompt's first chunk)
    chunk_k: torch.Tensor | None  # [1, kv heads, cached + chunk, head_dim]: the prompt's KV when cached > 0
    chunk_v: torch.Tensor | None
    k_cache: torch.Tensor | None  # [batch, kv heads, keys, head_dim] (views fine); keys = context or 128
    v_cache: torch.Tensor | None


def rope_table(m: ModelShape, positions: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, head_dim / 2] in bf16 (plain RoPE; YaRN only rescales the table)."""
    half = m.head_dim // 2
    inv = ROPE_THETA ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    angles = torch.arange(positions, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [tokens, heads, head_dim]; cos/sin [tokens, head_dim / 2]: rotate halves (gpt-oss's neox style)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def decode_sink_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, sinks: torch.Tensor
) -> torch.Tensor:
    """q [batch, query heads, head_dim] (one query per sequence) over caches [batch, kv heads, keys, head_dim].

    Returns [batch, query heads * head_dim]. Exact sinks: out * sigmoid(lse - s_h).
    """
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    if DECODE_KERNEL["name"] == "flex":
        out = attention.compiled_sink_attention(q[:, :, None, :], k_cache, v_cache, sinks, None)
        return out.reshape(batch, heads * dim)
    packed = q.reshape(batch, kv_heads, group, dim)  # query heads 8j..8j+7 share KV head j (GQA order)
    result = torch.ops.aten._scaled_dot_product_flash_attention(packed, k_cache, v_cache, 0.0, False, False)
    out, lse = result[0], result[1][..., :group]
    scale = torch.sigmoid(lse - sinks.view(kv_heads, group)[None]).unsqueeze(-1).to(out.dtype)
    return (out * scale).reshape(batch, heads * dim)


MoeFn = Callable[[torch.Tensor, LayerWeights, int], torch.Tensor]


def local_moe(h: torch.Tensor, w: LayerWeights, k: int) -> torch.Tensor:
    """All experts on this GPU: the kernels' eager MoE block over every token of the step."""
    return moe.moe_block(h, w.router.weight, w.router.bias, w.experts, k)


def layer_forward(
    m: ModelShape, w: LayerWeights, step: Step, cos: torch.Tensor, sin: torch.Tensor, moe_fn: MoeFn = local_moe
) -> torch.Tensor:
    """One decoder layer over the step's packed tokens; returns the new hidden states [tokens, hidden]."""
    x, c, b = step.x, step.chunk, step.batch
    tokens = x.shape[0]
    hq, hkv, d = m.num_attention_heads, m.num_key_value_heads, m.head_dim
    h = F.rms_norm(x, (m.hidden_size,), w.norm1, NORM_EPS)
    qkv = w.qkv(h)
    cos_t, sin_t = cos[step.positions], sin[step.positions]
    q = apply_rope(qkv[:, : hq * d].view(tokens, hq, d), cos_t, sin_t)
    k = apply_rope(qkv[:, hq * d : (hq + hkv) * d].view(tokens, hkv, d), cos_t, sin_t)
    v = qkv[:, (hq + hkv) * d :].view(tokens, hkv, d)
    parts = []
    if c:
        if step.cached:  # the chunk's K and V go into its prompt's cache; it attends to the whole prompt so far
            step.chunk_k[0, :, step.cached :].copy_(k[:c].transpose(0, 1))
            step.chunk_v[0, :, step.cached :].copy_(v[:c].transpose(0, 1))
            keys, values = step.chunk_k, step.chunk_v
        else:
            keys, values = k[:c].transpose(0, 1).unsqueeze(0), v[:c].transpose(0, 1).unsqueeze(0)
        out = attention.compiled_sink_attention(
            q[:c].transpose(0, 1).unsqueeze(0), keys, values, w.sinks, step.chunk_mask
        )
        parts.append(out[0].transpose(0, 1).reshape(c, hq * d))
    if b:
        last = step.k_cache.shape[2] - 1  # the new token's own K and V go into the cache first
        step.k_cache[:, :, last].copy_(k[c:])
        step.v_cache[:, :, last].copy_(v[c:])
        parts.append(decode_sink_attention(q[c:], step.k_cache, step.v_cache, w.sinks))
    attn = parts[0] if len(parts) == 1 else torch.cat(parts)
    x = x + w.o(attn)
    h = F.rms_norm(x, (m.hidden_size,), w.norm2, NORM_EPS)
    return x + moe_fn(h, w, m.experts_per_token)


@functools.cache
def after_prefix(cached: int, window: int | None = None) -> Callable:
    """Causal mask (within `window` keys, if given) of a chunk whose queries sit after `cached` keys of the same prompt."""

    def mask(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return q + cached >= kv

    def windowed(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (q + cached >= kv) & (q + cached - kv < window)

    return mask if window is None else windowed


def chunk_mask(chunk: int, cached: int, window: int | None, device: str) -> object:
    if not cached:
        return attention.prefill_mask(chunk, window, device)
    return attention.create_block_mask(after_prefix(cached, window), None, None, chunk, cached + chunk, device=device)


def positions_for(chunk: int, batch: int, context: int, device: str, cached: int = 0) -> torch.Tensor:
    """Chunk tokens at cached .. cached+chunk-1, decode tokens at context-1."""
    return torch.cat(
        [
            torch.arange(cached, cached + chunk, device=device, dtype=torch.int64),
            torch.full((batch,), max(context - 1, 0), device=device, dtype=torch.int64),
        ]
    )


def make_step(
    x: torch.Tensor,
    chunk: int,
    batch: int,
    context: int,
    window: int | None,
    k_cache: torch.Tensor | None,
    v_cache: torch.Tensor | None,
    device: str,
    cached: int = 0,
    chunk_k: torch.Tensor | None = None,
    chunk_v: torch.Tensor | None = None,
) -> Step:
    """A Step over `x` (chunk + batch rows). Caches are [>=batch, kv heads, >=keys, head_dim]; the
    decode sequences read `context` keys in a full layer and the last `window` in a window layer.
    With `cached` > 0 the chunk follows that many prompt tokens whose K and V are in chunk_k/chunk_v
    ([1, kv heads, >= cached + chunk, head_dim])."""
    keys = context if window is None else min(context, window)
    return Step(
        x=x,
        positions=positions_for(chunk, batch, context, device, cached),
        chunk=chunk,
        batch=batch,
        window=window,
        chunk_mask=chunk_mask(chunk, cached, window, device) if chunk else None,
        cached=cached,
        chunk_k=chunk_k[:, :, : cached + chunk] if cached else None,
        chunk_v=chunk_v[:, :, : cached + chunk] if cached else None,
        k_cache=k_cache[:batch, :, :keys] if batch else None,
        v_cache=v_cache[:batch, :, :keys] if batch else None,
    )
