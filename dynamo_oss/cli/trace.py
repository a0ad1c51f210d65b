"""`dynamo trace`: one request's span tree from a served graph's trace backend, in the terminal."""

from __future__ import annotations

import argparse
import json
import re

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.cli.arguments import add_run_argument, positive_float
from dynamo_oss.launch.run_dirs import find_run
from dynamo_oss.launch.state import RunState
from dynamo_oss.observe.traces import TraceBackend, render_tree


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="print one request's span tree: gateway, frontend, router, prefill and decode workers",
        description="Read one request's trace from the graph's embedded trace backend "
        "(observability.tracing: embedded) and print its spans as a tree: when each started after the "
        "request arrived, how long it took, and where (the phase, the pool, the worker, the tokens). Without "
        "--trace-id or --request-id, the slowest request of the last MINUTES.",
    )
    add_run_argument(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--trace-id", type=trace_id, help="the trace's id (32 hex digits), e.g. from a latency bucket's exemplar"
    )
    which.add_argument("--request-id", help="the x-request-id the client sent, or Dynamo's request id")
    parser.add_argument(
        "--minutes", type=positive_float, default=1.0, help="how far back to look for the request (default 1)"
    )
    parser.add_argument("--json", action="store_true", help="print the trace's spans as JSON instead")
    parser.set_defaults(handler=print_trace)


def trace_id(text: str) -> str:
    if re.fullmatch(r"[0-9a-fA-F]{32}", text) is None or not int(text, 16):
        raise argparse.ArgumentTypeError(f'Got "{text}". It must be a trace id: 32 hex digits, not all zero.')
    return text.lower()


def print_trace(args: argparse.Namespace) -> int:
    state = RunState.read(find_run(args.run))
    if not state.traces_url:
        raise UserError(
            f"graph {state.graph} has no trace backend to read: give it observability.tracing: embedded "
            "(an external endpoint's traces are read with its own tools)"
        )
    backend = TraceBackend(state.traces_url)
    if args.trace_id:
        trace = backend.trace(args.trace_id)
    elif args.request_id:
        trace = backend.trace_of_request(args.request_id, args.minutes)
    else:
        trace = backend.slowest(args.minutes)
    if args.json:
        spans = [
            {
                "name": span.name,
                "span_id": span.span_id,
                "parent_id": span.parent_id,
                "start": span.start.isoformat(),
                "duration_ms": round(span.duration_ms, 3),
                "attributes": span.attributes,
            }
            for span in sorted(trace.spans, key=lambda span: span.start)
        ]
        print(json.dumps({"trace_id": trace.trace_id, "spans": spans}, indent=1))
    else:
        print(render_tree(trace))
    return 0
