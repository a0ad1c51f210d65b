"""Mocker profiles: the .npz the mocker accepts, and a replay that gives the model's step times back."""

from __future__ import annotations

import numpy as np
import pytest

from dynamo_oss.perf.layout import Layout, PoolLayout, Precision
from dynamo_oss.perf.profiles import (
    kv_transfer_bytes_per_token,
    mocker_engine_args,
    mocker_flags,
    write_mocker_profile,
)
from dynamo_oss.perf.replay import check_step_times

DISAGG = Layout(
    hardware="b200",
    precision=Precision(kv_cache="fp8"),
    pools={"prefill": PoolLayout(tp=2, max_num_tokens=16384), "decode": PoolLayout(tp=4, attention_dp=True)},
)
AGG = Layout(hardware="h200", pools={"agg": PoolLayout(tp=2)})


@pytest.mark.parametrize("role", ["agg", "prefill", "decode"])
def test_profile_has_the_mockers_arrays(tmp_path, role):
    layout = AGG if role == "agg" else DISAGG
    path = write_mocker_profile(tmp_path / "p.npz", layout, role, prompt_tokens=8192)
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


def test_mocker_args_carry_the_pool_layout(tmp_path):
    prefill = mocker_engine_args(DISAGG, "prefill", tmp_path / "p.npz", prompt_tokens=32768)
    decode = mocker_engine_args(DISAGG, "decode", tmp_path / "d.npz")
    assert prefill["engine"]["kv_transfer_bandwidth"] > 0 and "kv_transfer_bandwidth" not in decode["engine"]
    assert (decode["dp_size"], decode["tensor_parallel_size"]) == (4, 1)  # one scheduler per attention rank
    assert (prefill["dp_size"], prefill["tensor_parallel_size"]) == (1, 2)
    flags = mocker_flags(DISAGG, "decode", tmp_path / "d.npz")
    assert flags[flags.index("--data-parallel-size") + 1] == "4"
    assert "--kv-bytes-per-token" in mocker_flags(DISAGG, "prefill", tmp_path / "p.npz")


def test_kv_transfer_bytes_per_token_spreads_the_window_over_the_prompt():
    per_context = DISAGG.shape.kv_bytes_per_context_token(1.0)
    assert kv_transfer_bytes_per_token(DISAGG) == round(per_context)
    assert kv_transfer_bytes_per_token(DISAGG, 32768) == pytest.approx(per_context, rel=0.01)
    assert kv_transfer_bytes_per_token(DISAGG, 256) > 1.4 * per_context
