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


def test_a_pool_is_described_by_its_worker_and_blackwell_s_mxfp4_kernel_is_named() -> None:
    from dynamo_oss.perf.aic import pool_fields
    from dynamo_oss.perf.layout import Layout, PoolLayout, Precision

    pools = {"prefill": PoolLayout(workers=4), "decode": PoolLayout(tp=4, attention_dp=True)}
    b200 = Layout(hardware="b200", precision=Precision(kv_cache="fp8"), pools=pools)
    assert pool_fields(b200, "prefill") == {
        "system_name": "b200_sxm",
        "backend_name": "trtllm",
        "tp_size": 1,
        "attention_dp_size": 1,
        "moe_tp_size": 1,
        "moe_ep_size": 1,
        "kvcache_quant_mode": "fp8",
        "moe_quant_mode": "w4a8_mxfp4_mxfp8",  # MXFP8 activations, as TensorRT-LLM runs MXFP4 on Blackwell
    }
    decode = pool_fields(b200, "decode")  # attention DP: one batch a GPU, the experts over all four
    assert (decode["tp_size"], decode["attention_dp_size"], decode["moe_tp_size"], decode["moe_ep_size"]) == (
        1,
        4,
        1,
        4,
    )
    # Hopper has no FP8 path for MXFP4 experts: AIConfigurator's own choice (W4A16) is TensorRT-LLM's there.
    h200 = Layout(hardware="h200", pools={"agg": PoolLayout(tp=2)})
    assert pool_fields(h200, "agg")["moe_quant_mode"] is None and pool_fields(h200, "agg")["kvcache_quant_mode"] == (
        "bfloat16"
    )


def test_the_stored_calibration_queries_are_what_the_rows_ask_now() -> None:
    """aic_reference.json answers the questions aic_query asks today (the MoE kernel included), or
    `dynamo calibrate --aic` must be run again."""
    reference = stored_reference()
    assert reference is not None
    asked = {query.key: query for row in PUBLISHED if (query := aic_query(row)) is not None}
    assert {query.key: query for query in reference.queries} == asked


def test_the_studies_ask_static_steps_and_disaggregated_layouts_by_aiconfigurator_s_names() -> None:
    from benchmarks.aic_studies.run import DECODES, PREFILLS, layout_queries, step_queries

    steps = {query.key: query for query in step_queries()}
    assert len(steps) == 2 * (len(PREFILLS) + len(DECODES))
    turn = steps["b200 prefill agentic turn: 5,400 new after 56,000 cached"]
    assert (turn.mode, turn.isl, turn.prefix, turn.batch_size, turn.moe_quant_mode) == (
        "static_ctx",
        61400,
        56000,
        1,
        "w4a8_mxfp4_mxfp8",
    )
    decode = steps["h200 decode batch 32 at 32k"]
    assert (decode.mode, decode.isl, decode.batch_size, decode.moe_quant_mode) == ("static_gen", 32768, 32, None)
    layouts = {query.key: query for query in layout_queries()}
    split = layouts["disagg 4P TP1 + 1D TP4/EP4/ADP osl 256 c256"]
    assert split.mode == "disagg" and (split.prefill_num_workers, split.prefill_tp_size) == (4, 1)
    # 256 in flight over one decode worker's four attention-DP ranks: 64 a rank.
    assert (split.decode_num_workers, split.decode_attention_dp_size, split.decode_moe_ep_size) == (1, 4, 4)
    assert split.decode_batch_size == split.batch_size == 64
    agg = layouts["agg 8 x TP1 osl 1024 c64"]
    assert (agg.mode, agg.batch_size, agg.ctx_tokens, agg.prefill_num_workers) == ("agg", 8, 8192, None)


def test_the_driver_passes_only_what_a_query_sets_and_keeps_a_static_step_s_breakdown(monkeypatch) -> None:
    """aic_driver.py runs where AIConfigurator is installed; here a stand-in for its cli_estimate records
    the keyword arguments it is given."""
    import types

    from dynamo_oss.perf import aic_driver
    from dynamo_oss.perf.aic import AicQuery

    seen: list[dict] = []

    class Summary:
        def get_context_latency_dict(self) -> dict:
            return {"context_attention": 1.5, "context_moe": 2.5}

    def cli_estimate(**arguments: object) -> types.SimpleNamespace:
        seen.append(arguments)
        return types.SimpleNamespace(
            backend_version="1.3.0rc20",
            ttft=4.0,
            tpot=None,
            tokens_per_second_per_user=None,
            tokens_per_second_per_gpu=None,
            concurrency=1,
            kv_cache_warning=None,
            summary=Summary(),
        )

    api = types.ModuleType("aiconfigurator.cli.api")
    api.cli_estimate = cli_estimate  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aiconfigurator", types.ModuleType("aiconfigurator"))
    monkeypatch.setitem(sys.modules, "aiconfigurator.cli", types.ModuleType("aiconfigurator.cli"))
    monkeypatch.setitem(sys.modules, "aiconfigurator.cli.api", api)
    query = AicQuery(
        key="k",
        mode="static_ctx",
        system_name="h200_sxm",
        backend_name="trtllm",
        isl=8192,
        osl=2,
        batch_size=1,
        tp_size=1,
        attention_dp_size=1,
        moe_tp_size=1,
        moe_ep_size=1,
        kvcache_quant_mode="fp8",
    )
    out = aic_driver.estimate(query.model_dump())
    assert "key" not in seen[0] and "moe_quant_mode" not in seen[0] and "prefill_num_workers" not in seen[0]
    assert seen[0]["mode"] == "static_ctx" and seen[0]["prefix"] == 0
    assert out["breakdown"] == {"context_attention": 1.5, "context_moe": 2.5} and out["ttft_ms"] == 4.0
