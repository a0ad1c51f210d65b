"""`dynamo status RUN_DIR`: what a running graph's launcher last recorded about it."""

from __future__ import annotations

import argparse
from pathlib import Path

from dynamo_oss.launch.run_dirs import newest_run_dir
from dynamo_oss.launch.state import RunState


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show a served graph's pools and processes",
        description="Read RUN_DIR/state.json, which `dynamo serve` keeps current in its run folder, and "
        "print each pool's target and live workers and each process's pid, restarts and ports.",
    )
    parser.add_argument(
        "run_dir",
        type=Path,
        nargs="?",
        metavar="RUN_DIR",
        help="the run folder `dynamo serve` printed (default: the newest under ~/.cache/dynamo-oss/runs)",
    )
    parser.add_argument("--json", action="store_true", help="print the state as one JSON object")
    parser.set_defaults(handler=status)


def status(args: argparse.Namespace) -> int:
    state = RunState.read(args.run_dir or newest_run_dir())
    if args.json:
        print(state.model_dump_json(indent=2))
        return 0
    if state.stopped or not state.supervisor_alive:
        condition = "stopped"
    else:
        condition = "ready" if state.ready else "starting"
    lines = [f"graph {state.graph}: {condition}, {state.endpoint}", "  pools:"]
    lines += [f"    {p.role:<8} {p.engine:<7} target {p.target}  live {p.live}" for p in state.pools]
    lines.append("  processes:")
    for p in state.processes:
        pid = str(p.pid) if p.pid else "-"
        ports = ",".join(map(str, p.ports)) or "-"
        lines.append(f"    {p.name:<10} pid {pid:<8} restarts {p.restarts}  ports {ports}")
    print("\n".join(lines))
    return 0
