"""The gptoss engine's sampling rule, on numpy: the most likely token at temperature 0, else a draw whose
frequencies are softmax(logits / temperature)."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.engines.gptoss.sampling import sample

LOGITS = np.array([2.0, 1.0, 0.0, -1.0, 0.5], dtype=np.float32)
DRAWS = 40_000


def draws(temperature: float, seed: int = 0) -> np.ndarray:
    rows = np.tile(LOGITS, (DRAWS, 1))
    uniforms = np.random.default_rng(seed).random(rows.shape, dtype=np.float32)
    return sample(np, rows, np.full(DRAWS, temperature, dtype=np.float32), uniforms)


@pytest.mark.parametrize("temperature", [0.3, 0.7, 1.0, 2.0])
def test_a_draw_s_frequencies_are_the_softmax_of_the_logits_over_the_temperature(temperature: float) -> None:
    expected = np.exp(LOGITS / temperature) / np.exp(LOGITS / temperature).sum()
    seen = np.bincount(draws(temperature), minlength=len(LOGITS)) / DRAWS
    tolerance = 4 * np.sqrt(expected * (1 - expected) / DRAWS)  # four standard errors per token
    assert np.all(np.abs(seen - expected) < tolerance), (seen, expected)


def test_temperature_zero_is_the_argmax_in_every_row_of_a_mixed_batch() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, 1000)).astype(np.float32)
    temperatures = np.array([0, 1, 0, 0.5, 0, 2], dtype=np.float32)
    for seed in range(20):
        tokens = sample(np, logits, temperatures, np.random.default_rng(seed).random(logits.shape))
        assert list(tokens[temperatures == 0]) == list(logits.argmax(-1)[temperatures == 0])
    drawn = {int(sample(np, logits, temperatures, rng.random(logits.shape))[1]) for _ in range(50)}
    assert len(drawn) > 1  # a row at temperature 1 is drawn, not its argmax each time


def test_the_same_noise_draws_the_same_tokens_and_uniforms_at_the_edges_stay_finite() -> None:
    assert np.array_equal(draws(1.0, seed=7), draws(1.0, seed=7))
    rows = np.tile(LOGITS, (2, 1))
    edges = np.array([np.zeros(len(LOGITS)), np.ones(len(LOGITS))], dtype=np.float32)
    tokens = sample(np, rows, np.ones(2, dtype=np.float32), edges)
    assert list(tokens) == [0, 0]  # equal noise in a row: the largest logit wins, no NaN or infinity
