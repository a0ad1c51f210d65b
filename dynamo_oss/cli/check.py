"""`dynamo check GRAPH`: validate a graph file and print how it would run on this host."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from dynamo_oss.cli.arguments import positive_float
from dynamo_oss.cli.endpoint import describe_endpoint, sized_deployment
from dynamo_oss.catalog.addresses import is_loopback
from dynamo_oss.catalog.names import EngineName
from dynamo_oss.deployment.host import HostPlan
from dynamo_oss.deployment.model import Deployment, build_deployment
from dynamo_oss.engines import engine_for
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.graph.errors import Problem
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.launch.prepare import prepare
from dynamo_oss.planner.settings import planner_config

RUN_DIR_PLACEHOLDER = Path("<run-dir>")  # serve's --run-dir, or the folder it makes


def add_graph_arguments(parser: argparse.ArgumentParser, run_dir_help: str) -> None:
    """What `check` and `serve` both take: the graph, the engine swap, and the run folder."""
    parser.add_argument("graph", type=Path, help="graph file (YAML), e.g. graphs/disagg.yaml")
    parser.add_argument("--run-dir", type=Path, help=run_dir_help)
    parser.add_argument(
        "--node",
        metavar="NAME",
        help="a graph of several nodes (hardware.nodes): the node whose share this is, one of the graph's node "
        "names (default: infrastructure.node, which runs etcd, NATS, Prometheus, the frontend and the planner)",
    )
    parser.add_argument(
        "--engine",
        choices=["mocker"],
        help="run every pool on Dynamo's mocker (simulated engine, no GPU needed) instead of the graph's engines",
    )
    parser.add_argument(
        "--mocker-responses",
        type=Path,
        metavar="TRACE.jsonl",
        help="recorded responses mocker workers replay, token for token, for requests that carry "
        'nvext {"annotations": ["output_replay_id:ID"]} (rows: request_id, output_length, output_token_ids); '
        "default: the conformance suite's recordings. Other requests get a generated harmony answer",
    )
    parser.add_argument(
        "--mocker-time-scale",
        type=positive_float,
        default=1.0,
        metavar="F",
        help="run mocker workers F times slower than the modelled hardware (steps and KV handoff alike), so "
        "a small machine keeps up with a fast model; divide measured latencies by F (default: 1)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a graph file and print its host plan",
        description="Validate GRAPH and print the resolved host plan: ports, GPU placement and the command "
        "line of every process `dynamo serve` would start, and the files serve writes first. Exits 2, "
        "naming each field, if the graph cannot run.",
    )
    add_graph_arguments(parser, f"the --run-dir serve would get, for the paths shown (default: {RUN_DIR_PLACEHOLDER})")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=check)


def plan_graph(
    graph: Path,
    run_dir: Path,
    engine_override: EngineName | None = None,
    mocker_responses: Path | None = None,
    mocker_time_scale: float = 1.0,
    node: str | None = None,
) -> tuple[Deployment, HostPlan]:
    """Load, validate, build and place a graph, size its endpoint, and plan `node`'s share of it
    (`plan_deployment`)."""
    deployment, _ = sized_deployment(
        build_deployment(load_graph(graph), engine_override=engine_override), mocker_time_scale
    )
    return deployment, plan_deployment(deployment, run_dir, mocker_responses, mocker_time_scale, node)


def plan_deployment(
    deployment: Deployment,
    run_dir: Path,
    mocker_responses: Path | None = None,
    mocker_time_scale: float = 1.0,
    node: str | None = None,
) -> HostPlan:
    """`node`'s share of a deployment with its planner (default: the node running the infrastructure),
    as `check` prints it and `serve` runs it; GraphError lists whatever stops it from running there."""
    return prepare(
        deployment,
        node,
        run_dir=run_dir,
        planner=planner_config(deployment, mocker_time_scale),
        mocker_responses=mocker_responses,
        mocker_time_scale=mocker_time_scale,
    )


def check(args: argparse.Namespace) -> int:
    built = build_deployment(load_graph(args.graph), engine_override=args.engine)
    deployment, sizing = sized_deployment(built, args.mocker_time_scale)
    endpoint = sizing.model_dump(mode="json")
    if deployment.placement.on_cluster:
        placement = deployment.placement
        if args.json:
            print(json.dumps({**placement.model_dump(mode="json"), "endpoint_sizing": endpoint}, indent=2))
        else:
            print("\n".join([describe_cluster(deployment), *describe_endpoint(sizing)]))
        return 0
    run_dir = args.run_dir.resolve() if args.run_dir else RUN_DIR_PLACEHOLDER
    plan = plan_deployment(deployment, run_dir, args.mocker_responses, args.mocker_time_scale, args.node)
    if args.json:
        print(json.dumps({**plan.model_dump(mode="json"), "endpoint_sizing": endpoint}, indent=2))
    else:
        print("\n".join([describe(deployment, plan), *describe_endpoint(sizing)]))
    for warning in exposure_warnings(plan):
        print(warning, file=sys.stderr)
    for problem in (plan.tls.problems() if plan.tls else []) + (api_key_problems(deployment) if plan.api_keys else []):
        print(
            f"warning: {problem}; `dynamo serve` on node {plan.node} refuses to start until it can read it",
            file=sys.stderr,
        )
    return 0


def describe_cluster(deployment: Deployment) -> str:
    """A graph of `nodes: N`: where each worker lands; Kubernetes picks the hosts."""
    lines = [
        f"graph {deployment.name}: valid, on a cluster of {len(deployment.placement.nodes)} nodes "
        "(`dynamo deploy` renders it; Kubernetes picks the hosts)",
        "  placement:",
    ]
    return "\n".join(lines + [f"    {line}" for line in deployment.placement.describe()])


# The listeners that require a certificate the graph's authority signed once `infrastructure.tls` is set.
SECURED_BY_TLS = ("infrastructure.etcd.client_port", "infrastructure.etcd.peer_port", "infrastructure.nats.port")


def exposure_warnings(plan: HostPlan) -> list[str]:
    """A line for each listener the graph opens beyond loopback without authenticating its clients:
    the OpenAI endpoint where the graph binds it so, and on a graph of several nodes the node's own
    listeners, but for etcd's and NATS's when they require the graph's certificates."""
    secured = (SECURED_BY_TLS if plan.tls else ()) + (("frontend.port",) if plan.api_keys else ())
    return [
        f"warning: {use.field} listens on {use.host}:{use.port}: "
        + (
            "the endpoint is open to the network with no authentication in front; put an authenticating proxy or "
            "a firewall before it"
            if use.field == "frontend.port"
            else "reachable from the network with no "
            "authentication; keep the nodes' addresses on a private network behind a firewall"
        )
        for process in plan.processes
        for use in process.ports
        if not is_loopback(use.host) and use.field not in secured
    ] + clear_infrastructure_warnings(plan)


def clear_infrastructure_warnings(plan: HostPlan) -> list[str]:
    """A line for etcd or NATS reached beyond this host in clear: the graph's discovery and events,
    and whoever can reach them can register a worker or read the KV events."""
    reached = [("infrastructure.etcd", url) for url in plan.etcd_endpoints] + [("infrastructure.nats", plan.nats_url)]
    return [
        f"warning: {field} is reached at {url} in clear, with no client certificate; give infrastructure.tls "
        "{ca, cert, key} (and https:// or tls:// URLs), or keep it on a private network behind a firewall"
        for field, url in reached
        if urlsplit(url).scheme in ("http", "nats") and not is_loopback(urlsplit(url).hostname or "")
    ]


def _keys_source(deployment: Deployment) -> str:
    gateway = deployment.gateway
    assert gateway is not None
    return f"from {gateway.keys_file}" if gateway.keys_file else f"from the environment variable {gateway.keys_env}"


def api_key_problems(deployment: Deployment) -> list[Problem]:
    """Why the gateway could not read the API keys the graph names, here."""
    gateway = deployment.gateway
    if gateway is None or not gateway.requires_keys:
        return []
    try:
        ApiKeys.from_file(gateway.keys_file) if gateway.keys_file else ApiKeys.from_env(gateway.keys_env or "")
    except KeysUnusable as error:
        field = "gateway.auth.keys_file" if gateway.keys_file else "gateway.auth.keys_env"
        return [Problem(path=field, message=str(error))]
    return []


def describe(deployment: Deployment, plan: HostPlan) -> str:
    lines = [
        f"graph {plan.graph}: valid" + (f"; the share of node {plan.node}" if deployment.placement.nodes[1:] else ""),
        f"  endpoint   {plan.endpoint}  (model {plan.served_name}, namespace {plan.namespace})",
        f"  etcd       {', '.join(plan.etcd_endpoints)}",
        f"  nats       {plan.nats_url}",
        *([f"  tls        mutual, trusting {plan.tls.ca}; this node shows {plan.tls.cert}"] if plan.tls else []),
        *([f"  api keys   {_keys_source(deployment)}"] if plan.api_keys else []),
        *([f"  metrics    {plan.prometheus_url} (Prometheus)"] if plan.prometheus_url else []),
        *(
            [f"  launcher   http://{plan.launcher_metrics.host}:{plan.launcher_metrics.port}/metrics"]
            if plan.launcher_metrics
            else []
        ),
        "  placement:",
        *(f"    {line}" for line in deployment.placement.describe()),
        "  processes:",
    ]
    for process in plan.processes:
        ports = ", ".join(f"{use.port} ({use.field})" for use in process.ports) or "-"
        gpus = ",".join(map(str, process.gpus)) or "-"
        engine = f"  engine {process.engine}" if process.engine else ""
        lines.append(f"    {process.name:<10} ports {ports}  gpus {gpus}{engine}")
        own_env = {key: value for key, value in process.env.items() if key not in plan.shared_env}
        env = " ".join(f"{key}={value}" for key, value in own_env.items())
        lines.append(f"      $ {env + ' ' if env else ''}{shlex.join(process.argv)}")
    if plan.endpoints_elsewhere:
        lines.append(
            "  endpoints on other nodes" + (", scraped by this node's Prometheus:" if plan.worker_targets else ":")
        )
        for other in plan.endpoints_elsewhere:
            ports = [
                f"{p.name} " + ", ".join(f"{use.host}:{use.port} ({use.field})" for use in p.ports)
                for p in other.processes
            ]
            lines.append(f"    {other.node}: {'; '.join(ports)}")
    if plan.spare_workers:
        spare = ", ".join(f"{p.name} (port {p.ports[0].port})" for p in plan.spare_workers)
        lines.append(f"  worker slots a pool grows into, on free GPUs: {spare}")
    if plan.files:
        lines.append("  files written when the graph is served:")
        lines += [f"    {file.path}  ({file.purpose})" for file in plan.files]
    for pool in deployment.pools:
        if pool.autoscale:
            lines.append(
                f"  note: pool {pool.role} autoscales between {pool.autoscale.min} and {pool.autoscale.max} "
                f"workers: it starts at {pool.workers}, then Dynamo's planner sizes it "
                + (
                    "for the TTFT and ITL targets (sla)"
                    if deployment.planner and deployment.planner.mode == "sla"
                    else "on load thresholds (load)"
                )
            )
    for engine_name in sorted(deployment.engines):
        reason = engine_for(engine_name).unavailable_reason(plan.gpus_needed(engine_name), plan.roles_of(engine_name))
        if reason:
            lines.append(f"  note: engine {engine_name} cannot run on this host: {reason}")
    return "\n".join(lines)
