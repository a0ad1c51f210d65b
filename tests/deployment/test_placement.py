"""Placement: every worker slot on a node and its GPUs, the same for every renderer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.deployment.host import plan_host
from dynamo_oss.deployment.kubernetes import ClusterTarget, render_manifests
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from tests.support.commands import REPO, dynamo, run_dynamo
from tests.support.graphs import two_trays
from tests.support.manifest_schemas import manifest_errors


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


def test_an_external_nats_password_reaches_the_gateway_in_an_owner_only_file_not_its_command_line(
    tmp_path: Path,
) -> None:
    graph = yaml.safe_load((REPO / "graphs" / "disagg-1p1d.yaml").read_text())
    graph["infrastructure"]["nats"] = {"mode": "external", "url": "nats://graph:s3cret@127.0.0.1:4222"}
    for pool in graph["pools"].values():
        pool["engine_args"] = str(REPO / "graphs" / pool["engine_args"])
    (tmp_path / "graph.yaml").write_text(yaml.safe_dump(graph))
    plan = plan_host(
        build_deployment(load_graph(tmp_path / "graph.yaml")),
        run_dir=tmp_path / "run",
        model_folder=tmp_path,
        encodings_dir=tmp_path,
    )
    (gateway,) = [p for p in plan.processes if p.kind == "gateway"]
    assert not any("s3cret" in arg for arg in gateway.argv), gateway.argv
    (config_file,) = [f for f in plan.files if str(f.path) in gateway.argv]
    assert b"s3cret" not in config_file.content
    config = GatewayConfig.model_validate_json(config_file.content)
    assert config.responses is not None and config.nats is not None
    (url_file,) = [f for f in plan.files if f.path == config.nats.url_file]
    assert url_file.write().read_text() == "nats://graph:s3cret@127.0.0.1:4222"
    assert url_file.path.stat().st_mode & 0o777 == 0o600


def test_check_prints_the_placement() -> None:
    code, out, err = dynamo("check", str(REPO / "graphs" / "disagg.yaml"))
    assert code == 0, err
    assert (
        "  placement:\n    local 127.0.0.1, 8 GPUs (infrastructure, frontend): prefill-0 GPU 0; decode-0 GPU 1; "
        "spare slots prefill-1, prefill-2, prefill-3, decode-1," in out
    )


def write(tmp_path: Path, graph: dict, engines: dict[str, str] | None = None) -> Path:
    for name, text in (engines or {}).items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


def two_nodes(**pools: dict) -> dict:
    return {
        "name": "two-nodes",
        "model": "gpt-oss-20b",
        "hardware": {
            "gpu": "h200",
            "nodes": [
                {"name": "head", "address": "10.9.0.1", "gpus": 0},
                {"name": "gpu-a", "address": "10.9.0.2", "gpus": 2},
            ],
        },
        "infrastructure": {"tls": "none"},  # tests/deployment/test_infrastructure_tls.py covers the secured graphs
        "pools": pools or {"agg": {"workers": 2, "engine": "mocker"}},
    }


def test_a_graph_of_named_nodes_places_each_worker_on_a_node_with_room(tmp_path: Path) -> None:
    graph = two_nodes(
        prefill={"workers": 1, "engine": "mocker", "nodes": ["gpu-a"]},
        decode={"autoscale": {"min": 1, "max": 1}, "engine": "mocker"},
    )
    graph["planner"] = {"ttft_ms": 2000, "itl_ms": 50, "mode": "load"}
    placement = build_deployment(load_graph(write(tmp_path, graph))).placement
    assert placement.infrastructure_node == "head"
    assert [(slot.name, slot.nodes, slot.gpus) for slot in placement.slots] == [
        ("prefill-0", ["gpu-a"], [0]),
        ("decode-0", ["gpu-a"], [1]),
    ]
    assert placement.describe()[0] == "head 10.9.0.1, 0 GPUs (infrastructure, frontend): no workers"


def test_a_worker_wider_than_a_tray_spans_whole_trays_of_one_nvlink_domain(tmp_path: Path) -> None:
    engine = "tensor_parallel_size: 8\nmoe_expert_parallel_size: 8\nmax_batch_size: 64\n"
    graph = {
        "name": "rack",
        "model": "gpt-oss-120b",
        "hardware": {"gpu": "gb200", "gpus_per_node": 4, "nodes": 5},
        "pools": {"agg": {"workers": 2, "gpus_per_worker": 8, "engine_args": "tp8.yaml"}},
        "gateway": {"auth": {"keys_env": "RACK_KEY"}},
    }
    deployment = build_deployment(load_graph(write(tmp_path, graph, {"tp8.yaml": engine})))
    placement = deployment.placement
    assert [(slot.nodes, slot.gpus) for slot in placement.slots] == [
        (["node-0", "node-1"], [0, 1, 2, 3]),
        (["node-2", "node-3"], [0, 1, 2, 3]),
    ]
    assert placement.on_cluster and placement.describe()[4] == "node-4, 4 GPUs: no workers"
    graph_deployment = render_manifests(deployment, ClusterTarget(image="i"))[1]
    assert manifest_errors(graph_deployment) == []  # against Dynamo's CRD, unknown fields refused
    (worker,) = [c for c in graph_deployment["spec"]["components"] if c["name"] == "agg"]
    assert worker["multinode"] == {"nodeCount": 2} and worker["replicas"] == 2
    assert worker["podTemplate"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda g: g["pools"]["agg"].update(nodes=["gpu-z"]),
            "pools.agg.nodes names gpu-z, which hardware.nodes does not have (it has head, gpu-a)",
        ),
        (lambda g: g["hardware"]["nodes"][1].update(address="10.9.0.1"), "Two nodes have the address 10.9.0.1"),
        (
            lambda g: g["pools"]["agg"].update(workers=3),
            "hardware.nodes: the pools need 3 GPUs (agg 3 x 1) but the nodes have 2",
        ),
        (
            lambda g: g["pools"]["agg"].update(gpus_per_worker=16),
            "pools.agg.gpus_per_worker: is 16, wider than an NVLink domain of H200 (8 GPUs)",
        ),
        (
            lambda g: g["pools"]["agg"].update(workers=1, gpus_per_worker=2, nodes=["head"]),
            "pools.agg: worker 0 needs 2 GPUs on head; free: head 0",
        ),
        (lambda g: g["infrastructure"].update(node="gpu-b"), "infrastructure.node names gpu-b"),
        (lambda g: g["hardware"].update(gpus=8), "Give `gpus: N` (one host) or `nodes`"),
    ],
    ids=[
        "unknown node",
        "one address twice",
        "too few gpus",
        "wider than nvlink",
        "no room on the pinned node",
        "unknown infrastructure node",
        "gpus and nodes",
    ],
)
def test_what_cannot_be_placed_is_refused_with_the_reason(
    tmp_path: Path, change: Callable[[dict], None], named: str
) -> None:
    graph = two_nodes()
    change(graph)
    code, out, err = dynamo("check", str(write(tmp_path, graph)))
    assert code == 2 and named in err and "nothing was started" in err, out + err


def test_each_node_plans_its_own_share_on_its_address(tmp_path: Path) -> None:
    graph = two_nodes()
    graph["observability"] = {"prometheus": "embedded"}
    deployment = build_deployment(load_graph(write(tmp_path, graph)))
    plans = {
        node: plan_host(deployment, node, run_dir=tmp_path, model_folder=tmp_path, encodings_dir=tmp_path)
        for node in ("head", "gpu-a")
    }
    head, gpus = plans["head"], plans["gpu-a"]
    assert {p.name for p in head.processes} == {"etcd", "nats", "frontend", "gateway", "prometheus"}
    assert [p.name for p in gpus.processes] == ["agg-0", "agg-1"] and gpus.infrastructure_node == "head"
    assert gpus.etcd_endpoints == head.etcd_endpoints == ["http://10.9.0.1:2379"]
    assert gpus.nats_url == "nats://10.9.0.1:4222"
    assert {use.host for p in gpus.processes for use in p.ports} == {"10.9.0.2"}
    assert gpus.shared_env["DYN_TCP_RPC_HOST"] == "10.9.0.2" and head.shared_env["DYN_TCP_RPC_HOST"] == "10.9.0.1"
    targets = json.loads(next(f for f in head.files if f.path.name == "prometheus-workers.json").content)
    assert sorted(t for group in targets for t in group["targets"]) == ["10.9.0.2:8100", "10.9.0.2:8101"]


def test_check_prints_a_rack_as_a_cluster_and_a_bare_metal_node_by_name() -> None:
    code, out, err = dynamo("check", str(REPO / "graphs" / "gb200-nvl72.yaml"))
    assert code == 0, err
    assert "valid, on a cluster of 18 nodes" in out and "    node-17, 4 GPUs: agg-17 GPU 0,1,2,3" in out
    code, out, err = dynamo("check", str(REPO / "graphs" / "disagg-2x8.yaml"), "--node", "b200-b")
    assert code == 0, err
    assert "the share of node b200-b" in out and "    decode-1   ports 8201" in out and "prefill-0  ports" not in out
    code, out, err = dynamo("check", str(REPO / "graphs" / "disagg-2x8.yaml"), "--node", "b200-c")
    assert code == 2 and "--node: 'b200-c' is not one of the graph's nodes: b200-a, b200-b" in err


def test_bare_metal_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    graph = two_nodes(
        prefill={"workers": 1, "engine": "mocker"}, decode={"autoscale": {"min": 1, "max": 1}, "engine": "mocker"}
    )
    graph["planner"] = {"ttft_ms": 2000, "itl_ms": 50, "mode": "load"}
    code, out, err = dynamo("check", str(write(tmp_path, graph)))
    assert (
        code == 2
        and "pools.decode.autoscale: slot decode-0 is on node gpu-a, but on bare metal the planner "
        "resizes pools only on its own node (head): pin the pool there"
        in err
    ), out + err
    rack = two_trays("trays", "gpt-oss-20b", {"workers": 1, "gpus_per_worker": 8, "engine": "mocker"})
    code, out, err = dynamo("check", str(write(tmp_path, rack)))
    assert (
        code == 2
        and "pools.agg.gpus_per_worker: worker agg-0 spans nodes tray-0, tray-1, which engine mocker "
        "cannot do: give it at most one node's GPUs"
        in err
    ), out + err


def test_a_trtllm_worker_hands_kv_over_on_its_nodes_interface_and_serve_runs_only_on_that_node(
    tmp_path: Path,
) -> None:
    graph = two_nodes()
    graph["hardware"]["nodes"][1]["address"] = "127.0.0.1"  # gpu-a is this machine, on its loopback interface
    graph["pools"] = {"agg": {"workers": 1, "gpus_per_worker": 2, "engine_args": "tp2.yaml"}}
    path = write(tmp_path, graph, {"tp2.yaml": "tensor_parallel_size: 2\nmax_batch_size: 64\n"})
    deployment = build_deployment(load_graph(path))
    (worker,) = plan_host(
        deployment, "gpu-a", run_dir=tmp_path, model_folder=tmp_path, encodings_dir=tmp_path
    ).workers()
    assert worker.env["TRTLLM_NIXL_INTERFACE"] == worker.env["TRTLLM_UCX_INTERFACE"] == "lo"
    served = run_dynamo("serve", str(path), "--node", "head", "--engine", "mocker", "--run-dir", str(tmp_path / "run"))
    assert (
        served.returncode == 2
        and "--node head: its address 10.9.0.1 (hardware.nodes) is on no interface of this machine" in served.stderr
    ), served.stdout + served.stderr


def test_gateways_on_several_frontend_nodes_share_their_limits_over_nats_and_one_keeps_them_to_itself(
    tmp_path: Path,
) -> None:
    def gateway_configs(graph: dict) -> dict[str, GatewayConfig]:
        deployment = build_deployment(load_graph(write(tmp_path, graph)))
        configs = {}
        for node in deployment.placement.frontend_nodes:
            plan = plan_host(deployment, node, run_dir=tmp_path / node, model_folder=tmp_path, encodings_dir=tmp_path)
            (gateway,) = [p for p in plan.processes if p.kind == "gateway"]
            (config_file,) = [f for f in plan.files if str(f.path) in gateway.argv]
            configs[node] = GatewayConfig.model_validate_json(config_file.content)
        return configs

    (tmp_path / "graph.key").write_bytes(bytes(32))
    (tmp_path / "graph.key").chmod(0o600)
    graph = two_nodes()
    kept_nowhere = {"responses": {"store": False}, "batches": {"enabled": False}}
    graph["gateway"] = {**kept_nowhere, "key_file": str(tmp_path / "graph.key")}
    graph["frontend"] = {"nodes": ["head", "gpu-a"]}
    configs = gateway_configs(graph)
    assert list(configs) == ["head", "gpu-a"]
    for config in configs.values():
        assert config.cluster_share is not None and config.cluster_share.channel == "limits-two-nodes"
        assert config.nats is not None and config.nats.url_file is not None and config.responses is None
    graph["frontend"] = {"nodes": ["head"], "replicas": 2}  # two frontends behind one gateway: one place
    (config,) = gateway_configs(graph).values()
    assert config.cluster_share is None and config.nats is None  # nothing kept in NATS: no traffic to it
