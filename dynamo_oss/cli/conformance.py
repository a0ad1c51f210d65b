"""`dynamo conformance URL`: check any OpenAI-compatible gpt-oss endpoint against harmony."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.cli.arguments import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="check an OpenAI endpoint's gpt-oss harmony handling",
        description="Run the harmony conformance suite against any OpenAI-compatible endpoint (this project's, "
        "vLLM, a TensorRT-LLM server) and print a pass/fail table with the reason for each failure. Exits 1 "
        "if any case fails. `dynamo serve GRAPH --engine mocker` passes it as it is: its mocker replays the "
        "suite's recorded answers for the suite's requests and generates harmony for all others.",
    )
    parser.add_argument(
        "url", nargs="?", help="the endpoint, with or without /v1: http://127.0.0.1:8000 or http://127.0.0.1:8000/v1"
    )
    parser.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    parser.add_argument("--api-key", default="not-needed", help="bearer token, if the endpoint wants one")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="run the harmony correctness matrix instead: every API (chat, Responses, Messages) x streaming x "
        "tool choice (none, auto, required, named) x structured output (none, JSON schema) x reasoning effort, "
        "each --repeat times, and print a markdown table of what held",
    )
    parser.add_argument("--repeat", type=positive_int, default=3, help="with --matrix: runs of each combination (3)")
    parser.add_argument(
        "--concurrency", type=positive_int, default=8, help="with --matrix: requests in flight at once (8)"
    )
    parser.add_argument(
        "--write-mocker-responses",
        type=Path,
        metavar="TRACE.jsonl",
        help="write the suite's harmony completions as a mocker replay trace and exit",
    )
    parser.set_defaults(handler=conformance)


def conformance(args: argparse.Namespace) -> int:
    # Imported here: the openai client and harmony take a second to load, which every other
    # `dynamo` command would otherwise pay.
    from dynamo_oss.conformance.replay import write_replay_trace
    from dynamo_oss.conformance.runner import format_table, run_suite

    if args.write_mocker_responses:
        if not args.write_mocker_responses.parent.is_dir():
            raise UserError(f"--write-mocker-responses: folder not found: {args.write_mocker_responses.parent}")
        print(f"wrote {write_replay_trace(args.write_mocker_responses)}")
        return 0
    if not args.url:
        raise UserError("give the endpoint URL, e.g. http://127.0.0.1:8000/v1")
    args.url = openai_base_url(args.url)
    model = args.model or _first_model(args.url, args.api_key)
    if args.matrix:
        return _matrix(args, model)
    results = run_suite(args.url, model, api_key=args.api_key)
    if args.json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        print(f"conformance of {args.url} ({model})")
        print(format_table(results))
    return 1 if any(r.verdict == "fail" for r in results) else 0


def _matrix(args: argparse.Namespace, model: str) -> int:
    from dynamo_oss.conformance.matrix.run import markdown_table, run_matrix

    def progress(done: int, total: int) -> None:
        if done % 24 == 0 or done == total:
            print(f"  {done}/{total} requests", file=sys.stderr, flush=True)

    print(f"harmony matrix of {args.url} ({model}), {args.repeat} runs per combination", file=sys.stderr)
    results = run_matrix(
        args.url, model, args.api_key, repeat=args.repeat, concurrency=args.concurrency, progress=progress
    )
    if args.json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        print(markdown_table(results))
    return 1 if any(r.failed for r in results) else 0


def openai_base_url(url: str) -> str:
    """The OpenAI base URL (ending in /v1) of an endpoint given as its root (as aiperf takes it) or its base."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def _first_model(url: str, api_key: str) -> str:
    import openai

    try:
        models = openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=30).models.list()
    except openai.APIError as err:
        raise UserError(f"{url}: cannot list models: {err}") from None
    first = next((m.id for m in models), None)
    if first is None:
        raise UserError(f"{url}: /models lists no model; pass --model")
    return first
