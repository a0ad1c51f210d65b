"""AIConfigurator beside the model (dynamo_oss/perf/aic.py): the rows it is asked, as it takes them, and its
stored estimates in `dynamo calibrate`'s tables. AIConfigurator itself is not installed here."""

from __future__ import annotations

import sys

import pytest

from dynamo_oss.perf.aic import AicEstimate, aic_metric, aic_query, run_aic, stored_reference
from dynamo_oss.perf.calibration import PUBLISHED, compare, speedup_markdown, speedups, table_markdown
from dynamo_oss.perf.speculation import CHAT

ROWS = {row.key: row for row in PUBLISHED}


def test_each_aggregated_row_is_asked_as_one_worker_of_its_pool() -> None:
    tp8 = aic_query(ROWS["b200-tp8-c4-1k1k"])
    assert tp8 is not None and (tp8.system_name, tp8.backend_name, tp8.tp_size, tp8.moe_ep_size, tp8.batch_size) == (
        "b200_sxm",
        "trtllm",
        8,
        8,
        4,
    )
    # Attention DP: one batch per GPU, the experts spread over the worker's GPUs.
    dep4 = aic_query(ROWS["b200-dep4-maxtput-1k2k"])
    assert dep4 is not None and (dep4.tp_size, dep4.attention_dp_size, dep4.moe_ep_size, dep4.batch_size) == (
        1,
        4,
        4,
        640,
    )
    vllm = aic_query(ROWS["h200-vllm-tp8-c4-1k1k"])
    assert vllm is not None and vllm.backend_name == "vllm" and vllm.kvcache_quant_mode == "bfloat16"
    # A speculative row: its drafts, and what its workload's acceptance keeps of them a step.
    eagle3 = aic_query(ROWS["h200-tp8-eagle3x3-bs16"])
    assert eagle3 is not None and eagle3.nextn == 3
    assert eagle3.nextn_accepted == pytest.approx(CHAT.tokens_per_step(3) - 1)
    assert aic_query(ROWS["h200-tp8-plain-bs16"]).nextn_accepted is None  # type: ignore[union-attr]


def test_disaggregated_and_offline_rows_are_not_asked() -> None:
    assert aic_query(ROWS["gb200-disagg-p1-d4-c64-8k1k"]) is None
    assert aic_query(ROWS["h200-tp1-offline-8k1k"]) is None


def test_metrics_on_the_publishers_definitions() -> None:
    estimate = AicEstimate(key="k", ttft_ms=40.0, tpot_ms=4.0, tok_s_user=230.0, tok_s_gpu=100.0)
    assert aic_metric(estimate, "tok_s_user_tpot") == 250.0  # InferenceMAX's 1000 / TPOT
    assert aic_metric(estimate, "tok_s_user") == 230.0 and aic_metric(estimate, "ttft_p50_ms") == 40.0
    assert aic_metric(AicEstimate(key="k", error="MoE data missing"), "tok_s_gpu") is None
    assert aic_metric(None, "tok_s_gpu") is None


def test_the_stored_estimates_answer_every_row_asked_and_show_in_the_tables() -> None:
    reference = stored_reference()
    assert reference is not None and reference.aiconfigurator == "0.12.0"
    asked = {query.key for row in PUBLISHED if (query := aic_query(row)) is not None}
    assert {query.key for query in reference.queries} == asked == set(reference.by_key())
    row = ROWS["b200-tp8-c4-1k1k"]
    text = table_markdown(compare(rows=[row]), reference)
    assert "AIConfigurator 0.12.0" in text.splitlines()[0] and text.count(row.key) == len(row.published)
    gains = speedups(batches=(1, 64), aic=reference)
    assert all(gain.aic is not None and gain.aic > 1 for gain in gains)
    assert "AIConfigurator" in speedup_markdown(gains)


def test_an_environment_without_aiconfigurator_is_refused_by_name() -> None:
    query = aic_query(ROWS["b200-tp8-c4-1k1k"])
    assert query is not None
    with pytest.raises(RuntimeError, match="aic_driver.py failed"):
        run_aic(sys.executable, [query])  # type: ignore[arg-type]
