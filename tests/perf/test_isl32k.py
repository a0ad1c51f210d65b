"""The 32k study's H200 before/after table reads the fronts it is given."""

from __future__ import annotations

import pytest

from benchmarks.isl32k.run import _speed_at, before_after

SUMMARY = {"at_50pct": 1.0, "at_90pct": 1.0, "max": 1.0}


def _case(speedup: float) -> dict:
    """Two fronts, highest tok/s/GPU first, aggregated twice as fast per user as disaggregated;
    `speedup` scales every figure."""

    def point(mode: str, layout: str, concurrency: int, gpu: float, user: float, ttft: float = 100) -> dict:
        return {
            "mode": mode,
            "layout": layout,
            "concurrency": concurrency,
            "tok_s_gpu": gpu * speedup,
            "tok_s_user": user * speedup,
            "ttft_p50_ms": ttft / speedup,
        }

    agg = [point("agg", "agg A", 8, 400, 50), point("agg", "agg A", 1, 100, 200)]
    disagg = [point("disagg", "disagg D", 8, 400, 25), point("disagg", "disagg D", 1, 100, 100)]
    slow_alone = point("agg", "agg B", 1, 90, 150, ttft=900)  # replayed, off the front, slower alone
    fronts = {"agg": agg, "disagg": disagg}
    return {
        "osl": 256,
        "points": [slow_alone, *agg, *disagg],
        "limited": {"mean": {"fronts": fronts, **SUMMARY}, "p99": SUMMARY},
    }


def test_speed_at_interpolates_log_linearly_inside_the_front():
    front = _case(1.0)["limited"]["mean"]["fronts"]["agg"]
    assert _speed_at(front, 200) == pytest.approx(100)  # halfway in log tok/s/GPU: halfway in log tok/s/user
    assert _speed_at(front, 50) is None and _speed_at(front, 500) is None


def test_before_after_compares_the_same_operating_points():
    rows = before_after(_case(1.0), _case(1.1))
    alone = next(r for r in rows if "alone (c1), agg" in r)
    assert "100 ms (agg A), 200 tok/s/user (agg A)" in alone and "220 tok/s/user (agg A)" in alone  # not "agg B"
    # Levels: 50% and 90% of the lower common top (400 before, 440 after): 200 and 360 tok/s/GPU, in both runs.
    assert any("at 200 tok/s/GPU" in r for r in rows) and any("at 360 tok/s/GPU" in r for r in rows)
    ratio = next(r for r in rows if r.startswith("| OSL 256 | disagg / agg tok/s/user at 200"))
    assert ratio.endswith("| 0.50x | 0.50x |")
    speeds = next(r for r in rows if r.startswith("| OSL 256 | agg tok/s/user at 200"))
    assert speeds.endswith("| 100 | 121 |")  # the faster run is faster at the same tok/s/GPU
