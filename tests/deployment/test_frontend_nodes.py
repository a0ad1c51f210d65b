"""Frontends on several nodes of a bare-metal graph: each node's endpoint on its own address, and the
infrastructure node's Prometheus scraping every node's gateway and frontends. tests/launch/test_multinode.py
serves it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dynamo_oss.deployment.host import HostPlan, plan_host
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from tests.support.commands import dynamo


def three_nodes(**frontend: object) -> dict:
    """head runs the infrastructure, gpu-a prefill and gpu-b decode; head and gpu-b run frontends."""
    return {
        "name": "three-nodes",
        "model": "gpt-oss-20b",
        "hardware": {
            "gpu": "h200",
            "nodes": [
                {"name": "head", "address": "10.9.0.1", "gpus": 0},
                {"name": "gpu-a", "address": "10.9.0.2", "gpus": 1},
                {"name": "gpu-b", "address": "10.9.0.3", "gpus": 1},
            ],
        },
        "infrastructure": {"tls": "none"},  # tests/deployment/test_infrastructure_tls.py covers the secured graphs
        "frontend": {"host": "10.9.0.1", "port": 8000, "nodes": ["head", "gpu-b"], "replicas": 2, **frontend},
        "gateway": {"auth": {"keys_env": "THREE_NODES_KEY"}, "key_file": "graph.key"},
        "pools": {
            "prefill": {"workers": 1, "engine": "mocker", "nodes": ["gpu-a"]},
            "decode": {"workers": 1, "engine": "mocker", "nodes": ["gpu-b"]},
        },
        "observability": {"prometheus": "embedded"},
    }


def write(tmp_path: Path, graph: dict) -> Path:
    """The graph, beside the graph key it names (`graph.key`), as copied to each frontend node."""
    key = tmp_path / "graph.key"
    key.write_bytes(bytes(32))
    key.chmod(0o600)
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


def plans(tmp_path: Path, graph: dict) -> dict[str, HostPlan]:
    deployment = build_deployment(load_graph(write(tmp_path, graph)))
    return {
        node: plan_host(deployment, node, run_dir=tmp_path, model_folder=tmp_path, encodings_dir=tmp_path)
        for node in ("head", "gpu-a", "gpu-b")
    }


def ports(plan: HostPlan, kind: str) -> list[tuple[str, int]]:
    return [(use.host, use.port) for p in plan.processes if p.kind == kind for use in p.ports]


def scrape_targets(plan: HostPlan, job: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(node, process) -> (target, metrics path) of a job of the plan's prometheus.yml."""
    config = yaml.safe_load(next(f for f in plan.files if f.path.name == "prometheus.yml").content)
    (groups,) = [j["static_configs"] for j in config["scrape_configs"] if j["job_name"] == job]
    return {
        (g["labels"]["node"], g["labels"]["process"]): (
            g["targets"][0],
            g["labels"].get("__metrics_path__", "/metrics"),
        )
        for g in groups
    }


def test_each_frontend_node_serves_on_its_own_address_with_its_gateway_s_metrics_where_head_scrapes_them(
    tmp_path: Path,
) -> None:
    planned = plans(tmp_path, three_nodes())
    head, gpu_a, gpu_b = planned["head"], planned["gpu-a"], planned["gpu-b"]
    # A node's address in frontend.host stands for each frontend node's own; metrics leave loopback only
    # where another node's Prometheus must reach them, and Dynamo's frontends stay behind the gateway.
    assert ports(head, "gateway") == [("10.9.0.1", 8000), ("127.0.0.1", 9093)]
    assert ports(gpu_b, "gateway") == [("10.9.0.3", 8000), ("10.9.0.3", 9093)]
    assert ports(gpu_b, "frontend") == ports(head, "frontend") == [("127.0.0.1", 8001), ("127.0.0.1", 8002)]
    assert ports(gpu_a, "gateway") == ports(gpu_a, "frontend") == []
    assert (head.endpoint, head.endpoint_node) == ("http://10.9.0.1:8000/v1", None)
    assert (gpu_b.endpoint, gpu_b.endpoint_node) == ("http://10.9.0.3:8000/v1", None)
    assert (gpu_a.endpoint, gpu_a.endpoint_node) == ("http://10.9.0.1:8000/v1", "head")
    # Each frontend node's launcher reads the API keys its gateway needs; a node without one does not.
    assert head.api_keys and gpu_b.api_keys and not gpu_a.api_keys
    # Both gateways read the one graph key the graph names, never a key of their own host's.
    configs = [next(f for f in plan.files if f.path.name == "gateway.json").content for plan in (head, gpu_b)]
    assert {GatewayConfig.model_validate_json(c).reasoning_key_file for c in configs} == {tmp_path / "graph.key"}
    # Only the infrastructure node runs Prometheus: every node's gateway, and its frontends through it.
    assert not any(p.kind == "prometheus" for p in gpu_b.processes) and gpu_b.endpoints_elsewhere == []
    assert scrape_targets(head, "dynamo-oss-gateway") == {
        ("head", "gateway"): ("127.0.0.1:9093", "/metrics"),
        ("gpu-b", "gateway"): ("10.9.0.3:9093", "/metrics"),
    }
    assert scrape_targets(head, "dynamo-frontend") == {
        ("head", "frontend-0"): ("127.0.0.1:8001", "/metrics"),
        ("head", "frontend-1"): ("127.0.0.1:8002", "/metrics"),
        ("gpu-b", "frontend-0"): ("10.9.0.3:9093", "/metrics/frontend/0"),
        ("gpu-b", "frontend-1"): ("10.9.0.3:9093", "/metrics/frontend/1"),
    }
    assert [other.node for other in head.endpoints_elsewhere] == ["gpu-b"]


@pytest.mark.parametrize(
    ("host", "scraped"),
    [("10.9.0.1", ("10.9.0.3:8000", "/metrics")), ("0.0.0.0", ("10.9.0.3:8000", "/metrics")), ("127.0.0.1", None)],
    ids=["a node's address", "every address", "loopback"],
)
def test_without_a_gateway_another_node_s_frontend_is_scraped_where_it_listens_unless_on_its_loopback(
    tmp_path: Path, host: str, scraped: tuple[str, str] | None
) -> None:
    graph = three_nodes(host=host, replicas=1)
    graph["gateway"] = {"enabled": False, "auth": "none"}
    head = plans(tmp_path, graph)["head"]
    assert scrape_targets(head, "dynamo-frontend").get(("gpu-b", "frontend")) == scraped


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda g: g["pools"]["decode"].update(system_port=8002),
            "pools.decode.system_port (worker 0): port 8002 is also used by frontend.dynamo_port + 1 on node gpu-b",
        ),
        (
            lambda g: g["pools"]["decode"].update(system_port=9093),
            "pools.decode.system_port (worker 0): port 9093 is also used by observability.gateway_port on node gpu-b",
        ),
        (
            lambda g: g["frontend"].update(host="10.9.0.7"),
            "frontend.host: 10.9.0.7 is no node's address, and frontend.nodes (head, gpu-b) each bind it",
        ),
        (
            lambda g: g["gateway"].update(key_file="elsewhere.key"),
            "gateway.key_file: ",
        ),
        (
            lambda g: g["gateway"].pop("key_file"),
            "gateway.key_file: frontend.nodes runs a gateway on head, gpu-b, and each would make a graph key",
        ),
    ],
    ids=[
        "a frontend's port",
        "the gateway's metrics port",
        "an address no node has",
        "a key not copied here",
        "a key per node",
    ],
)
def test_check_of_the_graph_refuses_what_a_frontend_node_could_not_bind(
    tmp_path: Path, change: Callable[[dict], None], named: str
) -> None:
    graph = three_nodes()
    change(graph)
    code, out, err = dynamo("check", str(write(tmp_path, graph)))  # the infrastructure node's share
    assert code == 2 and named in err and "nothing was started" in err, out + err


def test_check_prints_the_other_nodes_endpoints_the_infrastructure_node_scrapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THREE_NODES_KEY", "sk-three")
    code, out, err = dynamo("check", str(write(tmp_path, three_nodes())))
    assert code == 0, err
    assert "  endpoints on other nodes, scraped by this node's Prometheus:\n    gpu-b: frontend-0 127.0.0.1:8001" in out
    assert "gateway 10.9.0.3:8000 (frontend.port), 10.9.0.3:9093 (observability.gateway_port)" in out
    assert "warning: observability.gateway_port" not in err  # on the infrastructure node, its own is on loopback
    code, out, err = dynamo("check", str(write(tmp_path, three_nodes())), "--node", "gpu-b")
    assert code == 0 and "  endpoint   http://10.9.0.3:8000/v1" in out, err
    assert "warning: observability.gateway_port listens on 10.9.0.3:9093: reachable from the network" in err
