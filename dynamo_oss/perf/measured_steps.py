"""A pool's step times taken from an engine's measured steps instead of the CostModel's, for Dynamo's replay:
what the project predicts for an engine it measured itself (the gptoss engine on an H200,
benchmarks/gpu/serving/step_times.py), so the prediction rests on that engine's own steps.

The measurements are whole steps' wall times, host work included: decode steps at some batches and
contexts, prompt chunks of some sizes after some prefixes. The mocker's tables (profiles.profile_tables)
are filled from them:
- a decode step of `batch` sequences at `context`: at each measured context, interpolated between the
  measured batches (linear in batch, extended past the largest from its last two), then linear in context
  between the measured contexts (extended past the longest from its last two, held below the shortest);
  a step's KV reads grow with batch x context, so neither bends much between the points;
- a pass of `n` new tokens of a `prompt_tokens` prompt: the chunk of `n` tokens after the prompt's mean
  prefix, interpolated the same way over the measured chunk sizes and prefixes. An aggregated pool's pass
  is a chunk beside decodes, to which the mocker adds the decode step of the batch beside it; the engine's
  measured chunk already holds its step's fixed cost, so that decode step is taken off the chunk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.perf.layout import Role


class MeasuredStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["decode", "prefill"]
    batch: int = Field(ge=1)
    context: int = Field(ge=0, description="decode: each sequence's context; prefill: the chunk's prefix")
    tokens: int = Field(ge=1, description="new tokens a sequence (1 for decode)")
    measured_ms: float = Field(gt=0)


class MeasuredSteps(BaseModel):
    """One engine's measured steps on one GPU (step_times.json's rows that ran)."""

    model_config = ConfigDict(extra="ignore")

    device: str
    engine_file: str
    rows: list[MeasuredStep]

    @classmethod
    def read(cls, path: Path) -> MeasuredSteps:
        data = json.loads(path.read_text())
        data["rows"] = [row for row in data["rows"] if "skipped" not in row]
        return cls.model_validate(data)

    def _table(self, kind: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """context (or prefix) -> (sizes, ms), sizes ascending: batches for decode, chunk tokens for prefill."""
        table: dict[int, list[tuple[int, float]]] = {}
        for row in self.rows:
            if row.kind == kind:
                table.setdefault(row.context, []).append(
                    (row.batch if kind == "decode" else row.tokens, row.measured_ms)
                )
        if not table:
            raise ValueError(f"no measured {kind} step")
        return {
            at: tuple(np.array(column, dtype=float) for column in zip(*sorted(points)))
            for at, points in sorted(table.items())
        }

    def decode_ms(self, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
        return _two_way(self._table("decode"), np.asarray(batch, dtype=float), np.asarray(context, dtype=float))

    def chunk_ms(self, tokens: ArrayLike, prefix: ArrayLike) -> np.ndarray:
        return _two_way(self._table("prefill"), np.asarray(tokens, dtype=float), np.asarray(prefix, dtype=float))

    def profile_tables(
        self,
        role: Role,
        grids: tuple[np.ndarray, np.ndarray, np.ndarray],
        prompt_tokens: int | None,
        decode_batch: float,
        cached_tokens: int,
    ) -> dict[str, np.ndarray]:
        """The five arrays of a dynamo_profile over profiles.profile_tables' grids (new tokens, contexts,
        active KV tokens), its other arguments as there."""
        new, context, active = grids
        prompt = new if prompt_tokens is None else np.full_like(new, float(prompt_tokens))
        prefill = self.chunk_ms(new, cached_tokens + np.maximum(prompt - new, 0.0) / 2)
        if role == "agg":
            prefill = prefill - self.decode_ms(np.full_like(new, decode_batch), cached_tokens + prompt)
        kv, ctx = np.meshgrid(active, context, indexing="ij")
        return {
            "prefill_isl": new,
            "prefill_ttft_ms": np.maximum(prefill, 0.0),
            "decode_active_kv_tokens": active,
            "decode_context_length": context,
            "decode_itl": np.maximum(self.decode_ms(np.maximum(kv / ctx, 1.0), ctx), 1.0),
        }


def _line(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Linear through the points, held below the first, extended past the last along its last two."""
    inside = np.interp(x, xs, ys)
    if len(xs) < 2:
        return inside
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), inside)


def _two_way(table: dict[int, tuple[np.ndarray, np.ndarray]], size: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Along `size` at each measured `at`, then along `at` between them (as `_line`, for every point at once)."""
    ats = np.array(list(table), dtype=float)
    size, at = np.broadcast_arrays(size, at)
    rows = np.stack([_line(size, xs, ys) for xs, ys in table.values()]).reshape(len(ats), -1)  # [ats, points]
    if len(ats) == 1:
        return rows[0].reshape(size.shape)
    wanted = np.maximum(at.reshape(-1), ats[0])  # held below the first
    above = np.clip(np.searchsorted(ats, wanted), 1, len(ats) - 1)  # past the last: along the last two
    below, points = above - 1, np.arange(wanted.size)
    share = (wanted - ats[below]) / (ats[above] - ats[below])
    out = rows[below, points] + share * (rows[above, points] - rows[below, points])
    return out.reshape(size.shape)
