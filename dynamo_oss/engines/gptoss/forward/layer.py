"""One gpt-oss decoder layer over one packed token tensor, the way an engine batches a step.

A step's tokens are one tensor [tokens, hidden]. Every GEMM runs once over all of them (RMSNorm, QKV
projection, RoPE, output projection, router, the experts: their weights are read once per step); only
attention is per sequence, and it is passed in (`Attend`): the engine's paged attention over every row
of its step (gpu_runner), or `step_attention` over the benchmarks' contiguous caches (`Step`: first the
`chunk` tokens of one prompt, attending to themselves causally or in the 128-token window, after
`cached` tokens of the same prompt, then one token per decoding sequence at position context-1, over
its cache of `context` tokens, or of the last 128 in a window layer). The MoE is passed in too
(`MoeFn`): the MXFP4 experts of `experts.moe_block`, or a benchmark's bf16 or expert-parallel one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.forward import attention, dense
from dynamo_oss.engines.gptoss.rope import yarn_frequencies

NORM_EPS = 1e-5


@dataclass(frozen=True)
class LayerWeights:
    """Everything one decoder layer reads besides the KV cache and its experts."""

    norm1: torch.Tensor
    qkv: dense.Linear
    o: dense.Linear
    norm2: torch.Tensor
    router: dense.Linear
    sinks: torch.Tensor  # [query heads] float32

    @classmethod
    def random(cls, m: ModelShape, device: str) -> LayerWeights:
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
    """cos and sin [positions, head_dim / 2] in bf16: RoPE with YaRN's frequencies and concentration (rope.py)."""
    concentration, inverse = yarn_frequencies(m.head_dim)
    inv = torch.from_numpy(inverse).to(device=device, dtype=torch.float32)
    angles = torch.arange(positions, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return (angles.cos() * concentration).to(torch.bfloat16), (angles.sin() * concentration).to(torch.bfloat16)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [tokens, heads, head_dim]; cos/sin [tokens, head_dim / 2]: rotate halves (gpt-oss's neox style)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


MoeFn = Callable[[torch.Tensor, LayerWeights, int], torch.Tensor]  # (normed hidden, layer, top-k) -> output
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) after RoPE -> [tokens, Hq*D]


def decoder_layer(
    m: ModelShape,
    w: LayerWeights,
    x: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    attend: Attend,
    moe_fn: MoeFn,
) -> torch.Tensor:
    """One decoder layer over a step's packed tokens x [tokens, hidden] at `positions`; the new hidden states."""
    tokens = x.shape[0]
    hq, hkv, d = m.num_attention_heads, m.num_key_value_heads, m.head_dim
    h = F.rms_norm(x, (m.hidden_size,), w.norm1, NORM_EPS)
    qkv = w.qkv(h)
    cos_t, sin_t = cos[positions], sin[positions]
    q = apply_rope(qkv[:, : hq * d].view(tokens, hq, d), cos_t, sin_t)
    k = apply_rope(qkv[:, hq * d : (hq + hkv) * d].view(tokens, hkv, d), cos_t, sin_t)
    v = qkv[:, (hq + hkv) * d :].view(tokens, hkv, d)
    x = x + w.o(attend(q, k, v))
    h = F.rms_norm(x, (m.hidden_size,), w.norm2, NORM_EPS)
    return x + moe_fn(h, w, m.experts_per_token)


def step_attention(step: Step, sinks: torch.Tensor) -> Attend:
    """Attention over a benchmark Step's contiguous caches: its prompt chunk, then its decodes."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        c, b = step.chunk, step.batch
        hq, d = q.shape[1], q.shape[2]
        parts = []
        if c:
            if step.cached:  # the chunk's K and V go into its prompt's cache; it attends to the whole prompt so far
                step.chunk_k[0, :, step.cached :].copy_(k[:c].transpose(0, 1))
                step.chunk_v[0, :, step.cached :].copy_(v[:c].transpose(0, 1))
                keys, values = step.chunk_k, step.chunk_v
            else:
                keys, values = k[:c].transpose(0, 1).unsqueeze(0), v[:c].transpose(0, 1).unsqueeze(0)
            out = attention.compiled_sink_attention(
                q[:c].transpose(0, 1).unsqueeze(0), keys, values, sinks, step.chunk_mask
            )
            parts.append(out[0].transpose(0, 1).reshape(c, hq * d))
        if b:
            last = step.k_cache.shape[2] - 1  # the new token's own K and V go into the cache first
            step.k_cache[:, :, last].copy_(k[c:])
            step.v_cache[:, :, last].copy_(v[c:])
            parts.append(attention.decode_sink_attention(q[c:], step.k_cache, step.v_cache, sinks))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    return attend


def layer_forward(
    m: ModelShape, w: LayerWeights, step: Step, cos: torch.Tensor, sin: torch.Tensor, moe_fn: MoeFn
) -> torch.Tensor:
    """One decoder layer over a benchmark Step; returns the new hidden states [tokens, hidden]."""
    return decoder_layer(m, w, step.x, step.positions, cos, sin, step_attention(step, w.sinks), moe_fn)


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
        chunk_mask=attention.chunk_mask(chunk, cached, window, device) if chunk else None,
        cached=cached,
        chunk_k=chunk_k[:, :, : cached + chunk] if cached else None,
        chunk_v=chunk_v[:, :, : cached + chunk] if cached else None,
        k_cache=k_cache[:batch, :, :keys] if batch else None,
        v_cache=v_cache[:batch, :, :keys] if batch else None,
    )
