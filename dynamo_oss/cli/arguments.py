"""Argument types the commands share, with errors of the form 'Got "X". It must ...'."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be a whole number.') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be at least 1.')
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be a number.') from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be greater than 0.')
    return value


def concurrencies(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be a comma-separated list of integers.') from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f'Got "{text}". Each concurrency must be at least 1.')
    return values


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """The optional GRAPH|RUN_DIR of a command that talks to a served graph; `find_run` resolves it."""
    parser.add_argument(
        "run",
        nargs="?",
        metavar="GRAPH|RUN_DIR",
        help="a served graph's name (its `name:`, or its file's name without .yaml), or the run folder "
        "`dynamo serve` printed. A name means that graph's live run, else its latest; left out: the one "
        "live run, else the latest started (runs are under ~/.cache/dynamo-oss/runs)",
    )
