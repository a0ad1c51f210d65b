"""`dynamo deploy`: the shipped graphs as Kubernetes manifests for Dynamo's operator, validated offline
against the DynamoGraphDeployment CRD and Kubernetes' own schemas, and equal to their copies in deploy/."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import dynamo.profiler
import pytest
import yaml

from dynamo_oss.cli.check import plan_graph
from dynamo_oss.cli.endpoint import sized_deployment
from dynamo_oss.deployment.commands import frontend_config
from dynamo_oss.deployment.kubernetes import CONFIG_MOUNT, ClusterTarget, render_manifests
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.planner.settings import planner_config
from tests.support.commands import REPO, run_dynamo
from tests.support.manifest_schemas import manifest_errors

CHECKED_IN = REPO / "deploy" / "kubernetes"
RENDERED = ["disagg.yaml", "agg.yaml"]  # the graphs whose manifests deploy/kubernetes holds
SHIPPED = sorted((REPO / "graphs").glob("*.yaml"))


def render(graph: Path, **target: object) -> list[dict]:
    options = {"image": "registry.example/dynamo-oss:test", **target}
    deployment = build_deployment(load_graph(graph))
    return render_manifests(deployment, ClusterTarget(**options), planner_config(deployment))


def by_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]


@pytest.mark.parametrize("name", RENDERED)
def test_dynamo_deploy_prints_the_checked_in_manifests(name: str) -> None:
    printed = run_dynamo("deploy", f"graphs/{name}")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (CHECKED_IN / name).read_text(), (
        f"deploy/kubernetes/{name} is stale: run `uv run dynamo deploy graphs/disagg.yaml graphs/agg.yaml "
        "--out deploy/kubernetes`"
    )


def test_check_reports_a_stale_copy(tmp_path: Path) -> None:
    written = run_dynamo("deploy", "graphs/agg.yaml", "--out", str(tmp_path))
    assert written.returncode == 0 and (tmp_path / "agg.yaml").is_file()
    assert run_dynamo("deploy", "graphs/agg.yaml", "--out", str(tmp_path), "--check").returncode == 0
    (tmp_path / "agg.yaml").write_text((tmp_path / "agg.yaml").read_text().replace("replicas: 2", "replicas: 3"))
    stale = run_dynamo("deploy", "graphs/agg.yaml", "--out", str(tmp_path), "--check")
    assert stale.returncode == 1 and "agg.yaml: out of date" in stale.stdout


@pytest.mark.parametrize("name", RENDERED)
def test_checked_in_manifests_validate(name: str) -> None:
    manifests = list(yaml.safe_load_all((CHECKED_IN / name).read_text()))
    kinds = ["ConfigMap", "DynamoGraphDeployment", "PodMonitor", "ConfigMap", "PrometheusRule"]
    assert [m["kind"] for m in manifests] == kinds
    for manifest in manifests:
        if manifest["kind"] not in ("PodMonitor", "PrometheusRule"):  # prometheus-operator's: no schema kept here
            assert manifest_errors(manifest) == [], manifest["metadata"]["name"]


@pytest.mark.parametrize("name", RENDERED)
def test_the_prometheus_rule_holds_the_graphs_alert_rules_for_its_pods_series(name: str, tmp_path: Path) -> None:
    """prometheus-operator loads the PrometheusRule's groups as a rule file: promtool checks them as one; the
    rules select the graph's series by the `graph` label its PodMonitor gives every one of them."""
    manifests = list(yaml.safe_load_all((CHECKED_IN / name).read_text()))
    (rule,) = by_kind(manifests, "PrometheusRule")
    graph = by_kind(manifests, "DynamoGraphDeployment")[0]["metadata"]["name"]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule["spec"]))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f'graph="{graph}"' in rule["spec"]["groups"][0]["rules"][0]["expr"]
    (monitor,) = by_kind(manifests, "PodMonitor")
    assert all(
        {"targetLabel": "graph", "replacement": graph} in endpoint["relabelings"]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]
    )


@pytest.mark.parametrize("graph", SHIPPED, ids=lambda path: path.name)
def test_every_shipped_graph_renders_valid_manifests_with_every_option(graph: Path) -> None:
    manifests = render(graph, namespace="llm", model_cache="gpt-oss-cache", dashboards={"a.json": "{}\n"})
    for manifest in manifests:
        assert manifest["metadata"]["namespace"] == "llm"
        if manifest["kind"] not in ("PodMonitor", "PrometheusRule"):
            assert manifest_errors(manifest) == [], manifest["metadata"]["name"]


def test_the_validators_refuse_what_kubernetes_would_prune_or_reject() -> None:
    graph = by_kind(render(REPO / "graphs" / "disagg.yaml"), "DynamoGraphDeployment")[0]
    misspelt = json.loads(json.dumps(graph))
    misspelt["spec"]["components"][1]["replica"] = 2
    assert any("'replica' was unexpected" in error for error in manifest_errors(misspelt))
    old_style = json.loads(json.dumps(graph))
    old_style["spec"]["components"][1]["type"] = "main"  # v1alpha1's componentType
    assert any("spec.components.1.type" in error for error in manifest_errors(old_style))
    bad_container = json.loads(json.dumps(graph))
    bad_container["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["gpus"] = 4
    assert manifest_errors(bad_container)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}}
    assert manifest_errors(config)


def test_pools_become_components_with_the_graphs_replicas_gpus_and_engine_files() -> None:
    manifests = render(REPO / "graphs" / "disagg-1p1d.yaml", model_cache="gpt-oss-cache")
    config_map, graph = manifests[0], by_kind(manifests, "DynamoGraphDeployment")[0]
    components = {component["name"]: component for component in graph["spec"]["components"]}
    assert [c["type"] for c in components.values()] == ["frontend", "prefill", "decode"]
    for role in ("prefill", "decode"):
        engine_file = (REPO / "graphs" / "engines" / "gpt-oss-120b" / f"b200-{role}.yaml").read_text()
        assert config_map["data"][f"{role}.yaml"] == engine_file
        component = components[role]
        assert component["replicas"] == 1
        container = component["podTemplate"]["spec"]["containers"][0]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        env = {item["name"]: item["value"] for item in container["env"]}
        assert env["TRTLLM_ENABLE_PDL"] == "1" and env["HF_HOME"] == "/opt/models"
        volumes = {volume["name"]: volume for volume in component["podTemplate"]["spec"]["volumes"]}
        assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == "gpt-oss-cache"
        assert volumes["dynamo-oss-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    frontend = components["frontend"]["podTemplate"]["spec"]["containers"]
    assert [c["name"] for c in frontend] == ["main", "gateway"]
    # The frontend's container hands the operator's NATS_SERVER to the gateway (stored responses), then runs Dynamo's.
    assert frontend[0]["command"] == ["/bin/sh", "-c"]
    handed, _, started = frontend[0]["args"][0].partition(" && exec ")
    assert (
        handed == "(umask 077 && printf '%s' \"$NATS_SERVER\" > /run/dynamo-oss/nats/server)"
    )  # owner-only: it may hold a password
    args = shlex.split(started)[1:]
    assert args[:2] == ["-m", "dynamo.frontend"]
    assert args[args.index("--router-mode") + 1] == "kv" and args[args.index("--migration-limit") + 1] == "3"
    assert args[args.index("--http-host") + 1] == "127.0.0.1"  # only the gateway faces the Service
    assert frontend[1]["args"] == ["-m", "dynamo_oss.gateway", "--config", "/opt/dynamo-oss/config/gateway.json"]
    gateway = GatewayConfig.model_validate_json(config_map["data"]["gateway.json"])
    assert gateway.nats is not None and gateway.nats.url_file == Path("/run/dynamo-oss/nats/server")
    assert gateway.cluster_share is None  # one frontend pod: its limits are its own counts, no NATS traffic for them
    assert gateway.responses is not None and (gateway.nats.prefix_env, gateway.responses.bucket) == (
        "POD_NAMESPACE",
        "responses-gpt-oss-120b-disagg-1p1d",
    )
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in frontend[1][
        "env"
    ]


def test_session_affinity_reaches_dynamo_s_frontend_with_the_kv_router_only(tmp_path: Path) -> None:
    """frontend.session_affinity_s keeps a conversation on its worker (the gateway names Responses sessions):
    Dynamo's --router-session-affinity-ttl-secs, which only its KV router honours."""
    graph = yaml.safe_load((REPO / "graphs" / "agg.yaml").read_text())
    engine_args = REPO / "graphs" / graph["pools"]["agg"]["engine_args"]
    graph["pools"]["agg"]["engine_args"] = str(engine_args)

    def frontend_args(**frontend: object) -> list[str]:
        path = tmp_path / "graph.yaml"
        path.write_text(yaml.safe_dump({**graph, "frontend": {**graph.get("frontend", {}), **frontend}}))
        return frontend_config(build_deployment(load_graph(path)), None, None).args()

    args = frontend_args(session_affinity_s=600)
    assert args[args.index("--router-session-affinity-ttl-secs") + 1] == "600"
    assert "--router-session-affinity-ttl-secs" not in frontend_args()
    with pytest.raises(GraphError, match="session_affinity_s needs router kv"):
        frontend_args(session_affinity_s=600, router="round-robin")


def test_the_pod_monitor_scrapes_the_graphs_pods_on_the_ports_the_operator_names() -> None:
    manifests = render(REPO / "graphs" / "agg.yaml")
    monitor = by_kind(manifests, "PodMonitor")[0]
    name = by_kind(manifests, "DynamoGraphDeployment")[0]["metadata"]["name"]
    assert monitor["spec"]["selector"]["matchLabels"] == {"nvidia.com/dynamo-graph-deployment-name": name}
    scraped = {(e["port"], e["path"]) for e in monitor["spec"]["podMetricsEndpoints"]}
    # Dynamo's frontend is on the pod's loopback behind the gateway: its series come through the gateway's
    # metrics port, which the frontend Service does not expose; the endpoint's port serves none.
    assert scraped == {
        ("gateway-metrics", "/metrics/frontend"),
        ("system", "/metrics"),
        ("metrics", "/metrics"),
        ("gateway-metrics", "/metrics"),
    }
    # The frontend's traffic carries the namespace Dynamo's planner looks for: the operator's DYN_NAMESPACE.
    frontend = next(e for e in monitor["spec"]["podMetricsEndpoints"] if e["path"] == "/metrics/frontend")
    assert frontend["relabelings"][1:] == [
        {
            "sourceLabels": ["__meta_kubernetes_namespace"],
            "targetLabel": "dynamo_namespace",
            "replacement": f"$1-{name}",
        }
    ]
    (dgd,) = by_kind(manifests, "DynamoGraphDeployment")
    (frontend_component,) = [c for c in dgd["spec"]["components"] if c["type"] == "frontend"]
    (gateway,) = [c for c in frontend_component["podTemplate"]["spec"]["containers"] if c["name"] == "gateway"]
    assert [port["name"] for port in gateway["ports"]] == ["gateway-metrics"]  # not the Service's `http`


def test_a_graph_without_api_keys_is_refused_unless_it_says_none(tmp_path: Path) -> None:
    graph = yaml.safe_load((REPO / "graphs" / "agg.yaml").read_text())
    del graph["gateway"]
    for pool in graph["pools"].values():
        pool["engine_args"] = str(REPO / "graphs" / pool["engine_args"])
    (tmp_path / "open.yaml").write_text(yaml.safe_dump(graph))
    refused = run_dynamo("deploy", str(tmp_path / "open.yaml"))
    assert refused.returncode == 2 and "gateway.auth: is not given" in refused.stderr, refused.stderr
    assert refused.stdout == ""  # nothing rendered
    graph["gateway"] = {"auth": "none"}
    (tmp_path / "open.yaml").write_text(yaml.safe_dump(graph))
    assert run_dynamo("deploy", str(tmp_path / "open.yaml")).returncode == 0


def test_the_dashboards_ride_along_as_a_grafana_config_map() -> None:
    printed = run_dynamo("deploy", "graphs/disagg.yaml")
    (dashboards,) = [m for m in yaml.safe_load_all(printed.stdout) if m["metadata"]["name"].endswith("-dashboards")]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name, text in dashboards["data"].items():
        assert text == (REPO / "deploy" / "grafana" / "dashboards" / name).read_text()


def test_worker_command_lines_parse_with_dynamos_own_parser_against_the_mounted_files(
    trtllm_parse_args,  # noqa: ANN001 - Dynamo's parse_args
    tmp_path: Path,
) -> None:
    """What the pods run: the ConfigMap's files where the mount puts them, and $(DYN_NAMESPACE)
    expanded from the operator's environment, the way the kubelet does."""
    manifests = render(REPO / "graphs" / "disagg.yaml")
    for name, text in manifests[0]["data"].items():
        (tmp_path / name).write_text(text)
    components = by_kind(manifests, "DynamoGraphDeployment")[0]["spec"]["components"]
    workers = [component for component in components if component["type"] in ("prefill", "decode")]
    assert len(workers) == 2
    for component in workers:
        argv = component["podTemplate"]["spec"]["containers"][0]["args"]
        assert argv[:2] == ["-m", "dynamo.trtllm"]
        mounted = [arg.replace(str(CONFIG_MOUNT), str(tmp_path)) for arg in argv[2:]]
        expanded = [re.sub(r"\$\(DYN_NAMESPACE\)", "default-gpt-oss-120b-disagg", arg) for arg in mounted]
        config = trtllm_parse_args(expanded)
        assert config.namespace == "default-gpt-oss-120b-disagg"
        assert config.disaggregation_mode.value == component["type"]
        assert Path(config.extra_engine_args).read_text() == manifests[0]["data"][f"{component['type']}.yaml"]


def test_the_readmes_graph_brings_the_sla_planner_with_its_kubernetes_connector(
    graph_folder: Path, dynamo_planner_config: type
) -> None:
    graph = REPO / "graphs" / "disagg.yaml"
    manifests = render(graph)
    components = by_kind(manifests, "DynamoGraphDeployment")[0]["spec"]["components"]
    planner = components[-1]
    assert planner["type"] == "planner" and planner["replicas"] == 1
    args = planner["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["-m", "dynamo_oss.planner"]  # the image carries the project, plugin included
    config = json.loads(args[args.index("--config") + 1])
    assert config["environment"] == "kubernetes" and config["mode"] == "disagg"
    plugins = {p["class"]: p for p in config["plugin_registration"]["in_process_plugins"]}
    assert plugins["SlaPropose"]["kwargs"]["ranges"] == {
        "prefill": {"min": 1, "max": 4},
        "decode": {"min": 1, "max": 6},
    }
    assert plugins["PoolRanges"]["kwargs"]["ranges"] == plugins["SlaPropose"]["kwargs"]["ranges"]
    assert plugins["LoadForecast"]["plugin_type"] == "predict"
    # Dynamo's own configuration model accepts it, plugins and all.
    entries = dynamo_planner_config.model_validate(config).plugin_registration.in_process_plugins
    assert next(entry for entry in entries if entry.class_ == "SlaPropose").kwargs["itl_ms"] == 20
    # Everything but the connector matches what the planner runs with on one host.
    _, host = plan_graph(graph, graph_folder / "run")
    host_config = json.loads(next(f for f in host.files if f.path.name == "planner.json").content)
    assert {k: v for k, v in config.items() if k != "environment"}.items() <= host_config.items()
    assert {c["name"]: c["replicas"] for c in components if c["type"] != "planner"} == {
        "frontend": 1,
        "prefill": 1,
        "decode": 1,
    }  # the autoscale minimums
    assert manifest_errors(by_kind(manifests, "DynamoGraphDeployment")[0]) == []


def test_graphs_a_cluster_cannot_run_are_refused_naming_the_field(graph_folder: Path) -> None:
    source = yaml.safe_load((REPO / "graphs" / "disagg.yaml").read_text())
    source["pools"]["decode"] = {"workers": 1, "engine": "mocker"}
    source["pools"]["prefill"]["engine_args"] = str(REPO / "graphs" / source["pools"]["prefill"]["engine_args"])
    source["name"] = "a-name-kubernetes-would-cut-short-in-its-service-names-x"
    graph = graph_folder / "local.yaml"
    graph.write_text(yaml.safe_dump(source))
    refused = run_dynamo("deploy", str(graph), "--out", str(graph_folder / "out"))
    assert refused.returncode == 2
    assert "pools.decode.engine: is mocker" in refused.stderr and "name: is 56 characters" in refused.stderr
    assert not (graph_folder / "out").exists()  # nothing half-written


def test_the_kept_crd_schema_accepts_the_dynamo_1_6_wheels_own_templates() -> None:
    """A check on the schema's version: ai-dynamo 1.6.0 ships DynamoGraphDeployments of its own."""
    templates = sorted((Path(dynamo.profiler.__file__).parent / "templates" / "dgd").glob("*/*.yaml"))
    assert len(templates) >= 5
    for template in templates:
        assert manifest_errors(yaml.safe_load(template.read_text())) == [], template


def test_a_frontend_pod_requests_the_cores_its_dynamo_frontend_needs_at_the_peak() -> None:
    """What `dynamo deploy` renders: each pod's Dynamo frontend asks for the cores the sizing gives it (the
    "about 14 cores" `dynamo check` prints for the rack), not a core a gateway process, since the frontend
    spends more per token than the gateway does."""
    deployment, sizing = sized_deployment(
        build_deployment(load_graph(REPO / "graphs" / "gb200-nvl72.yaml")), on_cluster=True
    )
    manifests = render_manifests(
        deployment, ClusterTarget(image="registry.example/dynamo-oss:test"), planner_config(deployment)
    )
    (graph,) = by_kind(manifests, "DynamoGraphDeployment")
    frontend = next(c for c in graph["spec"]["components"] if c["name"] == "frontend")
    cpu = {c["name"]: c["resources"]["requests"]["cpu"] for c in frontend["podTemplate"]["spec"]["containers"]}
    assert sizing.frontend_cores_per_pod == 14 and cpu == {"main": "14", "gateway": "8"}


def test_the_rack_s_frontend_pods_autoscale_on_cpu_and_share_one_gateway_configuration() -> None:
    """gb200-nvl72: frontend pods of 8 gateway processes, 6 at start, that an HPA on the operator's
    scaling adapter grows to 24; every pod's gateway reads the ConfigMap's one configuration, so all
    share the response store, the API keys and the reasoning key."""
    manifests = render(REPO / "graphs" / "gb200-nvl72.yaml")
    validated = [manifest for manifest in manifests if manifest["kind"] not in ("PodMonitor", "PrometheusRule")]
    assert [error for manifest in validated for error in manifest_errors(manifest)] == []
    (graph,) = by_kind(manifests, "DynamoGraphDeployment")
    name = graph["metadata"]["name"]
    frontend = next(c for c in graph["spec"]["components"] if c["name"] == "frontend")
    assert frontend["replicas"] == 6 and frontend["scalingAdapter"] == {"enabled": True}
    (autoscaler,) = by_kind(manifests, "HorizontalPodAutoscaler")
    assert autoscaler["spec"]["scaleTargetRef"] == {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeploymentScalingAdapter",
        "name": f"{name}-frontend",  # the adapter the operator makes for the frontend component
    }
    assert (autoscaler["spec"]["minReplicas"], autoscaler["spec"]["maxReplicas"]) == (6, 24)
    assert autoscaler["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
    pod = frontend["podTemplate"]["spec"]
    gateway = next(c for c in pod["containers"] if c["name"] == "gateway")
    assert gateway["resources"]["requests"]["cpu"] == "8"  # a core a process: what the CPU target is a share of
    config_map = next(m for m in by_kind(manifests, "ConfigMap") if "gateway.json" in m["data"])
    config = GatewayConfig.model_validate_json(config_map["data"]["gateway.json"])
    assert config.processes == 8 and config.reasoning_key_file == Path("/etc/dynamo-oss/reasoning/key")
    assert config.responses is not None and config.responses.bucket == f"responses-{name}"
    # 6 to 24 pods, one gateway each: a key's limits hold over all of them, shared over the operator's NATS.
    assert config.cluster_share is not None and config.cluster_share.channel == f"limits-{name}"
    assert config.nats is not None and config.nats.prefix_env == "POD_NAMESPACE"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["dynamo-oss-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert volumes["reasoning-key"]["secret"]["secretName"] == f"{name}-reasoning-key"
    secret_env = next(env for env in gateway["env"] if env["name"] == "DYNAMO_API_KEY")
    assert secret_env["valueFrom"]["secretKeyRef"]["name"] == f"{name}-api-keys"
    assert volumes["gateway-state"]["emptyDir"]["medium"] == "Memory"  # the pod's processes' ledger and metrics
