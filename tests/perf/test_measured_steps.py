"""The step profile taken from an engine's measured steps: it passes through every measured step, extends
past them along the last two, and Dynamo's replay of it reproduces a measured step's time for a lone
request, so the predictions beside the gptoss engine's served points rest on its own steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.measured_steps import MeasuredSteps
from dynamo_oss.perf.replay import simulate

DECODE = {(1, 1024): 6.0, (8, 1024): 8.0, (32, 1024): 12.0, (1, 8192): 7.0, (8, 8192): 10.0}
PREFILL = {(2048, 0): 100.0, (8192, 0): 220.0, (2048, 16384): 130.0, (8192, 16384): 330.0}


@pytest.fixture
def steps(tmp_path: Path) -> MeasuredSteps:
    rows = [
        {"kind": "decode", "batch": b, "context": c, "tokens": 1, "measured_ms": ms} for (b, c), ms in DECODE.items()
    ]
    rows += [
        {"kind": "prefill", "batch": 1, "context": p, "tokens": n, "measured_ms": ms} for (n, p), ms in PREFILL.items()
    ]
    rows.append({"kind": "decode", "batch": 256, "context": 32768, "tokens": 1, "skipped": "KV"})
    path = tmp_path / "step_times.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "engine_file": "agg.yaml", "rows": rows}))
    return MeasuredSteps.read(path)


def test_every_measured_step_is_its_own_time(steps: MeasuredSteps) -> None:
    batches, contexts = zip(*DECODE)
    assert np.allclose(steps.decode_ms(batches, contexts), list(DECODE.values()))
    tokens, prefixes = zip(*PREFILL)
    assert np.allclose(steps.chunk_ms(tokens, prefixes), list(PREFILL.values()))


def test_between_and_past_the_measured_steps_it_is_linear(steps: MeasuredSteps) -> None:
    assert steps.decode_ms(20, 1024) == pytest.approx(10.0)  # halfway from 8 to 32 sequences
    assert steps.decode_ms(64, 1024) == pytest.approx(12.0 + 32 * 4 / 24)  # past 32, along 8 -> 32
    assert steps.decode_ms(8, 4608) == pytest.approx(9.0)  # halfway from 1k to 8k context
    assert steps.decode_ms(8, 15360) == pytest.approx(10.0 + 7168 * 2 / 7168)  # past 8k, along 1k -> 8k
    assert steps.decode_ms(1, 100) == pytest.approx(6.0)  # held below the shortest context
    assert steps.chunk_ms(16384, 0) == pytest.approx(220.0 + 8192 * 120 / 6144)


def test_an_aggregated_pass_is_the_chunk_less_the_decode_step_the_mocker_adds(steps: MeasuredSteps) -> None:
    grids = (np.array([8192.0]), np.array([1024.0]), np.array([8192.0]))
    alone = steps.profile_tables("prefill", grids, 8192, 1.0, 0)["prefill_ttft_ms"]
    beside = steps.profile_tables("agg", grids, 8192, 8.0, 0)["prefill_ttft_ms"]
    assert alone == pytest.approx([220.0])
    assert beside == pytest.approx([220.0 - float(steps.decode_ms(8, 8192))])


def test_the_replay_of_a_lone_request_costs_its_measured_steps(steps: MeasuredSteps) -> None:
    layout = Layout(
        model="gpt-oss-120b",
        hardware="h200",
        precision=Precision(experts="mxfp4", kv_cache="bf16"),
        pools={"agg": PoolLayout(max_batch=256, max_num_tokens=8192)},
    )
    (point,) = simulate(layout, Workload(isl=2048, osl=64), [1], requests=3, steps=steps)
    assert point.itl_p50_ms == pytest.approx(6.0, rel=0.1)  # one sequence decoding at about 2k context
    assert point.ttft_mean_ms == pytest.approx(100.0 + 6.0, rel=0.35)  # its 2k chunk, beside no decode
