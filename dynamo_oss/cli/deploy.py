"""`dynamo deploy GRAPH...`: the graph as Kubernetes manifests for Dynamo's operator, like `helm template`."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

import yaml

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.cli.endpoint import sized_deployment
from dynamo_oss.cli.rendered_files import write_or_check
from dynamo_oss.deployment.kubernetes import ClusterTarget, manifests_yaml, render_manifests
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.launch.prepare import graph_alert_rules
from dynamo_oss.observe.dashboards import render as render_dashboards
from dynamo_oss.planner.settings import planner_config

DEFAULT_IMAGE = f"dynamo-oss:{version('dynamo-oss')}"  # what `docker build -t dynamo-oss:VERSION .` makes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="render a graph as Kubernetes manifests for Dynamo's operator",
        description="Render each GRAPH as the resources `kubectl apply -f` takes on a cluster that runs "
        "Dynamo's operator (1.6): a DynamoGraphDeployment (nvidia.com/v1beta1) with the frontend, one "
        "component per pool and Dynamo's planner when a pool autoscales; a ConfigMap with the engine "
        "arguments; a PodMonitor for a prometheus-operator Prometheus; the Grafana dashboards as a "
        "ConfigMap. Nothing is sent to a cluster. Without --out the YAML goes to stdout.",
    )
    parser.add_argument("graphs", type=Path, nargs="+", metavar="GRAPH", help="graph file(s), e.g. graphs/disagg.yaml")
    parser.add_argument("--out", type=Path, help="write OUT/<graph file name> for each graph instead of stdout")
    parser.add_argument("--check", action="store_true", help="with --out: exit 1 when the files there are stale")
    parser.add_argument("--namespace", help="Kubernetes namespace of every resource (default: kubectl's current one)")
    parser.add_argument(
        "--image",
        default=DEFAULT_IMAGE,
        help=f"the dynamo-oss image built from the Dockerfile, pushed where the cluster pulls (default: {DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--model-cache",
        metavar="PVC",
        help="PersistentVolumeClaim the workers keep the Hugging Face cache on (mounted at /opt/models); "
        "without it every worker pod downloads the weights (61 GB for gpt-oss-120b) when it starts",
    )
    parser.set_defaults(handler=deploy)


def deploy(args: argparse.Namespace) -> int:
    if args.check and args.out is None:
        raise UserError("--check compares with the files in --out; give --out DIR")
    target = ClusterTarget(
        namespace=args.namespace, image=args.image, model_cache=args.model_cache, dashboards=render_dashboards()
    )
    rendered = {}
    for graph in args.graphs:
        deployment, sizing = sized_deployment(build_deployment(load_graph(graph)), on_cluster=True)
        for problem in sizing.warnings:
            print(f"warning: {graph}: {problem}", file=sys.stderr)
        rules = yaml.safe_load(graph_alert_rules(deployment, selector=f'graph="{deployment.name}"', launcher=False))
        manifests = render_manifests(deployment, target, planner_config(deployment), rules)
        rendered[graph.with_suffix(".yaml").name] = manifests_yaml(manifests, graph.name)
    if args.out is None:
        sys.stdout.write("".join(rendered.values()))
        return 0
    regenerate = f"uv run dynamo deploy {' '.join(map(str, args.graphs))} --out {args.out}"
    return write_or_check(rendered, args.out, check=args.check, regenerate=regenerate)
