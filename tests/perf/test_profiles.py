"""Mocker profiles: the .npz the mocker accepts, and a replay that gives the model's step times back."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.engines import WorkerContext
from dynamo_oss.engines.mocker import MockerEngine, replay_engine_args
from dynamo_oss.engines.trtllm import DEFAULT_TOKENS_PER_BLOCK
from dynamo_oss.perf.costs import CostModel
from dynamo_oss.perf.graphs import layout_from_file
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.profiles import (
    kv_transfer_bytes_per_token,
    prefill_curve_ms,
    simulated_timing,
)
from dynamo_oss.perf.replay import batch_beside_chunk, check_step_times

DISAGG = Layout(
    hardware="b200",
    precision=Precision(kv_cache="fp8"),
    pools={"prefill": PoolLayout(tp=2, max_num_tokens=16384), "decode": PoolLayout(tp=4, attention_dp=True)},
)
AGG = Layout(hardware="h200", pools={"agg": PoolLayout(tp=2)})


@pytest.mark.parametrize("role", ["agg", "prefill", "decode"])
def test_profile_has_the_mockers_arrays(tmp_path, role):
    layout = AGG if role == "agg" else DISAGG
    path = simulated_timing(layout, role, tmp_path / "p.npz", prompt_tokens=8192).profile.write()
    with np.load(path) as data:
        for axis in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
            assert data[axis].dtype == np.float64 and np.all(np.diff(data[axis]) > 0)
        assert data["prefill_ttft_ms"].shape == data["prefill_isl"].shape
        assert data["decode_itl"].shape == (len(data["decode_active_kv_tokens"]), len(data["decode_context_length"]))
        assert np.all(data["decode_itl"] >= 1.0)  # the mocker's floor never binds


@pytest.mark.parametrize("layout", [DISAGG, AGG], ids=["disagg", "agg"])
def test_replay_reproduces_the_models_step_times(layout):
    for check in check_step_times(layout, isl=8192, batch=8):
        assert check.replay_ms == pytest.approx(check.model_ms, rel=0.05), check.step


def test_an_aggregated_chunk_is_charged_beside_the_decode_batch_it_runs_with():
    """The mocker adds the prefill curve to the decode step; built beside the workload's batch, the sum
    is the model's one-pass mixed step, which saves more the larger the batch (benchmarks/gpu/mixed_step)."""
    cost = CostModel.for_pool(AGG, "agg")
    for batch in (1, 8, 64, 256):
        mocker = prefill_curve_ms(cost, "agg", 8192, 8192, batch) + cost.decode_ms(batch, 8192)
        assert mocker == pytest.approx(cost.mixed_ms(8192, 0, batch, 8192))
    beside_one, *beside_more = (float(prefill_curve_ms(cost, "agg", 8192, 8192, b)) for b in (1, 8, 64, 256))
    assert all(marginal < beside_one for marginal in beside_more)
    assert beside_one < float(prefill_curve_ms(cost, "prefill", 8192, 8192))  # beside one decode: nearly additive


def test_the_batch_beside_a_chunk_is_the_ranks_other_requests():
    workload = Workload(isl=32768, osl=256)
    recipe = Layout(hardware="b200", pools={"agg": PoolLayout(workers=2, tp=4, attention_dp=True)})
    assert batch_beside_chunk(recipe, workload, 64) == 64 / 8 - 1
    assert batch_beside_chunk(recipe, workload, 4) == 1  # at least one
    held = CostModel.for_pool(AGG, "agg").kv_capacity_tokens() // (32768 + 256)
    assert batch_beside_chunk(AGG, workload, 10_000) == held - 1  # no more than the KV cache holds
    assert batch_beside_chunk(DISAGG, workload, 64) == 1  # no pool mixes prefill and decode


def test_mocker_args_carry_the_pool_layout(tmp_path):
    prefill_timing = simulated_timing(DISAGG, "prefill", tmp_path / "p.npz", prompt_tokens=32768)
    decode_timing = simulated_timing(DISAGG, "decode", tmp_path / "d.npz")
    prefill = replay_engine_args(prefill_timing, "prefill", tensor_parallel=2)
    decode = replay_engine_args(decode_timing, "decode", tensor_parallel=4)
    assert prefill["engine"]["kv_transfer_bandwidth"] > 0 and "kv_transfer_bandwidth" not in decode["engine"]
    assert (decode["dp_size"], decode["tensor_parallel_size"]) == (4, 1)  # one scheduler per attention rank
    assert (prefill["dp_size"], prefill["tensor_parallel_size"]) == (1, 2)
    assert not (tmp_path / "p.npz").exists()  # timing is data until someone writes its profile

    def argv(role, timing):
        ctx = WorkerContext(
            role=role,
            served_name="m",
            model_path="m",
            model_folder=tmp_path,
            max_context=None,
            engine_args_file=None,
            shape=MockerEngine().read_shape(None, 1),
            endpoint="dyn://n.c.generate",
            timing=timing,
        )
        return MockerEngine().worker_argv(ctx)

    flags = argv("decode", decode_timing)
    assert flags[flags.index("--data-parallel-size") + 1] == "4"
    assert flags[flags.index("--planner-profile-data") + 1] == str(tmp_path / "d.npz")
    assert "--kv-bytes-per-token" in argv("prefill", prefill_timing)


def test_shipped_graph_reads_into_its_layout():
    layout = layout_from_file("graphs/disagg-1p1d.yaml")
    assert layout.pools["prefill"] == PoolLayout(tp=4, max_batch=32, max_num_tokens=20000)
    assert layout.pools["decode"] == PoolLayout(tp=4, attention_dp=True, max_batch=128, max_num_tokens=16384)
    assert layout.precision.kv_cache == "fp8" and layout.hardware == "b200"
    assert DEFAULT_TOKENS_PER_BLOCK == 32  # TensorRT-LLM's, which the mocker keeps


def test_kv_transfer_bytes_per_token_spreads_the_window_over_the_prompt():
    per_context = DISAGG.shape.kv_bytes_per_context_token(1.0)
    assert kv_transfer_bytes_per_token(DISAGG) == round(per_context)
    assert kv_transfer_bytes_per_token(DISAGG, 32768) == pytest.approx(per_context, rel=0.01)
    assert kv_transfer_bytes_per_token(DISAGG, 256) > 1.4 * per_context
