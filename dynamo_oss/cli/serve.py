"""`dynamo serve GRAPH`: run a graph on this host until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path

from dynamo_oss.catalog.addresses import interface_of
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.cli.check import add_graph_arguments, api_key_problems, exposure_warnings, plan_deployment
from dynamo_oss.cli.endpoint import describe_chosen, sized_deployment
from dynamo_oss.deployment.host import HostPlan
from dynamo_oss.deployment.model import Deployment, build_deployment
from dynamo_oss.engines import engine_for
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.launch.prepare import write_plan_files
from dynamo_oss.launch.probes import port_in_use
from dynamo_oss.launch.run_dirs import KEEP_RUNS, new_run_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run a graph on this host",
        description="Start the graph's etcd and NATS (when embedded), Dynamo's frontend and every pool's "
        "workers; wait until the model is served; restart crashed workers; on Ctrl-C or SIGTERM drain "
        "and stop everything. Exits 2 before starting anything when the graph cannot run here.",
    )
    add_graph_arguments(
        parser,
        "folder for logs, etcd/NATS data, mocker profiles and state.json (default: a new folder under "
        f"~/.cache/dynamo-oss/runs, of which the last {KEEP_RUNS} are kept)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="echo every process's log lines to the terminal, not only warnings and errors (all lines are "
        "always in RUN_DIR/logs)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        help="seconds to wait for every worker to register (default: the engine's, "
        "120 for the mocker and 1800 for trtllm)",
    )
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    if args.run_dir is not None:
        return _serve(args, args.run_dir.resolve())
    run_dir = new_run_dir(args.graph.stem)
    try:
        return _serve(args, run_dir)
    except UserError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing was started: nothing to keep
        raise


def _serve(args: argparse.Namespace, run_dir: Path) -> int:
    print(f"[dynamo-oss] preparing {args.graph} (model folder, host plan)", flush=True)
    built = build_deployment(load_graph(args.graph), engine_override=args.engine)
    deployment, sizing = sized_deployment(built, args.mocker_time_scale)
    plan = plan_deployment(deployment, run_dir, args.mocker_responses, args.mocker_time_scale, args.node)
    _refuse_unavailable_engines(deployment, plan, args.graph)
    _refuse_another_machines_node(plan)
    _refuse_ports_taken(plan)
    problems = (plan.tls.problems() if plan.tls else []) + (api_key_problems(deployment) if plan.api_keys else [])
    if problems:
        raise GraphError(str(args.graph), problems)
    for warning in exposure_warnings(plan):
        print(f"[dynamo-oss] {warning}", flush=True)
    print(f"[dynamo-oss] endpoint: {describe_chosen(sizing)}", flush=True)
    for problem in sizing.warnings:
        print(f"[dynamo-oss] warning: {problem}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_plan_files(plan)
    print(f"[dynamo-oss] serving {plan.graph}; logs and state in {run_dir}", flush=True)
    # Imported here, not at the top: the supervisor brings fastapi and uvicorn (its control API),
    # half a second that every other command would pay, since one parser registers them all.
    from dynamo_oss.launch.supervisor import Supervisor

    supervisor = Supervisor(plan, verbose=args.verbose)
    return asyncio.run(supervisor.run(ready_timeout_s=args.ready_timeout or plan.ready_timeout_s))


def _refuse_unavailable_engines(deployment: Deployment, plan: HostPlan, graph: Path) -> None:
    for name in sorted(deployment.engines):
        reason = engine_for(name).unavailable_reason(plan.gpus_needed(name), plan.roles_of(name))
        if reason:
            raise UserError(
                f"{graph}: cannot serve with engine {name} on this host: {reason}.\n"
                f"To run the same graph on Dynamo's simulated engine (no GPU needed):\n"
                f"  dynamo serve {graph} --engine mocker"
            )


def _refuse_another_machines_node(plan: HostPlan) -> None:
    """A node's share runs on the machine that has its address: anywhere else it could bind nothing."""
    share = next((share for share in plan.nodes if share.name == plan.node), None)
    if share is not None and interface_of(share.address) is None:
        raise UserError(
            f"--node {plan.node}: its address {share.address} (hardware.nodes) is on no interface of "
            "this machine. Start this machine's own node, or correct its address in the graph."
        )


def _refuse_ports_taken(plan: HostPlan) -> None:
    uses = [use for p in plan.processes + plan.spare_workers for use in p.ports] + (
        [plan.launcher_metrics] if plan.launcher_metrics else []
    )
    taken = [use for use in uses if port_in_use(use.host, use.port)]
    if not taken:
        return
    lines = [f"{plan.graph}: {len(taken)} port(s) already in use on this host, nothing was started:"]
    lines += [
        f"  - {use.field}: {use.host}:{use.port} is taken (another graph or program listens there)" for use in taken
    ]
    lines.append("Stop what holds them, or choose other ports in the graph file.")
    raise UserError("\n".join(lines))
