"""`dynamo dashboards`: write the Grafana dashboards (dynamo_oss/observe) as JSON files."""

from __future__ import annotations

import argparse
from pathlib import Path

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.observe.dashboards import render

DEFAULT_OUT = Path("deploy/grafana/dashboards")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dashboards",
        help="write the Grafana dashboards as JSON",
        description="Render the overview, disaggregation, planner and infrastructure dashboards from code "
        f"into OUT (default {DEFAULT_OUT}), where Grafana's provisioning (deploy/grafana/provisioning) "
        "loads them. --check exits 1 when the files there differ from the code.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the JSON files")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.set_defaults(handler=dashboards)


def dashboards(args: argparse.Namespace) -> int:
    rendered = render()
    if args.check:
        stale = [name for name, text in rendered.items() if _read(args.out / name) != text]
        for name in stale:
            print(f"{args.out / name}: out of date; run `uv run dynamo dashboards --out {args.out}`")
        return 1 if stale else 0
    if not args.out.parent.is_dir():
        raise UserError(f"--out: folder not found: {args.out.parent}")
    args.out.mkdir(exist_ok=True)
    for name, text in rendered.items():
        (args.out / name).write_text(text)
        print(f"wrote {args.out / name}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None
