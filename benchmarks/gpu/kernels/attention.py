"""Yardsticks and references for gpt-oss attention (the kernels themselves are the engine's:
dynamo_oss/engines/gptoss/forward/attention.py, FlexAttention and flash with sinks).

- `sdpa`: PyTorch's fused attention without sinks, the library yardstick the kernels are timed beside;
- `random_qkv`: inputs at gpt-oss's shapes (64 query heads over 8 KV heads of 64);
- `reference`: float32 attention with materialised scores, sinks and the window, what every kernel must equal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dynamo_oss.catalog.models import ModelShape


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
