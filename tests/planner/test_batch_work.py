"""The sla mode sizes the pools for interactive traffic: the batch work in what Dynamo's planner observes (its
requests, their share of the mean ISL and OSL, their sequences in the engines' backlog) is taken off first."""

from __future__ import annotations

import asyncio
import logging

from typing import Any

import pytest

from dynamo_oss.planner.__main__ import STANDINS
from dynamo_oss.planner.batch_work import BatchWork, Shares, less_batch, without
from dynamo_oss.planner.sizing import Backlog


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Any:
    """What Dynamo's planner observed over a window (its TrafficMetrics, imported as its process imports it)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    from dynamo.planner.plugins.types import TrafficMetrics

    return TrafficMetrics(duration_s=10, num_req=30, isl=2000, osl=200, kv_hit_rate=0.5)


def test_the_batch_s_share_of_requests_and_tokens_comes_off_the_observed_traffic(seen: Any) -> None:
    # 20 interactive requests of 2,500 / 250 tokens beside 10 batch requests of 1,000 / 100: what Dynamo saw, a
    # third of the requests and a sixth of the tokens the batch's.
    shares = Shares(requests=10 / 30, input_tokens=10_000 / 60_000, output_tokens=1_000 / 6_000)
    interactive = without(seen, shares)
    assert interactive.num_req == pytest.approx(20)
    assert (interactive.isl, interactive.osl) == (pytest.approx(2500), pytest.approx(250))
    assert interactive.duration_s == 10 and interactive.kv_hit_rate == 0.5


def test_a_window_of_batch_work_alone_leaves_no_traffic_and_no_batch_work_leaves_it_as_seen(seen: Any) -> None:
    assert without(seen, Shares(1.0, 1.0, 1.0)).num_req == 0
    almost = without(seen, Shares(0.99, 0.999, 0.999))  # too few left to measure a mean from: the seen one kept
    assert almost.num_req == pytest.approx(0.3) and (almost.isl, almost.osl) == (2000, 200)
    assert without(seen, Shares(0.0, 0.0, 0.0)) == seen


def test_batch_prompts_and_sequences_come_off_the_engines_backlog_but_never_below_none() -> None:
    held = Backlog(prefill_tokens=4000, decode_requests=8)
    assert less_batch(Backlog(prefill_tokens=5000, decode_requests=12), held) == Backlog(
        prefill_tokens=1000, decode_requests=4
    )
    assert less_batch(Backlog(prefill_tokens=10, decode_requests=3), held) == Backlog()


def test_without_prometheus_the_traffic_is_sized_as_seen_and_the_log_says_so_once(
    seen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    work = BatchWork("http://127.0.0.1:1")  # nothing listens there

    async def twice() -> list[tuple[Any, int]]:
        return [await work.interactive(seen), await work.interactive(seen)]

    with caplog.at_level(logging.WARNING, logger="dynamo_oss.planner"):
        assert asyncio.run(twice()) == [(seen, Backlog()), (seen, Backlog())]
    assert len([r for r in caplog.records if "cannot read batch work" in r.message]) == 1
    assert asyncio.run(BatchWork(None).interactive(seen)) == (seen, Backlog())
