"""Every `python -m dynamo.trtllm` command line a shipped graph's plan produces is accepted by Dynamo
1.6's own TensorRT-LLM argument parser (dynamo/trtllm/args.py), and means what the graph says.

The parser comes from conftest's `trtllm_parse_args`, with a stand-in for the one TensorRT-LLM module it
imports. (ai-dynamo's pytest plugin skips modules named test_trtllm_* when TensorRT-LLM is missing, hence
this module's name.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynamo_oss.cli.check import plan_graph
from tests.support.commands import REPO
from tests.support.graphs import two_trays

SHIPPED = sorted((REPO / "graphs").glob("*.yaml"))


def as_bare_metal(graph: Path, folder: Path) -> Path:
    """A cluster's graph (`nodes: N`) with an address for each node, so every node's share can be planned
    on its own; other graphs as they are."""
    spec = yaml.safe_load(graph.read_text())
    hardware = spec["hardware"]
    if not isinstance(hardware.get("nodes"), int):
        return graph
    gpus = hardware.pop("gpus_per_node")
    hardware["nodes"] = [
        {"name": f"node-{i}", "address": f"10.0.0.{i + 1}", "gpus": gpus} for i in range(hardware["nodes"])
    ]
    spec.setdefault("infrastructure", {})["tls"] = "none"  # command lines are what this checks
    spec["frontend"].pop("autoscale", None)  # the rack's frontend pods: on bare metal, sized for this host
    spec["gateway"].pop("processes", None)
    for pool in spec["pools"].values():
        pool["engine_args"] = str((graph.parent / pool["engine_args"]).resolve())
    path = folder / graph.name
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("graph", SHIPPED, ids=lambda path: path.name)
def test_dynamo_trtllm_parses_every_worker_command_line(graph: Path, trtllm_parse_args, tmp_path: Path) -> None:  # noqa: ANN001
    graph = as_bare_metal(graph, tmp_path)
    deployment, _ = plan_graph(graph, tmp_path)
    workers = [
        worker
        for node in deployment.placement.nodes
        for worker in plan_graph(graph, tmp_path, node=node.name)[1].workers()
    ]
    assert workers and all(worker.engine == "trtllm" for worker in workers)
    for worker in workers:
        assert worker.argv[1:3] == ["-m", "dynamo.trtllm"]
        config = trtllm_parse_args(worker.argv[3:])
        pool = next(pool for pool in deployment.pools if pool.role == worker.role)
        assert config.namespace == deployment.namespace and config.component == pool.component
        assert config.endpoint == "generate"
        # Dynamo spells an aggregated worker's mode prefill_and_decode once parsed.
        expected_mode = {"agg": "prefill_and_decode", "prefill": "prefill", "decode": "decode"}[pool.role]
        assert config.disaggregation_mode.value == expected_mode
        assert Path(config.extra_engine_args) == pool.engine_args
        assert config.served_model_name == deployment.model.served_name
        assert config.dyn_reasoning_parser == "gpt_oss" and config.dyn_tool_call_parser == "harmony"


def test_a_worker_over_two_trays_is_one_mpi_world_started_from_the_first(trtllm_parse_args, tmp_path: Path) -> None:  # noqa: ANN001
    """As Dynamo documents a multi-node TensorRT-LLM worker: mpirun over both nodes' GPUs, each rank
    under trtllm-llmapi-launch; the second node starts nothing of its own for it."""
    (tmp_path / "tp8.yaml").write_text("tensor_parallel_size: 8\nmoe_expert_parallel_size: 8\nmax_batch_size: 64\n")
    graph = two_trays("two-trays", "gpt-oss-120b", {"workers": 1, "gpus_per_worker": 8, "engine_args": "tp8.yaml"})
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    _, first = plan_graph(path, tmp_path, node="tray-0")
    _, second = plan_graph(path, tmp_path, node="tray-1")
    (worker,) = first.workers()
    assert second.workers() == []
    launch = worker.argv.index("trtllm-llmapi-launch")
    assert worker.argv[:launch][:7] == [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "8",
        "-H",
        "10.9.0.1:4,10.9.0.2:4",
        "--mca",
    ]
    forwarded = {worker.argv[i + 1] for i in range(launch) if worker.argv[i] == "-x"}
    assert {"ETCD_ENDPOINTS", "NATS_SERVER", "CUDA_VISIBLE_DEVICES", "DYN_NAMESPACE"} <= forwarded == set(worker.env)
    assert worker.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # the same GPUs on each tray
    inner = worker.argv[launch + 1 :]
    assert inner[1:3] == ["-m", "dynamo.trtllm"]
    config = trtllm_parse_args(inner[3:])
    assert config.namespace == "two-trays" and config.disaggregation_mode.value == "prefill_and_decode"
