"""Interactivity against throughput: Pareto fronts and the ratio of two fronts at equal tok/s/GPU.

One definition serves the simulated study (benchmarks/isl32k) and live sweeps (`dynamo bench
compare`), so "disaggregation is Nx more interactive" means the same thing in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dynamo_oss.perf.metrics import ServingPoint

Speed = Callable[[ServingPoint], float]


def tok_s_user(point: ServingPoint) -> float:
    """aiperf's tok/s/user, the interactivity the published Pareto charts plot."""
    return point.tok_s_user


def pareto_front(points: Sequence[ServingPoint], speed: Speed = tok_s_user) -> list[ServingPoint]:
    """The points no other point beats on both tok/s/GPU and `speed`, highest tok/s/GPU first."""
    front: list[ServingPoint] = []
    best = -1.0
    for point in sorted(points, key=lambda p: (-p.tok_s_gpu, -speed(p))):
        if speed(point) > best:
            front.append(point)
            best = speed(point)
    return front


def interactivity_ratios(
    base: Sequence[ServingPoint], other: Sequence[ServingPoint], speed: Speed = tok_s_user
) -> np.ndarray:
    """`other` over `base` in `speed` at equal tok/s/GPU, over the range both fronts reach, each
    interpolated log-linearly between measured points: rows (tok/s/GPU, ratio)."""
    curves = [np.array(sorted((p.tok_s_gpu, speed(p)) for p in f)) for f in (base, other)]
    if any(len(c) < 2 for c in curves):
        return np.empty((0, 2))
    low, high = max(c[0, 0] for c in curves), min(c[-1, 0] for c in curves)
    if high <= low:
        return np.empty((0, 2))
    x = np.geomspace(low, high, 32)
    at = [np.exp(np.interp(np.log(x), np.log(c[:, 0]), np.log(c[:, 1]))) for c in curves]
    return np.column_stack([x, at[1] / at[0]])


def ratio_summary(ratios: np.ndarray) -> dict[str, float | None]:
    """The ratio at 50% and 90% of the highest tok/s/GPU both fronts reach, and its maximum."""
    if not len(ratios):
        return {"at_50pct": None, "at_90pct": None, "max": None, "max_at_tok_s_gpu": None}

    def at(fraction: float) -> float | None:
        x = fraction * ratios[-1, 0]
        return round(float(np.interp(x, ratios[:, 0], ratios[:, 1])), 2) if x >= ratios[0, 0] else None

    best = int(np.argmax(ratios[:, 1]))
    return {
        "at_50pct": at(0.5),
        "at_90pct": at(0.9),
        "max": round(float(ratios[best, 1]), 2),
        "max_at_tok_s_gpu": round(float(ratios[best, 0])),
    }
