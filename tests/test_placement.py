"""Placement: every worker slot on a node and its GPUs, the same for every renderer."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO
from dynamo_oss.deployment.host import plan_host
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph


def placed(name: str):  # noqa: ANN201 - a Placement
    return build_deployment(load_graph(REPO / "graphs" / name)).placement


def test_starting_workers_take_the_gpus_in_pool_order_and_spare_slots_wait_for_free_ones() -> None:
    placement = placed("disagg.yaml")
    assert [node.name for node in placement.nodes] == ["local"] == [placement.infrastructure_node]
    started = [(slot.role, slot.index, slot.gpus) for slot in placement.slots if not slot.spare]
    assert started == [("prefill", 0, [0]), ("decode", 0, [1])]
    spare = [slot for slot in placement.slots if slot.spare]
    assert len(spare) == 3 + 5 and all(slot.gpus == [] for slot in spare)


def test_a_worker_wider_than_one_gpu_gets_consecutive_gpus() -> None:
    started = [(slot.role, slot.gpus) for slot in placed("agg.yaml").slots]
    assert started == [("agg", [0, 1, 2, 3]), ("agg", [4, 5, 6, 7])]


def test_the_host_plan_starts_the_placed_workers_on_their_gpus(tmp_path: Path) -> None:
    deployment = build_deployment(load_graph(REPO / "graphs" / "disagg-1p1d.yaml"))
    plan = plan_host(deployment, run_dir=tmp_path, model_folder=tmp_path, encodings_dir=tmp_path)
    assert {p.name: p.gpus for p in plan.workers()} == {"prefill-0": [0, 1, 2, 3], "decode-0": [4, 5, 6, 7]}
    assert plan.workers()[0].env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert plan.gpus == 8
