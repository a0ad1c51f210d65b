"""observability.tracing, from the graph to each process: on a host every Dynamo process exports to the one
endpoint under its own service name and the gateway's configuration names the same; on Kubernetes every
component of the DynamoGraphDeployment gets the same variables; a graph that does not trace tells no
process to export anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dynamo_oss.deployment.host import HostPlan, plan_host
from dynamo_oss.deployment.kubernetes import CONFIG_MOUNT, ClusterTarget, render_manifests
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.deployment.tracing import DYNAMO_LOGGING_FILE
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.planner.settings import planner_config
from tests.support.commands import REPO
from tests.support.graphs import write_graph
from tests.support.manifest_schemas import manifest_errors
from tests.support.ports import free_ports

DYNAMO_KINDS = ("frontend", "worker", "planner")


def plan(tmp_path: Path, tracing: object) -> HostPlan:
    prometheus, launcher, gateway = free_ports(3)
    observability = {
        "prometheus": {"mode": "embedded", "port": prometheus},
        "launcher_port": launcher,
        "gateway_port": gateway,
        **({"tracing": tracing} if tracing is not None else {}),
    }
    tmp_path.mkdir(exist_ok=True)
    deployment = build_deployment(load_graph(write_graph(tmp_path, observability=observability)))
    return plan_host(deployment, run_dir=tmp_path / "run", model_folder=tmp_path, encodings_dir=tmp_path)


def gateway_config(host_plan: HostPlan) -> GatewayConfig:
    written = next(f for f in host_plan.files if f.path.name == "gateway.json")
    return GatewayConfig.model_validate_json(written.content)


def test_every_dynamo_process_and_the_gateway_export_to_the_embedded_backend(tmp_path: Path) -> None:
    otlp, ui = free_ports(2)
    host_plan = plan(tmp_path, {"mode": "embedded", "port": ui, "otlp_port": otlp, "sample_ratio": 0.25})
    endpoint = f"http://127.0.0.1:{otlp}"
    dynamo = [p for p in host_plan.processes if p.kind in DYNAMO_KINDS]
    assert {p.kind for p in dynamo} == {"frontend", "worker"}
    for process in dynamo:
        assert process.env["OTEL_EXPORT_ENABLED"] == "1"
        assert process.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == endpoint
        assert process.env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] == endpoint  # else localhost:4317, whoever is there
        assert process.env["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
        assert process.env["DYN_LOG"]  # set: see deployment/tracing.py
    names = sorted(p.env["OTEL_SERVICE_NAME"] for p in dynamo)
    assert names == ["dynamo-decode", "dynamo-frontend", "dynamo-prefill"]
    assert gateway_config(host_plan).tracing.model_dump() == {"endpoint": endpoint, "sample_ratio": 0.25}
    backend = next(p for p in host_plan.processes if p.kind == "traces")
    assert {(use.host, use.port) for use in backend.ports} == {("127.0.0.1", ui), ("127.0.0.1", otlp)}
    assert backend.env["PHOENIX_WORKING_DIR"] == str(tmp_path / "run" / "traces")  # its data in the run folder
    assert backend.env["PHOENIX_TELEMETRY_ENABLED"] == "false" and backend.env["PHOENIX_AGENTS_DISABLE_BASH"] == "true"
    assert host_plan.traces_url == f"http://127.0.0.1:{ui}"
    prometheus = next(p for p in host_plan.processes if p.kind == "prometheus")
    assert "--enable-feature=exemplar-storage" in prometheus.argv
    filters = next(f for f in host_plan.files if f.path.name == DYNAMO_LOGGING_FILE)
    assert b'"opentelemetry_sdk" = "off"' in filters.content  # failed exports stay out of the terminal


def test_a_graph_that_does_not_trace_tells_no_process_to_export(tmp_path: Path) -> None:
    for tracing in (None, "off"):
        host_plan = plan(tmp_path / str(tracing), tracing)
        for process in host_plan.processes:
            assert not [name for name in process.env if name.startswith("OTEL_")], process.name
        assert gateway_config(host_plan).tracing is None
        assert all(p.kind != "traces" for p in host_plan.processes) and host_plan.traces_url is None
        prometheus = next(p for p in host_plan.processes if p.kind == "prometheus")
        assert "--enable-feature=exemplar-storage" not in prometheus.argv


def test_an_external_endpoint_is_every_process_s_and_starts_no_backend(tmp_path: Path) -> None:
    host_plan = plan(tmp_path, {"mode": "external", "endpoint": "http://collector.example:4317/", "sample_ratio": 0.01})
    for process in (p for p in host_plan.processes if p.kind in DYNAMO_KINDS):
        assert process.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://collector.example:4317"
    assert gateway_config(host_plan).tracing.endpoint == "http://collector.example:4317"
    assert all(p.kind != "traces" for p in host_plan.processes)


@pytest.mark.parametrize(
    ("tracing", "message"),
    [
        ({"mode": "external", "endpoint": "collector:4317"}, "String should match pattern"),
        ({"mode": "embedded", "sample_ratio": 2}, "less than or equal to 1"),
        ({"mode": "sometimes"}, "tracing"),
    ],
)
def test_a_bad_tracing_section_is_refused_naming_the_field(tmp_path: Path, tracing: dict, message: str) -> None:
    with pytest.raises(GraphError) as refused:
        plan(tmp_path, tracing)
    assert "observability.tracing" in str(refused.value) and message in str(refused.value)


def cluster(tmp_path: Path, tracing: dict) -> list[dict]:
    graph = yaml.safe_load((REPO / "graphs" / "disagg.yaml").read_text())
    graph["observability"]["tracing"] = tracing
    path = tmp_path / "disagg.yaml"
    for name in ("engines",):
        (tmp_path / name).symlink_to(REPO / "graphs" / name)
    path.write_text(yaml.safe_dump(graph))
    deployment = build_deployment(load_graph(path))
    return render_manifests(deployment, ClusterTarget(image="registry/dynamo-oss:0.1.0"), planner_config(deployment))


def test_the_dgd_sets_the_same_for_every_component(tmp_path: Path) -> None:
    manifests = cluster(tmp_path, {"mode": "external", "endpoint": "http://otel-collector.observability:4317"})
    validated = [m for m in manifests if m["kind"] in ("ConfigMap", "DynamoGraphDeployment")]
    assert [error for manifest in validated for error in manifest_errors(manifest)] == []
    config_map, graph = manifests[0], manifests[1]
    services = {}
    for component in graph["spec"]["components"]:
        main = next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")
        env = {item["name"]: item["value"] for item in main["env"] if "value" in item}
        assert env["OTEL_EXPORT_ENABLED"] == "1", component["name"]
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://otel-collector.observability:4317"
        assert env["DYN_LOGGING_CONFIG_PATH"] == str(CONFIG_MOUNT / DYNAMO_LOGGING_FILE)
        assert any(m["mountPath"] == str(CONFIG_MOUNT) for m in main["volumeMounts"])  # where that file is
        services[component["name"]] = env["OTEL_SERVICE_NAME"]
    assert services == {
        "frontend": "dynamo-frontend",
        "prefill": "dynamo-prefill",
        "decode": "dynamo-decode",
        "planner": "dynamo-planner",
    }
    assert DYNAMO_LOGGING_FILE in config_map["data"]
    gateway = GatewayConfig.model_validate(json.loads(config_map["data"]["gateway.json"]))
    assert gateway.tracing is not None and gateway.tracing.endpoint == "http://otel-collector.observability:4317"


def test_an_embedded_backend_is_refused_on_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(GraphError) as refused:
        cluster(tmp_path, {"mode": "embedded"})
    assert "observability.tracing" in str(refused.value) and "mode: external" in str(refused.value)
