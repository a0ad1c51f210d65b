"""Dynamo 1.6's mocker steps the attention-DP ranks of one worker together, as TensorRT-LLM does
(every rank waits at each MoE all-to-all): one rank's prefill chunk stalls another rank's decode,
and a step lasts as long as its slowest rank. Separate workers share nothing. So `simulate` and
the mocker profiles need no lockstep rule of their own; this test fails if Dynamo changes that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynamo_oss.perf.costs import fitted_factors
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.replay import replay_args

LONG_DECODE = (0, 128, 1000)  # (arrival ms, input tokens, output tokens): request A, alone on its rank


def neighbours(prompt_tokens: int) -> list[tuple[int, int, int]]:
    """Six prompts for the other rank (or worker), each followed by a tiny one for A's, so round-robin
    routing puts every prompt of `prompt_tokens` beside A and nothing big with it."""
    rows = []
    for k in range(6):
        rows += [(200 + 300 * k, prompt_tokens, 2), (210 + 300 * k, 32, 2)]
    return rows


def replay(pool: PoolLayout, rows: list[tuple[int, int, int]], folder: Path) -> list[dict]:
    from dynamo.replay import run_trace_replay

    layout = Layout(hardware="b200", precision=Precision(kv_cache="fp8"), pools={"agg": pool})
    trace, block = folder / "trace.jsonl", 0
    with trace.open("w") as out:
        for at, isl, osl in rows:
            blocks = -(-isl // 32)
            out.write(
                json.dumps(
                    {
                        "timestamp": at,
                        "input_length": isl,
                        "output_length": osl,
                        "hash_ids": list(range(block, block + blocks)),
                    }
                )
                + "\n"
            )
            block += blocks
    args = replay_args(layout, Workload(isl=16384, osl=2), folder, fitted_factors())
    report = run_trace_replay([str(trace)], trace_block_size=32, capture_per_request=True, **args)
    return report.per_request


def a_e2e_ms(requests: list[dict]) -> float:
    return next(r["e2e_latency_ms"] for r in requests if r["output_length"] == LONG_DECODE[2])


def placement(requests: list[dict], key: str) -> dict[int, set]:
    """Where each prompt length went: dp rank or worker."""
    found: dict[int, set] = {}
    for r in requests:
        found.setdefault(r["input_length"], set()).add(r["routing_history"][0][key])
    return found


@pytest.mark.parametrize(
    ("pool", "key", "stalls"),
    [
        (PoolLayout(tp=2, attention_dp=True, max_num_tokens=8192), "dp_rank", True),
        (PoolLayout(workers=2, tp=1, max_num_tokens=8192), "logical_worker_id", False),
    ],
    ids=["attention-DP ranks of one worker", "two workers"],
)
def test_a_prefill_on_one_rank_stalls_decode_on_the_other(
    pool: PoolLayout, key: str, stalls: bool, tmp_path: Path
) -> None:
    (tmp_path / "quiet").mkdir()
    (tmp_path / "busy").mkdir()
    quiet = replay(pool, [LONG_DECODE, *neighbours(32)], tmp_path / "quiet")
    busy = replay(pool, [LONG_DECODE, *neighbours(16384)], tmp_path / "busy")
    where = placement(busy, key)
    assert where[16384].isdisjoint(where[128])  # the long prompts never shared A's rank or worker
    # Twelve 8k-token chunks ran beside A: about 40 ms each on a B200 rank.
    slowed = a_e2e_ms(busy) - a_e2e_ms(quiet)
    assert (slowed > 300) if stalls else (abs(slowed) < 1)


def test_a_step_lasts_as_long_as_the_slowest_rank_not_the_sum(tmp_path: Path) -> None:
    """Independent ranks would pass this too; with the test above it tells lockstep-by-maximum from
    a lockstep that adds the ranks' work."""
    pool = PoolLayout(tp=2, attention_dp=True, max_num_tokens=8192)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    alone = replay(pool, [LONG_DECODE, (1, 32, 2)], tmp_path / "one")
    both = replay(pool, [LONG_DECODE, (1, 128, 1000)], tmp_path / "two")
    assert {r["routing_history"][0]["dp_rank"] for r in both} == {0, 1}
    assert a_e2e_ms(both) == pytest.approx(a_e2e_ms(alone), rel=0.01)  # equal ranks: no rank waits
