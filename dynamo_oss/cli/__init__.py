"""The one `dynamo` command. Each subcommand is a module here with `register(subparsers)`,
which adds its parser and sets `handler=fn` with `fn(args) -> int` (the exit status).

One error boundary for all of them: a `UserError` (a graph that cannot run, a missing
binary, a port in use, a bad flag) ends as a short message on stderr and exit status 2,
as argparse ends a bad flag. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dynamo_oss.catalog.errors import UserError

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    from dynamo_oss.cli import bench, check, conformance, dashboard, deploy, perf, scale, serve, status, trace

    parser = argparse.ArgumentParser(
        prog="dynamo",
        description="Run, check and size gpt-oss deployments on NVIDIA Dynamo from one graph file.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (check, serve, status, scale, deploy, perf, bench, conformance, dashboard, trace):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UserError as err:
        print(f"dynamo {args.command}: {err}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
