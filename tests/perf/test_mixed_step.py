"""The model's mixed step and attention-DP lockstep against the H200 measurements of issue 16
(benchmarks/gpu/mixed_step, benchmarks/gpu/adp_lockstep): the committed results, no GPU."""

from __future__ import annotations

import pytest

from benchmarks.gpu.mixed_step.model_compare import WITHIN, lockstep, mixed_step


def test_every_measured_mixed_step_is_predicted_within_15_percent():
    """mixed / (chunk alone + decode alone), model over measured, for one step (`step_ms`) and for what
    `simulate` charges through the mocker's profiles (first chunks: the profile spreads a prompt's
    attention over its chunks)."""
    rows, summary = mixed_step()
    assert (summary["cases"], summary["prefixed_cases"]) == (60, 12)
    for r in rows:
        case = f"chunk {r['chunk']} after {r['cached']} beside {r['batch']} at {r['context']}"
        assert abs(r["one_pass_ratio_vs_measured_ratio"] - 1) <= WITHIN, case
        if not r["cached"]:
            assert abs(r["mocker_ratio_vs_measured_ratio"] - 1) <= WITHIN, case
            assert r["model_mocker_us"] == pytest.approx(r["model_one_pass_us"], rel=1e-6), case


def test_attention_dp_ranks_step_at_the_slowest_ranks_pace():
    """The rule `simulate` runs attention-DP ranks by (Dynamo's mocker; tests/perf/test_lockstep.py): a
    step lasts as long as its slowest rank. Measured over EP2 all-to-all, rank 1 beside rank 0's chunk
    steps at rank 0's pace, far from its own decode step's."""
    rows = lockstep()
    assert len(rows) == 6
    for r in rows:
        rank1 = r["measured_rank1_rank0_chunk_us"]
        assert rank1 == pytest.approx(max(r["measured_rank0_us"], r["measured_rank1_no_chunk_us"]), rel=WITHIN)
        assert rank1 > (1 + WITHIN) * r["measured_rank1_no_chunk_us"]  # independent ranks would not wait
