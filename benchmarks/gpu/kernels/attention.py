"""gpt-oss attention: 64 query heads over 8 KV heads of 64 dims, causal, layers alternating full
attention and a 128-token sliding window, each head with a learned sink logit.

Kernel: FlexAttention, compiled (torch.compile, static shapes), with a block mask for causal or
sliding-window masking, so window layers skip the blocks they never see; GQA via enable_gqa.
Sinks: a sink adds exp(s_h) to each query's softmax denominator and contributes no value, so
with the log-sum-exp L that FlexAttention returns, the exact output is out * sigmoid(L - s_h);
that rescale is compiled into the same function and timed with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

from dynamo_oss.catalog.models import ModelShape


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


def sink_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, block_mask: BlockMask | None
) -> torch.Tensor:
    """q [B, Hq, S, D], k and v [B, Hkv, T, D], sinks [Hq]; block_mask None attends to every key."""
    out, aux = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True, return_aux=AuxRequest(lse=True))
    return out * torch.sigmoid(aux.lse - sinks[None, :, None]).unsqueeze(-1).to(out.dtype)


compiled_sink_attention = torch.compile(sink_attention, dynamic=False)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """PyTorch's fused attention, no sinks (SDPA returns no log-sum-exp): the library yardstick.
    Fused backends only: the math fallback would materialise all scores (128 GB at 32k)."""
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def random_qkv(m: ModelShape, batch: int, queries: int, keys: int, device: str) -> tuple[torch.Tensor, ...]:
    def t(heads: int, length: int) -> torch.Tensor:
        return torch.randn(batch, heads, length, m.head_dim, device=device, dtype=torch.bfloat16)

    return t(m.num_attention_heads, queries), t(m.num_key_value_heads, keys), t(m.num_key_value_heads, keys)


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None, window: int | None
) -> torch.Tensor:
    """Float32, materialised scores; the queries are the last S of the T keys' positions."""
    groups = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(groups, dim=1) for x in (k, v))
    scores = q.float() @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    queries, keys = q.shape[2], k.shape[2]
    pos_q = torch.arange(keys - queries, keys, device=q.device)[:, None]
    pos_k = torch.arange(keys, device=q.device)[None, :]
    allowed = pos_q >= pos_k
    if window is not None:
        allowed &= pos_q - pos_k < window
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        sink_column = sinks.float()[None, :, None, None].expand(*scores.shape[:3], 1)
        scores = torch.cat([scores, sink_column], dim=-1)
    probs = scores.softmax(dim=-1)[..., :keys]
    return probs @ v
