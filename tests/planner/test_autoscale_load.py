"""Autoscaling on one host with Dynamo's own planner in load mode: under a load ramp it grows the
decode pool on its KV threshold, when the load falls it shrinks it again, and no request fails on
the way. The launcher carries out each decision (workers registered before it acknowledges, drained
before they stop) and refuses one past the GPU budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.support.commands import run_dynamo
from tests.support.graphs import AUTOSCALE_KEY
from tests.support.served import ServedGraph
from tests.support.traffic import Load
from tests.support.waiting import wait_for

pytestmark = pytest.mark.long

TOKENS = 400
RAMP_STREAMS = 24


def decode_pool(served: ServedGraph) -> dict:
    return next(p for p in served.state()["pools"] if p["role"] == "decode")


def decided(served: ServedGraph, workers: int) -> bool:
    """The planner's last decision set the decode pool to `workers` and the launcher carried it out."""
    decision = served.state().get("last_decision") or {}
    return decision.get("workers", {}).get("decode") == workers and decision.get("outcome") == "carried out"


def test_the_planner_grows_decode_under_load_and_shrinks_it_after(
    autoscaled: ServedGraph, record_property: pytest.RecordProperty
) -> None:
    assert decode_pool(autoscaled)["live"] == 1
    load = Load(autoscaled.endpoint, TOKENS, api_key=AUTOSCALE_KEY)
    load.users = 1
    load.thread.start()
    try:
        ramp = time.monotonic()
        load.users = RAMP_STREAMS
        wait_for(
            lambda: decided(autoscaled, 2), 120, "the planner to grow decode to 2 and the launcher to carry it out"
        )
        grown_after = time.monotonic() - ramp
        record_property("seconds_from_ramp_to_new_decode_worker_serving", round(grown_after, 1))
        print(f"load ramp to {RAMP_STREAMS} streams -> second decode worker serving after {grown_after:.1f} s")
        assert decode_pool(autoscaled)["live"] >= 2
        fall = time.monotonic()
        load.users = 1  # a trickle goes on, so requests are in flight while workers drain
        wait_for(
            lambda: decided(autoscaled, 1) and decode_pool(autoscaled)["live"] == 1,
            180,
            "the planner to shrink decode back to 1",
        )
        record_property("seconds_from_fall_to_decode_shrunk", round(time.monotonic() - fall, 1))
    finally:
        load.stopping.set()
        load.thread.join(180)
    assert load.failures == []
    assert len(load.completed) >= RAMP_STREAMS and set(load.completed) == {TOKENS}
    prometheus = autoscaled.state()["prometheus_url"]

    def scaling_actions() -> dict[str, float] | None:
        query = 'dynamo_oss_scaling_actions_total{pool="decode"}'
        rows = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}).json()["data"]["result"]
        counts = {row["metric"]["direction"]: float(row["value"][1]) for row in rows}
        return counts if counts.get("up", 0) >= 1 and counts.get("down", 0) >= 1 else None

    wait_for(scaling_actions, 30, "the launcher's scaling actions in Prometheus")
    output = autoscaled.output.read_text()
    assert "planner decision" in output and "decode 1 -> 2" in output and "-> 1" in output
    assert " WARN " not in output.replace("WARN http-request: dynamo_parsers::reasoning::gpt_oss_parser", "")


def test_a_decision_past_the_gpu_budget_is_refused_and_logged(autoscaled: ServedGraph) -> None:
    state = autoscaled.state()
    token = Path(state["control_token_file"]).read_text().strip()
    refused = httpx.post(
        f"{state['control_url']}/v1/decisions",
        headers={"Authorization": f"Bearer {token}"},
        json={"decision_id": 999, "workers": {"decode": 3}},
        timeout=30,
    )
    assert refused.status_code == 409
    why = "the pools would need 4 GPUs (prefill 1 x 1, decode 3 x 1) but the GPU budget is 3"
    assert refused.json()["error"]["message"] == why
    assert f"planner decision 999 refused: {why}" in autoscaled.output.read_text()
    status = json.loads(run_dynamo("status", str(autoscaled.run_dir), "--json").stdout)
    assert status["last_decision"]["decision_id"] == 999 and status["last_decision"]["outcome"] == f"refused: {why}"
    assert decode_pool(autoscaled)["live"] == 1
    text = run_dynamo("status", str(autoscaled.run_dir)).stdout
    assert "decode   mocker  target 1  live 1  draining 0" in text and "(autoscaled 1-3)" in text
    assert "last planner decision: #999" in text
