"""Autoscaling on one host in sla mode: under a ramp in the request rate the planner grows both pools
for the graph's TTFT and ITL targets, when the rate falls it shrinks them again, no request fails on
the way, and its decisions, reasons and series are seen in the launcher's log, `dynamo status` and
Prometheus."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.commands import run_dynamo
from tests.support.graphs import SLA_HIGH, SLA_LOW, SLA_PROMPT_WORDS, SLA_SLOW, SLA_TOKENS, write_sla_graph
from tests.support.served import ServedGraph, serving
from tests.support.traffic import Load
from tests.support.waiting import wait_for

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def sla_scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    folder = tmp_path_factory.mktemp("sla")
    with serving(write_sla_graph(folder), folder / "run", "--mocker-time-scale", str(SLA_SLOW)) as served:
        yield served


def pools_at(served: ServedGraph, workers: int) -> bool:
    return all(pool["target"] == workers and pool["live"] == workers for pool in served.state()["pools"])


def test_the_sla_planner_grows_both_pools_for_the_targets_and_shrinks_them_after(
    sla_scaled: ServedGraph, record_property: pytest.RecordProperty
) -> None:
    assert pools_at(sla_scaled, 1)
    load = Load(sla_scaled.endpoint, tokens=SLA_TOKENS, prompt_words=SLA_PROMPT_WORDS)
    load.per_second = SLA_LOW
    load.thread.start()
    try:
        ramp = time.monotonic()
        load.per_second = SLA_HIGH
        wait_for(lambda: pools_at(sla_scaled, 2), 120, "the sla planner to grow prefill and decode to 2 each")
        record_property("seconds_from_ramp_to_both_pools_grown", round(time.monotonic() - ramp, 1))
        fall = time.monotonic()
        load.per_second = SLA_LOW
        wait_for(lambda: pools_at(sla_scaled, 1), 180, "the sla planner to shrink both pools back to 1")
        record_property("seconds_from_fall_to_both_pools_shrunk", round(time.monotonic() - fall, 1))
    finally:
        load.stopping.set()
        load.thread.join(180)
    assert load.failures == []
    assert len(load.completed) >= 20 and set(load.completed) == {SLA_TOKENS}
    # The launcher logged each decision with the planner's reason, and `dynamo status` shows the last.
    output = sla_scaled.output.read_text()
    assert re.search(
        r"planner decision \d+: (decode|prefill) 2[^,]*, (decode|prefill) 2[^,]* for [\d.]+ req/s of ISL \d+", output
    )
    status = run_dynamo("status", str(sla_scaled.run_dir)).stdout
    assert "    why: " in status and "planner's latest look (sla), at " in status
    # The planner's own series reach the graph's Prometheus.
    prometheus = sla_scaled.state()["prometheus_url"]

    def series(query: str) -> list[dict]:
        return httpx.get(f"{prometheus}/api/v1/query", params={"query": query}).json()["data"]["result"]

    wanted = series("max_over_time(dynamo_oss_planner_wanted_workers[10m])")
    assert {row["metric"]["pool"]: float(row["value"][1]) for row in wanted} == {"prefill": 2.0, "decode": 2.0}
    assert series('dynamo_oss_planner_load{source="predicted", quantity="requests_per_s"}')
    assert series('dynamo_oss_planner_target_latency_ms{metric="itl"} == 40')
