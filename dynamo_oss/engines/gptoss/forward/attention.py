"""gpt-oss attention: 64 query heads over 8 KV heads of 64 dims, causal, layers alternating full
attention and a 128-token sliding window, each head with a learned sink logit.

Sinks: a sink adds exp(s_h) to each query's softmax denominator and contributes no value, so with the
log-sum-exp L a kernel returns, the exact output is out * sigmoid(L - s_h); every path here rescales so.

Three kernels, by what the K/V looks like:
- prompt chunks over contiguous K/V (the benchmarks' layout): FlexAttention, compiled (static shapes),
  with a causal or sliding-window block mask, so window layers skip the blocks they never see;
- decode over contiguous caches of one length: PyTorch's flash kernel
  (`aten._scaled_dot_product_flash_attention`, which returns the log-sum-exp) with the 8 query heads of a
  KV head packed as 8 queries (flash-decoding's GQA packing); FlexAttention's own decode kernel is the
  fallback (`DECODE_KERNEL`);
- the engine's paged cache (`paged_attention`): each row's keys gathered from the pool through its
  block table into one packed K/V, then one varlen flash call (`aten._flash_attention_forward`) for
  every row of the step, prompt chunks and decodes alike: causal aligned to each row's last key, the
  window as flash's left window. The gather is a copy a paged kernel would not make: correct first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

# "flash" (default) or "flex": set by a benchmark when the flash kernel fails its check.
DECODE_KERNEL = {"name": "flash"}
# "flash" (default: one varlen call) or "masked" (float32, row by row): set by the runner from its check.
PAGED_KERNEL = {"name": "flash"}


def causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


@functools.cache
def sliding_window(window: int) -> Callable:
    """One mask function per window size, so compiled kernels are not re-traced for a new closure."""

    def sliding(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (q >= kv) & (q - kv < window)

    return sliding


def prefill_mask(tokens: int, window: int | None, device: str) -> BlockMask:
    """Causal (window None) or sliding-window block mask for one prompt of `tokens` tokens."""
    mask_mod = causal if window is None else sliding_window(window)
    return create_block_mask(mask_mod, None, None, tokens, tokens, device=device)


@functools.cache
def after_prefix(cached: int, window: int | None = None) -> Callable:
    """Causal mask (within `window` keys, if given) of a chunk whose queries sit after `cached` keys of the same prompt."""

    def mask(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return q + cached >= kv

    def windowed(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (q + cached >= kv) & (q + cached - kv < window)

    return mask if window is None else windowed


def chunk_mask(chunk: int, cached: int, window: int | None, device: str) -> BlockMask:
    if not cached:
        return prefill_mask(chunk, window, device)
    return create_block_mask(after_prefix(cached, window), None, None, chunk, cached + chunk, device=device)


def sink_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, block_mask: BlockMask | None
) -> torch.Tensor:
    """q [B, Hq, S, D], k and v [B, Hkv, T, D], sinks [Hq]; block_mask None attends to every key."""
    out, aux = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True, return_aux=AuxRequest(lse=True))
    return out * torch.sigmoid(aux.lse - sinks[None, :, None]).unsqueeze(-1).to(out.dtype)


compiled_sink_attention = torch.compile(sink_attention, dynamic=False)


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
        out = compiled_sink_attention(q[:, :, None, :], k_cache, v_cache, sinks, None)
        return out.reshape(batch, heads * dim)
    packed = q.reshape(batch, kv_heads, group, dim)  # query heads 8j..8j+7 share KV head j (GQA order)
    result = torch.ops.aten._scaled_dot_product_flash_attention(packed, k_cache, v_cache, 0.0, False, False)
    out, lse = result[0], result[1][..., :group]
    scale = torch.sigmoid(lse - sinks.view(kv_heads, group)[None]).unsqueeze(-1).to(out.dtype)
    return (out * scale).reshape(batch, heads * dim)


def paged_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    rows: list[tuple[int, int, int, int]],
    window: int | None,
    sinks: torch.Tensor,
) -> torch.Tensor:
    """Every row of a step at once. q [tokens, Hq, D]: row r's queries at cu_q[r]..cu_q[r+1]-1, its last
    query at the position of its last key; keys and values [keys, Hkv, D]: row r's at cu_k[r]..cu_k[r+1]-1,
    consecutive positions (gathered through its block table); `rows` the same bounds on the host. A query
    reads the keys at or before its own position, and within `window` of it if given. Returns [tokens, Hq * D]."""
    if PAGED_KERNEL["name"] == "masked":
        return masked_paged_attention(q, keys, values, rows, window, sinks)
    left = -1 if window is None else window - 1
    max_q = max(q_end - q_start for q_start, q_end, _, _ in rows)
    max_k = max(k_end - k_start for _, _, k_start, k_end in rows)
    out, lse, *_ = torch.ops.aten._flash_attention_forward(
        q, keys, values, cu_q, cu_k, max_q, max_k, 0.0, True, False, window_size_left=left, window_size_right=0
    )
    scale = torch.sigmoid(lse.transpose(0, 1) - sinks[None, :]).unsqueeze(-1).to(out.dtype)  # lse [Hq, tokens]
    return (out * scale).flatten(1)


def masked_paged_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    rows: list[tuple[int, int, int, int]],
    window: int | None,
    sinks: torch.Tensor,
) -> torch.Tensor:
    """paged_attention in float32 with the scores materialised, one row at a time: the check of the varlen
    kernel, and its stand-in where that kernel fails the check."""
    hq, hkv = q.shape[1], keys.shape[1]
    out = torch.empty(q.shape[0], hq * q.shape[2], device=q.device, dtype=q.dtype)
    for q_start, q_end, k_start, k_end in rows:
        queries, count = q[q_start:q_end].float().transpose(0, 1), k_end - k_start  # [Hq, n, D]
        k = keys[k_start:k_end].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)  # [Hq, count, D]
        v = values[k_start:k_end].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        scores = queries @ k.transpose(-2, -1) * q.shape[2] ** -0.5
        pos_q = torch.arange(count - (q_end - q_start), count, device=q.device)[:, None]
        pos_k = torch.arange(count, device=q.device)[None, :]
        allowed = pos_q >= pos_k
        if window is not None:
            allowed &= pos_q - pos_k < window
        scores = scores.masked_fill(~allowed, float("-inf"))
        sink = sinks.float()[:, None, None].expand(hq, q_end - q_start, 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :count]
        out[q_start:q_end] = (probs @ v).transpose(0, 1).flatten(1).to(q.dtype)
    return out
