"""Each autoscaled pool's range caps the planner's proposals inside Dynamo's own constrain stage, in
load mode too, so no decision past a pool's max reaches the launcher (whose refusal used to leave
Dynamo's planner waiting for ever for a size that never came)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.planner.settings import planner_config
from tests.support.graphs import write_sla_graph


def load_mode_graph(folder: Path) -> Path:
    """write_sla_graph's graph (both pools autoscaled 1-2) in load mode, decode widened to 1-3."""
    path = write_sla_graph(folder)
    graph = yaml.safe_load(path.read_text())
    graph["planner"]["mode"] = "load"
    graph["pools"]["decode"]["autoscale"]["max"] = 3
    graph["hardware"]["gpus"] = 5
    path.write_text(yaml.safe_dump(graph))
    return path


def test_load_mode_registers_the_pool_ranges_as_a_constrain_stage(tmp_path: Path, dynamo_planner_config: type) -> None:
    config = planner_config(build_deployment(load_graph(load_mode_graph(tmp_path))))
    assert config is not None and config["max_gpu_budget"] == 5  # room for a fourth decode worker
    entries = dynamo_planner_config.model_validate(config).plugin_registration.in_process_plugins
    assert [(entry.class_, entry.plugin_type) for entry in entries] == [("PoolRanges", "constrain")]
    assert entries[0].kwargs["ranges"] == {"prefill": {"min": 1, "max": 2}, "decode": {"min": 1, "max": 3}}


def test_dynamos_constrain_merge_caps_a_proposal_at_each_pools_range(
    tmp_path: Path, dynamo_planner_config: type
) -> None:
    from dynamo.planner.plugins.merge.type_aware import type_aware_merge
    from dynamo.planner.plugins.merge.types import ComponentKey, PluginResult
    from dynamo.planner.plugins.types import ConstrainStageRequest

    from dynamo_oss.planner.ranges import PoolRanges

    config = planner_config(build_deployment(load_graph(load_mode_graph(tmp_path))))
    assert config is not None
    entry = config["plugin_registration"]["in_process_plugins"][0]
    response = asyncio.run(PoolRanges(**entry["kwargs"]).Constrain(ConstrainStageRequest()))
    results = [PluginResult(plugin_id=entry["plugin_id"], priority=entry["priority"], result=response.override)]
    proposed = {ComponentKey(sub_component_type="decode"): 4, ComponentKey(sub_component_type="prefill"): 0}
    merged = type_aware_merge(results, proposed, set_allowed=False)
    assert {target.sub_component_type: target.replicas for target in merged.proposal.targets} == {
        "decode": 3,
        "prefill": 1,
    }
    within = {ComponentKey(sub_component_type="decode"): 2, ComponentKey(sub_component_type="prefill"): 2}
    kept = type_aware_merge(results, within, set_allowed=False)
    assert {target.sub_component_type: target.replicas for target in kept.proposal.targets} == {
        "decode": 2,
        "prefill": 2,
    }
