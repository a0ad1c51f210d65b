"""Calibration: every covered published figure within 25% with the committed factors."""

from __future__ import annotations

from dynamo_oss.perf.calibration import (
    LEFT_OUT,
    PUBLISHED,
    TOLERANCE,
    Comparison,
    compare,
    misses,
    table_markdown,
    verdict,
)
from dynamo_oss.perf.costs import FITTED_FACTORS_PATH, Factors, fitted_factors


def test_fitted_factors_are_committed_and_load():
    assert FITTED_FACTORS_PATH.exists()
    assert fitted_factors() != Factors()


def test_covered_published_figures_within_tolerance():
    covered = [row for row in PUBLISHED if row.covered]
    assert len(covered) >= 6
    comparisons = compare(rows=covered)
    assert len(comparisons) == sum(len(row.published) for row in covered)
    fitted = [c for c in comparisons if c.covered]
    worst = max(fitted, key=lambda c: abs(c.error))
    assert abs(worst.error) <= TOLERANCE, f"{worst.key} {worst.metric}: {worst.error:+.1%}"
    assert not misses(comparisons)
    known = {(row.key, metric) for row in covered for metric in row.known_misses}
    assert {(c.key, c.metric) for c in comparisons if not c.covered} == known  # only what a row explains


def test_every_row_is_sourced_and_every_omission_explained():
    assert all(row.source and row.published for row in PUBLISHED)
    assert all(row.assumption for row in PUBLISHED if not row.covered)
    assert all(why and metric in row.published for row in PUBLISHED for metric, why in row.known_misses.items())
    assert LEFT_OUT and all(LEFT_OUT.values())


def test_table_names_each_figure():
    row = next(r for r in PUBLISHED if r.key == "b200-tp8-c4-1k1k")
    text = table_markdown(compare(rows=[row]))
    assert text.count(row.key) == len(row.published) and "Left out:" in text


def test_verdicts_flag_misses():
    missed = Comparison(key="h100-vllm-tp2-c64-1k1k", metric="tok_s_user", published=66, predicted=49, covered=True)
    within = missed.model_copy(update={"predicted": 60})
    assert verdict(missed) == "OVER 25%" and verdict(within) == "ok"
    assert misses([missed, within]) == [missed]


def test_long_input_rows_are_fitted():
    """The figures that decide the 32k answer's prefill speed: long prompts on Blackwell, fitted."""
    long_fitted = [
        row for row in PUBLISHED if row.covered and row.workload.isl >= 7000 and row.layout.hardware == "b200"
    ]
    assert len(long_fitted) >= 3 and all("ttft_p50_ms" in row.published for row in long_fitted)
