"""The sla mode sizes the pools for interactive traffic: the batch work in what Dynamo's planner observes (its
requests, their share of the mean ISL and OSL, their sequences in the engines' backlog) is taken off first."""

from __future__ import annotations

import asyncio
import logging

from typing import Any

import pytest

from dynamo_oss.planner.__main__ import STANDINS
from dynamo_oss.planner.batch_work import BatchWork, less_batch, without
from dynamo_oss.planner.sizing import Backlog


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Any:
    """What Dynamo's planner observed over a window (its TrafficMetrics, imported as its process imports it)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    from dynamo.planner.plugins.types import TrafficMetrics

    return TrafficMetrics(duration_s=10, num_req=30, isl=2000, osl=200, kv_hit_rate=0.5)


def test_batch_requests_and_their_tokens_come_off_the_observed_traffic(seen: Any) -> None:
    # 20 interactive requests of 2,500 / 250 tokens beside 10 batch requests of 1,000 / 100: what Dynamo saw.
    interactive = without(seen, requests=10, isl_sum=10 * 1000, osl_sum=10 * 100)
    assert (interactive.num_req, interactive.isl, interactive.osl) == (20, 2500, 250)
    assert interactive.duration_s == 10 and interactive.kv_hit_rate == 0.5


def test_a_window_of_batch_work_alone_leaves_no_traffic_and_no_batch_work_leaves_it_as_seen(seen: Any) -> None:
    assert without(seen, requests=30, isl_sum=60_000, osl_sum=6_000).num_req == 0
    assert without(seen, requests=45, isl_sum=0, osl_sum=0).num_req == 0  # counted a little later than Dynamo's
    assert without(seen, requests=0, isl_sum=0, osl_sum=0) == seen


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
