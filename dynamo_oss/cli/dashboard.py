"""`dynamo dashboard write|snapshot`: the Grafana dashboards (dynamo_oss/observe) as JSON, with the
README graph's alert rules beside them, or the dashboards as PNGs."""

from __future__ import annotations

import argparse
from pathlib import Path

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.cli.arguments import add_run_argument
from dynamo_oss.cli.rendered_files import write_or_check
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.launch.prepare import graph_alert_rules
from dynamo_oss.launch.run_dirs import find_run
from dynamo_oss.launch.state import RunState
from dynamo_oss.observe.dashboards import DASHBOARDS, render
from dynamo_oss.observe.snapshot import snapshot

DEFAULT_OUT = Path("deploy/grafana/dashboards")
DEFAULT_RULES_OUT = Path("deploy/prometheus")
README_GRAPH = Path("graphs/disagg.yaml")  # whose targets the committed alert rules carry


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dashboard", help="write the Grafana dashboards, or draw them without Grafana")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    write = actions.add_parser(
        "write",
        help="write the dashboards as JSON, and the README graph's alert rules",
        description="Render the overview, disaggregation, planner and infrastructure dashboards from code "
        f"into OUT (default {DEFAULT_OUT}), where Grafana's provisioning (deploy/grafana/provisioning) "
        f"loads them, and {README_GRAPH}'s alert rules into RULES_OUT (every served graph writes its own into its "
        "run folder). --check exits 1 when the files there differ from the code.",
    )
    write.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the JSON files")
    write.add_argument("--rules-out", type=Path, default=DEFAULT_RULES_OUT, help="folder for the alert rules")
    write.add_argument("--check", action="store_true", help="compare instead of writing")
    write.set_defaults(handler=write_dashboards)
    draw = actions.add_parser(
        "snapshot",
        help="draw each dashboard's panels from Prometheus into PNGs",
        description="Run every panel's queries over the last MINUTES against the Prometheus of a served "
        "graph and draw each dashboard as one PNG in OUT, for a look where no Grafana runs.",
    )
    add_run_argument(draw)
    draw.add_argument("--out", type=Path, default=Path("dashboard-snapshots"), help="folder for the PNGs")
    draw.add_argument("--minutes", type=float, default=15, help="time range drawn")
    draw.add_argument("--only", choices=sorted(DASHBOARDS), action="append", help="draw only these dashboards")
    draw.set_defaults(handler=snapshot_dashboards)


def write_dashboards(args: argparse.Namespace) -> int:
    regenerate = f"uv run dynamo dashboard write --out {args.out} --rules-out {args.rules_out}"
    dashboards = write_or_check(render(), args.out, check=args.check, regenerate=regenerate)
    rules = {"alert-rules.yml": graph_alert_rules(build_deployment(load_graph(README_GRAPH)))}
    return max(dashboards, write_or_check(rules, args.rules_out, check=args.check, regenerate=regenerate))


def snapshot_dashboards(args: argparse.Namespace) -> int:
    state = RunState.read(find_run(args.run))
    if not state.prometheus_url:
        raise UserError(f"graph {state.graph} runs no Prometheus: give it an observability section")
    for name, text in render().items():
        if args.only and name.removesuffix(".json") not in args.only:
            continue
        out = args.out / f"{name.removesuffix('.json')}.png"
        snapshot(text, state.prometheus_url, state.graph, state.served_name, out, minutes=args.minutes)
        print(f"wrote {out}")
    return 0
