"""The one `dynamo` command. Each subcommand lives beside the code it drives.

A command module exposes `register(subparsers)`, which adds its parser and sets
`handler=fn` with `fn(args) -> int` (the exit status).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from dynamo_oss.conformance import commands as conformance_commands
    from dynamo_oss.graph import commands as graph_commands
    from dynamo_oss.launch import commands as launch_commands
    from dynamo_oss.perf import commands as perf_commands

    parser = argparse.ArgumentParser(
        prog="dynamo",
        description="Run, check and size gpt-oss deployments on NVIDIA Dynamo from one graph file.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (graph_commands, launch_commands, perf_commands, conformance_commands):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
