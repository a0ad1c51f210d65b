"""`dynamo status [GRAPH|RUN_DIR]`: a served graph's pools, processes and the planner's last decision,
from its launcher's control API while it runs, else from the state it left in the run folder; on
a graph over several nodes, every node's workers as discovery holds them (launch.discovery)."""

from __future__ import annotations

import argparse
import asyncio
import json

from dynamo_oss.cli.arguments import add_run_argument
from dynamo_oss.launch.control_client import ControlClient
from dynamo_oss.launch.discovery import describe as describe_nodes
from dynamo_oss.launch.discovery import nodes_seen
from dynamo_oss.launch.run_dirs import find_run
from dynamo_oss.launch.state import RunState
from dynamo_oss.planner.look import Look


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show a served graph's pools, processes and the planner's last decision",
        description="Ask the launcher of a running graph (its control API), or read the state.json a stopped "
        "one left, and print each pool's target, live and draining workers and restarts, the planner's last "
        "decision, and each process's pid, restarts and ports. On a graph over several nodes, run on any node: it "
        "also lists every node's workers as discovery (the graph's etcd) holds them, and which are missing.",
    )
    add_run_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the state as one JSON object")
    parser.set_defaults(handler=status)


def status(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    state = RunState.read(run_dir)
    if not state.stopped and state.supervisor_alive and state.control_url:
        state = ControlClient.for_run(run_dir).status()
    seen = asyncio.run(nodes_seen(state.etcd, state.namespace, state.nodes)) if state.nodes and state.etcd else None
    if args.json:
        document = state.model_dump(mode="json")
        if state.nodes:
            document["discovery"] = [node.model_dump() for node in seen] if seen is not None else None
        print(json.dumps(document, indent=2))
        return 0
    if state.stopped or not state.supervisor_alive:
        condition = "stopped"
    else:
        condition = "ready" if state.ready else "starting"
    lines = [f"graph {state.graph}: {condition}, {state.endpoint}", f"  run folder: {run_dir}", "  pools:"]
    for p in state.pools:
        sizing = f"autoscaled {p.min}-{p.max}" if p.autoscaled else "fixed"
        lines.append(
            f"    {p.role:<8} {p.engine:<7} target {p.target}  live {p.live}  draining {p.draining}  "
            f"restarts {p.restarts}  ({sizing})"
        )
    decision = state.last_decision
    if decision is not None:
        sizes = ", ".join(f"{role} {count}" for role, count in decision.workers.items())
        took = f" in {decision.seconds:.1f} s" if decision.seconds is not None else ""
        lines.append(
            f"  last planner decision: #{decision.decision_id} at {decision.at:%H:%M:%S} UTC: {sizes}: "
            f"{decision.outcome}{took}"
        )
        if decision.why:
            lines.append(f"    why: {decision.why}")
    look = Look.read(run_dir)
    if look is not None:
        lines.append(f"  planner's latest look (sla), at {look.at:%H:%M:%S} UTC: {look.reason}")
    if state.nodes and state.etcd:
        lines += describe_nodes(seen, state.etcd)
    lines.append(f"  processes{f' on node {state.node}' if state.nodes else ''}:")
    for p in state.processes:
        pid = str(p.pid) if p.pid else "-"
        ports = ",".join(map(str, p.ports)) or "-"
        lines.append(f"    {p.name:<10} pid {pid:<8} restarts {p.restarts}  ports {ports}")
    print("\n".join(lines))
    return 0
