"""`dynamo check GRAPH`: validate a graph file and print how it would run on this host."""

from __future__ import annotations

import argparse
import shlex
import tempfile
from pathlib import Path

from dynamo_oss.engines import engine_for
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.plan import HostPlan, plan_graph_file

ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "DYN_SYSTEM_PORT", "TRTLLM_ENABLE_PDL")


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
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
        "other requests get random tokens",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a graph file and print its host plan",
        description="Validate GRAPH and print the resolved host plan: ports, GPU placement and the command "
        "line of every process `dynamo serve` would start. Exits 1 if the graph cannot run.",
    )
    parser.add_argument("graph", type=Path, help="graph file (YAML), e.g. graphs/disagg.yaml")
    add_engine_flags(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=check)


def check(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="dynamo-oss-check-") as run_dir:
        try:
            plan = plan_graph_file(
                args.graph,
                run_dir=Path(run_dir),
                engine_override=args.engine,
                mocker_responses=args.mocker_responses,
            )
        except GraphError as err:
            print(err)
            return 1
    print(plan.model_dump_json(indent=2) if args.json else describe(plan))
    return 0


def describe(plan: HostPlan) -> str:
    lines = [
        f"graph {plan.graph}: valid",
        f"  endpoint   {plan.endpoint}  (model {plan.served_name}, namespace {plan.namespace})",
        f"  etcd       {', '.join(plan.etcd_endpoints)}",
        f"  nats       {plan.nats_url}",
        "  processes:",
    ]
    for process in plan.processes:
        ports = ", ".join(f"{use.port} ({use.field})" for use in process.ports) or "-"
        gpus = ",".join(map(str, process.gpus)) or "-"
        engine = f"  engine {process.engine}" if process.engine else ""
        lines.append(f"    {process.name:<10} ports {ports}  gpus {gpus}{engine}")
        env = " ".join(f"{key}={process.env[key]}" for key in ENV_SHOWN if key in process.env)
        lines.append(f"      $ {env + ' ' if env else ''}{shlex.join(process.argv)}")
    for engine_name in sorted({p.engine for p in plan.workers() if p.engine}):
        reason = engine_for(engine_name).unavailable_reason(plan.gpus_needed(engine_name))
        if reason:
            lines.append(f"  note: engine {engine_name} cannot run on this host: {reason}")
    return "\n".join(lines)
