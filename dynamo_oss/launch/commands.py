"""`dynamo serve GRAPH`: run a graph on this host until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from dynamo_oss.engines import engine_for
from dynamo_oss.graph.commands import add_engine_flags
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.plan import HostPlan, plan_graph_file
from dynamo_oss.launch.probes import port_in_use
from dynamo_oss.launch.supervisor import Supervisor

READY_TIMEOUT_S = {"mocker": 120.0, "trtllm": 1800.0}  # TensorRT-LLM loads 61 GB of weights and warms up


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run a graph on this host",
        description="Start the graph's etcd and NATS (when embedded), Dynamo's frontend and every pool's "
        "workers; wait until the model is served; restart crashed workers; on Ctrl-C or SIGTERM drain "
        "and stop everything.",
    )
    parser.add_argument("graph", type=Path, help="graph file (YAML), e.g. graphs/disagg.yaml")
    add_engine_flags(parser)
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="folder for logs, etcd/NATS data and state.json (default: a temporary folder, removed on exit)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        help="seconds to wait for every worker to register (default: 120 with the mocker, 1800 with trtllm)",
    )
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    if args.run_dir is not None:
        return _serve(args, args.run_dir.resolve())
    run_dir = Path(tempfile.mkdtemp(prefix="dynamo-oss-"))
    code = _serve(args, run_dir)
    if code == 0 or not (run_dir / "logs").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        print(f"[dynamo-oss] logs kept for a look: {run_dir / 'logs'}", flush=True)
    return code


def _serve(args: argparse.Namespace, run_dir: Path) -> int:
    print(f"[dynamo-oss] preparing {args.graph} (model folder, host plan)", flush=True)
    try:
        plan = plan_graph_file(
            args.graph,
            run_dir=run_dir,
            engine_override=args.engine,
            mocker_responses=args.mocker_responses.resolve() if args.mocker_responses else None,
        )
    except GraphError as err:
        print(err)
        return 1
    refusal = _replay_refusal(plan, args.mocker_responses) or _engine_refusal(plan, args.graph) or _ports_taken(plan)
    if refusal:
        print(refusal)
        return 1
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"[dynamo-oss] serving {plan.graph}; logs and state in {run_dir}", flush=True)
    engines = {p.engine for p in plan.workers()}
    timeout = args.ready_timeout or max(READY_TIMEOUT_S[e] for e in engines if e)
    return asyncio.run(Supervisor(plan).run(ready_timeout_s=timeout))


def _replay_refusal(plan: HostPlan, trace: Path | None) -> str | None:
    if trace is None:
        return None
    if not trace.is_file():
        return f"--mocker-responses: file not found: {trace}"
    if not any(p.engine == "mocker" for p in plan.workers()):
        return "--mocker-responses: no pool runs the mocker; add --engine mocker to replay recorded responses"
    return None


def _engine_refusal(plan: HostPlan, graph: Path) -> str | None:
    for name in sorted({p.engine for p in plan.workers() if p.engine}):
        reason = engine_for(name).unavailable_reason(plan.gpus_needed(name))
        if reason:
            return (
                f"{graph}: cannot serve with engine {name} on this host: {reason}.\n"
                f"To run the same graph on Dynamo's simulated engine (no GPU needed):\n"
                f"  dynamo serve {graph} --engine mocker"
            )
    return None


def _ports_taken(plan: HostPlan) -> str | None:
    taken = [use for p in plan.processes for use in p.ports if port_in_use(use.host, use.port)]
    if not taken:
        return None
    lines = [f"{plan.graph}: {len(taken)} port(s) already in use on this host, nothing was started:"]
    lines += [f"  - {use.field}: {use.host}:{use.port} is taken (another graph or program listens there)" for use in taken]
    lines.append("Stop what holds them, or choose other ports in the graph file.")
    return "\n".join(lines)
