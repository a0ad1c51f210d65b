"""Argument types the commands share, with errors of the form 'Got "X". It must ...'."""

from __future__ import annotations

import argparse
from pathlib import Path


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


def add_run_dir_argument(parser: argparse.ArgumentParser) -> None:
    """The optional RUN_DIR of a command that talks to a served graph."""
    parser.add_argument(
        "run_dir",
        type=Path,
        nargs="?",
        metavar="RUN_DIR",
        help="the run folder `dynamo serve` printed (default: the newest under ~/.cache/dynamo-oss/runs)",
    )
