"""`dynamo scale POOL N [GRAPH|RUN_DIR]`: resize a running graph's pool by hand, the way the planner does."""

from __future__ import annotations

import argparse

from dynamo_oss.cli.arguments import add_run_argument, positive_int
from dynamo_oss.launch.control_client import ControlClient
from dynamo_oss.launch.run_dirs import find_run


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scale",
        help="resize a pool of a served graph",
        description="Ask the launcher of a running graph to bring POOL to N workers, through the same path "
        "as the planner's decisions. New workers start on free GPUs and count once they are registered; "
        "a worker that goes is drained first: out of discovery, its streams finish, then it stops. Waits "
        "until the resize is done. Refused, with nothing changed, when N is outside the pool's range "
        "(autoscale min to max; 1 to `workers` for a fixed pool) or the pools would need more GPUs than "
        "the budget (planner.max_gpus, else hardware.gpus).",
    )
    parser.add_argument("pool", metavar="POOL", help="prefill, decode or agg")
    parser.add_argument("workers", metavar="N", type=positive_int, help="the pool's new number of workers")
    add_run_argument(parser)
    parser.set_defaults(handler=scale)


def scale(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    client = ControlClient.for_run(run_dir)
    print(f"scaling {args.pool} to {args.workers} worker(s) in {run_dir}...", flush=True)
    outcome = client.scale(args.pool, args.workers)
    for change in outcome.changes:
        moved = "unchanged" if change.before == change.after else f"{change.before} -> {change.after}"
        print(f"{change.role}: {moved} worker(s), in {outcome.seconds:.1f} s")
    return 0
