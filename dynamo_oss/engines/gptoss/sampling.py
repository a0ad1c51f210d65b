"""How the next token is drawn from a step's logits: the most likely at temperature 0, else a draw from
softmax(logits / temperature).

The draw is the Gumbel-max trick: argmax(logits / T - log(-log U)) with U uniform on (0, 1), one U per
vocabulary entry, is distributed exactly as softmax(logits / T): one pass over the logits, no sort and no
cumulative sum. `sample` is written once over an array module `xp` and uses only what numpy and torch
both have with the same meaning (arithmetic, `log`, `where`, `clip`, `argmax`), so the rule tested here
on numpy is the one the GPU runner applies to its logits on the device, with noise from each request's
own generator (seeded by the request's seed, else the engine's).

Only temperature: top_p, top_k and min_p other than their neutral values are refused when a request is
read (request.py), since a draw here would silently ignore them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

DEFAULT_TEMPERATURE = 1.0  # OpenAI's API default, and what gpt-oss's model card recommends
LOWEST_UNIFORM = 1e-20  # U is kept inside (0, 1): log(0) would make an entry certain or impossible
HIGHEST_UNIFORM = 1.0 - 2.0**-24  # the largest float32 below 1


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = DEFAULT_TEMPERATURE  # 0: greedy
    seed: int | None = None  # the request's; None: the engine's generator

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample(xp: ModuleType, logits: Any, temperatures: Any, uniforms: Any) -> Any:
    """One token per row of `logits` [rows, vocab] (float32): the row's argmax where its temperature is 0,
    else a draw from softmax(row / temperature), the noise being `uniforms` [rows, vocab] on (0, 1)."""
    greedy = temperatures == 0
    scale = xp.where(greedy, 1.0, temperatures)
    gumbel = -xp.log(-xp.log(xp.clip(uniforms, LOWEST_UNIFORM, HIGHEST_UNIFORM)))
    drawn = (logits / scale[:, None] + gumbel).argmax(-1)
    return xp.where(greedy, logits.argmax(-1), drawn)
