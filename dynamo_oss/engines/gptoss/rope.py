"""gpt-oss's rotary embedding: RoPE whose frequencies YaRN rescales by parts and whose attention it sharpens
(its concentration), as OpenAI's reference computes them (gpt_oss/torch/model.py, RotaryEmbedding) from the
published config (rope_theta, rope_scaling; dynamo_oss/assets/config.py). Plain numbers here, so the table
the forward pass turns into a tensor is tested without a GPU.

Dimensions that turn fast (more than beta_fast turns over the original 4,096-token context) keep their
frequency, those that turn slower than beta_slow turns are divided by the factor (32), and a ramp blends the
ones between; cos and sin are scaled by 0.1 ln(factor) + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamo_oss.assets.config import ROPE_THETA, YARN_BETA_FAST, YARN_BETA_SLOW, YARN_FACTOR, YARN_ORIGINAL_CONTEXT


@dataclass(frozen=True)
class Yarn:
    theta: float = ROPE_THETA
    factor: float = YARN_FACTOR
    original_context: int = YARN_ORIGINAL_CONTEXT
    beta_fast: float = YARN_BETA_FAST  # the reference's ntk_beta
    beta_slow: float = YARN_BETA_SLOW  # its ntk_alpha


GPT_OSS_YARN = Yarn()


def yarn_frequencies(head_dim: int, yarn: Yarn = GPT_OSS_YARN) -> tuple[float, np.ndarray]:
    """The concentration cos and sin are scaled by, and the inverse frequency of each of head_dim / 2 pairs."""
    freq = yarn.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if yarn.factor <= 1.0:
        return 1.0, 1.0 / freq
    half = head_dim / 2

    def turns_at(beta: float) -> float:  # the pair index at which a dimension turns beta times over the context
        return half * math.log(yarn.original_context / (beta * 2 * math.pi)) / math.log(yarn.theta)

    low, high = turns_at(yarn.beta_fast), turns_at(yarn.beta_slow)
    kept = 1 - np.clip((np.arange(half) - low) / (high - low), 0.0, 1.0)  # 1: the frequency kept, 0: divided
    inverse = (1.0 / (yarn.factor * freq)) * (1 - kept) + (1.0 / freq) * kept
    return 0.1 * math.log(yarn.factor) + 1.0, inverse
