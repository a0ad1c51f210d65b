"""gpt-oss's YaRN frequencies (engines/gptoss/rope.py), by what YaRN means rather than by its formula again:
the fast dimensions keep RoPE's frequency, the slow ones are divided by the factor, the blend between is
monotone, and the boundaries are where a dimension turns beta_fast and beta_slow times over the original
context. (Against OpenAI's reference on a GPU: benchmarks/gpu/serving/rope_check.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.rope import GPT_OSS_YARN, Yarn, yarn_frequencies

HEAD_DIM = GPT_OSS_120B.head_dim
PLAIN = 1.0 / GPT_OSS_YARN.theta ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)


def turns(inverse: np.ndarray) -> np.ndarray:
    """How many times each pair turns over the original context."""
    return GPT_OSS_YARN.original_context * inverse / (2 * math.pi)


def test_fast_dimensions_keep_rope_s_frequency_and_slow_ones_are_divided_by_the_factor() -> None:
    concentration, inverse = yarn_frequencies(HEAD_DIM)
    fast = turns(PLAIN) >= GPT_OSS_YARN.beta_fast
    slow = turns(PLAIN) <= GPT_OSS_YARN.beta_slow
    assert fast.sum() == 9 and slow.sum() == 14  # gpt-oss's 32 pairs: 9 kept, 14 divided, 9 blended
    np.testing.assert_allclose(inverse[fast], PLAIN[fast], rtol=1e-12)
    np.testing.assert_allclose(inverse[slow], PLAIN[slow] / GPT_OSS_YARN.factor, rtol=1e-12)
    blended = ~fast & ~slow
    share = (inverse[blended] - PLAIN[blended] / 32) / (PLAIN[blended] - PLAIN[blended] / 32)
    assert np.all((share > 0) & (share < 1)) and np.all(np.diff(share) < 0)  # from kept toward divided
    assert np.all(np.diff(inverse) < 0)
    assert concentration == pytest.approx(1 + 0.1 * math.log(32))


def test_without_scaling_it_is_plain_rope() -> None:
    concentration, inverse = yarn_frequencies(HEAD_DIM, Yarn(factor=1.0))
    assert concentration == 1.0
    np.testing.assert_allclose(inverse, PLAIN, rtol=1e-12)
