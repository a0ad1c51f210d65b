"""`dynamo bench URL|GRAPH ...`: aiperf sweeps against a live endpoint; `dynamo bench compare A B`."""

from __future__ import annotations

import argparse
import shutil
import signal
import time
from pathlib import Path

import httpx

from dynamo_oss.assets import model_folder
from dynamo_oss.bench.report import comparison, plot, table
from dynamo_oss.bench.results import SWEEP_FILE, Sweep, SweepParameters
from dynamo_oss.bench.served import served_graph, sweep_fields
from dynamo_oss.bench.sweep import run_sweep
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.cli.arguments import concurrencies, positive_float, positive_int
from dynamo_oss.cli.endpoint import describe_chosen, sized_deployment
from dynamo_oss.deployment.model import Deployment, build_deployment
from dynamo_oss.graph.loader import load_graph

USAGE = """dynamo bench URL|GRAPH --isl N --osl N --concurrency LIST [options]
       dynamo bench compare A B [--out PNG]"""
EXIT_INTERRUPTED = 130
DEFAULT_TOKENIZER_MODEL = "gpt-oss-120b"  # both gpt-oss models share the o200k_harmony tokenizer


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure a live endpoint with aiperf: Pareto sweeps, and comparisons of two sweeps",
        usage=USAGE,
        description="Run aiperf (closed loop, streaming chat, exact ISL/OSL, fixed seed, warm-up first) once per "
        "concurrency against an OpenAI endpoint: a GRAPH file, which it serves with `dynamo serve` for the "
        "sweep and stops afterwards, or any URL. Results (aiperf's exports, sweep.json, sweep.md, pareto.png) "
        "go to --out. `dynamo bench compare A B` overlays two results folders and prints B's tok/s/user over "
        "A's at equal output tok/s/GPU.",
    )
    parser.add_argument("target", metavar="URL|GRAPH|compare", help="an endpoint URL, a graph file, or `compare`")
    parser.add_argument("folders", nargs="*", metavar="A B", help="with compare: two results folders")
    parser.add_argument("--isl", type=positive_int, help="prompt tokens per request")
    parser.add_argument("--osl", type=positive_int, help="output tokens per request (at least 2)")
    parser.add_argument("--concurrency", type=concurrencies, help="comma-separated streams in flight, e.g. 1,4,16,64")
    parser.add_argument(
        "--requests", type=positive_int, help="measured requests per run (default: 10 per stream, at least 40)"
    )
    parser.add_argument("--warmup", type=int, help="unmeasured requests before each run (default: one per stream)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="prompt seed (default 0); each concurrency sends its own prompts, and another sweep against the "
        "same deployment needs another seed, or prefix caching answers its prompts from cache",
    )
    parser.add_argument(
        "--out", type=Path, help="results folder (default: bench-results/NAME-TIME); with compare, the PNG"
    )
    parser.add_argument("--gpus", type=positive_int, help="GPUs behind a URL, for tok/s/GPU (a graph's pools give it)")
    parser.add_argument("--model", help="model name for a URL (default: the one it serves)")
    parser.add_argument("--tokenizer", help="aiperf's tokenizer for a URL: a folder or hub name (default: gpt-oss's)")
    parser.add_argument("--engine", choices=["mocker"], help="serve GRAPH on Dynamo's mocker (simulated engine)")
    parser.add_argument(
        "--mocker-time-scale",
        type=positive_float,
        default=1.0,
        metavar="F",
        help="serve GRAPH's mocker workers F times slower than modelled, so this machine keeps up (default 1)",
    )
    parser.set_defaults(handler=bench)


def bench(args: argparse.Namespace) -> int:
    # Ctrl-C raises here even when the parent started us with SIGINT ignored (Python then leaves it
    # ignored): an interrupted sweep must stop, and say so in its exit status.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return compare(args) if args.target == "compare" else sweep(args)
    except KeyboardInterrupt:
        print("[dynamo-oss] bench interrupted: aiperf and any graph it served are stopped", flush=True)
        return EXIT_INTERRUPTED


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def sweep(args: argparse.Namespace) -> int:
    missing = [f"--{name}" for name in ("isl", "osl", "concurrency") if getattr(args, name) is None]
    if missing:
        raise UserError(f"{' and '.join(missing)} required to run a sweep\nusage: {USAGE}")
    if args.folders:
        raise UserError(f"unexpected argument(s) {' '.join(args.folders)}: a sweep takes one URL or GRAPH")
    if args.osl < 2:
        raise UserError(f'--osl: Got "{args.osl}". It must be at least 2: ITL needs two output tokens.')
    if args.target.startswith(("http://", "https://")):
        return _sweep_url(args)
    return _sweep_graph(args, Path(args.target))


def _sweep_url(args: argparse.Namespace) -> int:
    if args.gpus is None:
        raise UserError("--gpus is required for a URL: tok/s/GPU divides by the GPUs behind it")
    if args.engine or args.mocker_time_scale != 1.0:
        raise UserError("--engine and --mocker-time-scale apply to a GRAPH that bench serves, not to a URL")
    base = args.target.rstrip("/").removesuffix("/v1")
    model = args.model or _served_model(base)
    tokenizer = args.tokenizer or str(model_folder(BUILTIN_MODELS[DEFAULT_TOKENIZER_MODEL]))
    parameters = _parameters(args, {"model": model, "tokenizer": tokenizer, "gpus": args.gpus})
    label = base.split("://", 1)[1]
    out = _results_folder(args.out, label.replace(":", "-").replace("/", "-"))
    _run(Sweep(label=label, target=args.target, endpoint=base, parameters=parameters), out)
    return 0


def _sweep_graph(args: argparse.Namespace, graph: Path) -> int:
    if not graph.is_file():
        raise UserError(f"{graph}: no such graph file (or give an http:// URL)")
    built = build_deployment(load_graph(graph), engine_override=args.engine)
    deployment, sizing = sized_deployment(built, args.mocker_time_scale)
    out = _results_folder(args.out, deployment.name)
    _copy_graph(graph, deployment, out / "graph")
    parameters = _parameters(args, {**sweep_fields(deployment), **({"gpus": args.gpus} if args.gpus else {})})
    print(f"[dynamo-oss] bench serving {graph} for the sweep (logs in {out / 'serve'})", flush=True)
    print(f"[dynamo-oss] endpoint: {describe_chosen(sizing)}", flush=True)
    with served_graph(graph, out / "serve", engine=args.engine, time_scale=args.mocker_time_scale) as state:
        endpoint = state.endpoint.rstrip("/").removesuffix("/v1")
        _run(Sweep(label=deployment.name, target=str(graph), endpoint=endpoint, parameters=parameters), out)
    return 0


def _run(sweep: Sweep, out: Path) -> None:
    started = time.monotonic()
    run_sweep(sweep, out)
    (out / "sweep.md").write_text(table(sweep) + "\n")
    plot([sweep], out / "pareto.png")
    print(table(sweep))
    print(f"[dynamo-oss] bench done in {time.monotonic() - started:.0f} s: results in {out}", flush=True)


def compare(args: argparse.Namespace) -> int:
    if len(args.folders) != 2:
        raise UserError(f"compare takes two results folders, got {len(args.folders)}\nusage: {USAGE}")
    base, other = (Sweep.load(Path(folder)) for folder in args.folders)
    if (base.parameters.isl, base.parameters.osl) != (other.parameters.isl, other.parameters.osl):
        print(
            f"[dynamo-oss] warning: the sweeps ran different workloads (ISL/OSL {base.parameters.isl}/"
            f"{base.parameters.osl} and {other.parameters.isl}/{other.parameters.osl})",
            flush=True,
        )
    print(comparison(base, other))
    path = plot([base, other], args.out or Path(f"compare-{base.label}-{other.label}.png".replace("/", "-")))
    print(f"[dynamo-oss] plot: {path}")
    return 0


def _parameters(args: argparse.Namespace, target: dict[str, str | int]) -> SweepParameters:
    """The flags' workload, with what the target fixes: model, tokenizer and GPUs."""
    return SweepParameters(
        isl=args.isl,
        osl=args.osl,
        concurrencies=args.concurrency,
        requests=args.requests,
        warmup=args.warmup,
        seed=args.seed,
        time_scale=args.mocker_time_scale,
        **target,
    )


def _results_folder(out: Path | None, name: str) -> Path:
    out = out or Path("bench-results") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / SWEEP_FILE).exists():
        raise UserError(f"--out: {out} already holds results; choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def _served_model(base: str) -> str:
    try:
        listing = httpx.get(f"{base}/v1/models", timeout=10).json()
    except (httpx.HTTPError, ValueError) as err:
        raise UserError(f"{base}: no OpenAI endpoint answers GET /v1/models there ({err})") from None
    models = [m.get("id") for m in listing.get("data", [])] if isinstance(listing, dict) else []
    if len(models) != 1:
        raise UserError(
            f"{base} serves {len(models)} models ({', '.join(map(str, models)) or 'none'}): name one with --model"
        )
    return models[0]


def _copy_graph(graph: Path, deployment: Deployment, folder: Path) -> None:
    """The graph and its engine files, beside the results they produced."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(graph, folder / graph.name)
    for pool in deployment.pools:
        if pool.engine_args is not None:
            try:
                target = folder / pool.engine_args.resolve().relative_to(graph.resolve().parent)
            except ValueError:  # outside the graph's folder
                target = folder / "engines" / pool.engine_args.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pool.engine_args, target)
