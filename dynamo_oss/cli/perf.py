"""`dynamo simulate`, `dynamo plan` and `dynamo calibrate`: the performance model on the command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.perf.calibration import (
    FITTED,
    PUBLISHED,
    SPECULATIVE,
    compare,
    misses,
    refit,
    speedup_markdown,
    speedups,
    table_markdown,
)
from dynamo_oss.perf.aic import AIC_REFERENCE_PATH, AIC_VERSION, aic_query, run_aic, stored_reference
from dynamo_oss.perf.costs import FITTED_FACTORS_PATH, HOPPER_MEASURED_PATH, fitted_factors
from dynamo_oss.perf.endpoint import peak_output
from dynamo_oss.perf.graphs import graph_files, layout_from_file
from dynamo_oss.perf.layout import (
    PREFILL_MAX_NUM_TOKENS,
    Layout,
    PoolLayout,
    Precision,
    Workload,
)
from dynamo_oss.cli.arguments import concurrencies, positive_int
from dynamo_oss.cli.endpoint import describe_needs, describe_peak
from dynamo_oss.perf.metrics import DEFINITIONS, ServingPoint
from dynamo_oss.perf.replay import check_step_times, simulate
from dynamo_oss.perf.search import LayoutPoint, draft_choices, search
from dynamo_oss.perf.speculation import PROFILES
from dynamo_oss.engines import MAX_DRAFT_TOKENS

DEFAULT_CONCURRENCY = "1,2,4,8,16,32,64,128,256"


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(BUILTIN_MODELS), default="gpt-oss-120b")
    parser.add_argument("--hardware", choices=sorted(HARDWARE), default="b200")
    parser.add_argument("--kv-cache", choices=["bf16", "fp8"], default="fp8", help="KV cache precision")
    parser.add_argument("--isl", type=positive_int, required=True, help="input tokens per request")
    parser.add_argument("--osl", type=positive_int, required=True, help="output tokens per request")
    parser.add_argument(
        "--acceptance",
        choices=sorted(PROFILES),
        default="chat",
        help="the traffic's acceptance profile: how many EAGLE3 drafts a speculative pool keeps a step "
        "(chat: MT-Bench's, agentic: HumanEval's; dynamo_oss/perf/speculation.py names the sources)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def register(subparsers: argparse._SubParsersAction) -> None:
    simulate_parser = subparsers.add_parser(
        "simulate",
        help="replay a layout in Dynamo's offline simulator at the modelled speed of its GPUs",
        description="Run Dynamo's offline replay (dynamo.replay) of fixed-length requests at each "
        "concurrency, with mocker timing profiles from the performance model.",
    )
    simulate_parser.add_argument("graph", nargs="?", help="graph file (YAML); else the layout flags below")
    _add_model_args(simulate_parser)
    simulate_parser.add_argument("--mode", choices=["agg", "disagg"], default="agg")
    simulate_parser.add_argument("--engine", choices=["trtllm", "vllm"], default="trtllm")
    for prefix, label in (("", "aggregated"), ("prefill-", "prefill"), ("decode-", "decode")):
        simulate_parser.add_argument(f"--{prefix}tp", type=positive_int, default=1, help=f"GPUs per {label} worker")
        simulate_parser.add_argument(
            f"--{prefix}ep", type=positive_int, help=f"MoE expert parallelism of {label} workers (default: tp)"
        )
        simulate_parser.add_argument(
            f"--{prefix}attention-dp", action="store_true", help=f"attention data-parallel {label} workers"
        )
        simulate_parser.add_argument(f"--{prefix}workers", type=positive_int, help=f"{label} workers")
    simulate_parser.add_argument("--gpus", type=positive_int, help="aggregated GPUs in all (workers = gpus / tp)")
    simulate_parser.add_argument(
        "--draft-tokens",
        type=int,
        default=0,
        choices=range(0, MAX_DRAFT_TOKENS + 1),
        metavar="N",
        help=f"EAGLE3 tokens every worker drafts a step, 0 to {MAX_DRAFT_TOKENS} (default 0: no speculation)",
    )
    simulate_parser.add_argument("--concurrency", type=concurrencies, default=concurrencies(DEFAULT_CONCURRENCY))
    simulate_parser.add_argument(
        "--requests", type=positive_int, help="requests per concurrency (default 10 x concurrency)"
    )
    simulate_parser.set_defaults(handler=run_simulate)

    plan_parser = subparsers.add_parser(
        "plan",
        help="search aggregated and disaggregated layouts of a GPU budget for the best few",
        description="Screen every layout of --gpus GPUs (aggregated TP/EP/attention-DP; disaggregated "
        "P:D splits with TP per pool), replay the most promising, and print the Pareto front of "
        "tok/s/user against tok/s/GPU within the targets, best tok/s/GPU first, with graph files.",
    )
    _add_model_args(plan_parser)
    plan_parser.add_argument("--gpus", type=positive_int, required=True)
    plan_parser.add_argument(
        "--no-speculation",
        action="store_true",
        help=f"search layouts without EAGLE3 speculative decoding only (by default every decoding pool is "
        f"also tried drafting 1 to {MAX_DRAFT_TOKENS} tokens a step, where the model has a published head)",
    )
    plan_parser.add_argument("--ttft-ms", type=float, help="median TTFT target")
    plan_parser.add_argument("--itl-ms", type=float, help="median ITL target")
    plan_parser.add_argument("--concurrency", type=concurrencies, default=concurrencies(DEFAULT_CONCURRENCY + ",512"))
    plan_parser.add_argument("--keep", type=positive_int, default=4, help="most layouts replayed per mode")
    plan_parser.add_argument(
        "--requests",
        type=positive_int,
        help="requests per replayed concurrency (default 10 x concurrency, at least 40)",
    )
    plan_parser.add_argument("--top", type=positive_int, default=5, help="points printed")
    plan_parser.add_argument("--out", type=Path, help="write the graph files of the printed layouts into this folder")
    plan_parser.set_defaults(handler=run_plan)

    calibrate_parser = subparsers.add_parser(
        "calibrate",
        help="compare the performance model with published figures (and refit it)",
        description=f"Print each published figure, the model's prediction through Dynamo's replay and "
        f"the error, then the replay-against-model step-time check. --refit fits the overheads first "
        f"and writes {FITTED_FACTORS_PATH.name}. Exits 1 if a covered figure misses by more than the "
        f"tolerance and its row does not say why.",
    )
    calibrate_parser.add_argument(
        "--refit",
        nargs="*",
        choices=sorted({*FITTED, *SPECULATIVE}),
        metavar="FACTOR",
        help=f"fit these factors (of {', '.join([*FITTED, *SPECULATIVE])}; all if none named) and store them",
    )
    calibrate_parser.add_argument(
        "--aic",
        type=Path,
        metavar="PYTHON",
        help=f"first run AIConfigurator {AIC_VERSION} on the rows it can express, with PYTHON (an interpreter of "
        f"an environment where aiconfigurator=={AIC_VERSION} is installed), and store its estimates in "
        f"{AIC_REFERENCE_PATH.name}; without it, the stored estimates are shown",
    )
    calibrate_parser.set_defaults(handler=run_calibrate)


def layout_from_args(args: argparse.Namespace) -> Layout:
    """The layout `dynamo simulate` was given: a graph file, or the flags."""
    if args.graph:
        return layout_from_file(args.graph)

    flags = vars(args)

    def pool(prefix: str, workers: int, **extra: int) -> PoolLayout:
        return PoolLayout(
            workers=workers,
            tp=flags[f"{prefix}tp"],
            ep=flags[f"{prefix}ep"],
            attention_dp=flags[f"{prefix}attention_dp"],
            draft_tokens=args.draft_tokens,
            **extra,
        )

    try:
        if args.mode == "agg":
            pools = {"agg": pool("", args.workers or (args.gpus // args.tp if args.gpus else 1))}
        else:
            pools = {
                "prefill": pool("prefill_", args.prefill_workers or 1, max_num_tokens=PREFILL_MAX_NUM_TOKENS),
                "decode": pool("decode_", args.decode_workers or 1),
            }
        return Layout(
            model=args.model,
            hardware=args.hardware,
            engine=args.engine,
            precision=Precision(kv_cache=args.kv_cache),
            pools=pools,
        )
    except ValidationError as err:
        problems = "; ".join(error["msg"].removeprefix("Value error, ") for error in err.errors())
        raise UserError(f"the layout flags describe no layout: {problems}") from None


def _table(rows: Sequence[tuple[str, ServingPoint]]) -> str:
    head = f"{'layout':<34} {'conc':>5} {'tok/s/user':>10} {'tok/s/GPU':>10} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}"
    lines = [head, "-" * len(head)]
    for label, p in rows:
        lines.append(
            f"{label:<34} {p.concurrency:>5} {p.tok_s_user:>10.1f} {p.tok_s_gpu:>10.1f} {p.ttft_p50_ms:>9.0f} "
            f"{p.ttft_p99_ms:>9.0f} {p.itl_p50_ms:>8.1f} {p.itl_p99_ms:>8.1f}"
        )
    notes = [
        "TTFT and ITL in ms, percentiles over requests.",
        f"tok/s/user: {DEFINITIONS['tok_s_user']}.",
        f"tok/s/GPU: {DEFINITIONS['tok_s_gpu']}.",
    ]
    return "\n".join(lines + notes)


def run_simulate(args: argparse.Namespace) -> int:
    layout = layout_from_args(args)
    workload = Workload(isl=args.isl, osl=args.osl, acceptance=args.acceptance)
    points = simulate(layout, workload, args.concurrency, requests=args.requests)
    if args.json:
        print(
            json.dumps(
                {
                    "layout": layout.model_dump(),
                    "workload": workload.model_dump(),
                    "gpus": layout.gpus,
                    "definitions": DEFINITIONS,
                    "points": [p.model_dump() for p in points],
                },
                indent=2,
            )
        )
        return 0
    print(f"{layout.model} on {layout.gpus} x {layout.gpu.label}, {layout.describe()}, ISL {args.isl} / OSL {args.osl}")
    print(_table([(layout.describe(), p) for p in points]))
    return 0


def run_plan(args: argparse.Namespace) -> int:
    workload = Workload(isl=args.isl, osl=args.osl, acceptance=args.acceptance)
    result = search(
        args.model,
        args.hardware,
        args.gpus,
        workload,
        args.concurrency,
        keep=args.keep,
        ttft_limits=(args.ttft_ms,),
        precision=Precision(kv_cache=args.kv_cache),
        requests=args.requests,
        drafts=(0,) if args.no_speculation else draft_choices(args.model),
    )
    best: list[LayoutPoint] = result.front(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms)[: args.top]
    if args.json:
        print(
            json.dumps(
                {
                    "workload": workload.model_dump(),
                    "gpus": args.gpus,
                    "definitions": DEFINITIONS,
                    "best": [p.model_dump() for p in best],
                },
                indent=2,
            )
        )
        return 0 if best else 1
    targets = ", ".join(f"{k} <= {v:g} ms" for k, v in (("TTFT p50", args.ttft_ms), ("ITL p50", args.itl_ms)) if v)
    print(
        f"{args.model} on {args.gpus} x {HARDWARE[args.hardware].label}, ISL {args.isl} / OSL {args.osl}"
        + (f", targets {targets}" if targets else "")
    )
    if not best:
        print("No replayed layout meets the targets.")
        return 1
    print(_table([(p.layout.describe(), p.serving) for p in best]))
    layouts = list({p.layout.describe(): p.layout for p in best}.values())
    for rank, layout in enumerate(layouts, 1):
        files = graph_files(layout, f"{layout.model}-{layout.hardware}-{layout.mode}-{rank}")
        peak = peak_output(layout, context=workload)
        print(f"\n# {layout.describe()}")
        print(f"# endpoint: {describe_needs(peak.tok_s)}, for its peak of {describe_peak(peak)[0]}")
        for relative, text in files.items():
            print(f"# --- {relative}\n{text}", end="")
            if args.out:
                (args.out / relative).parent.mkdir(parents=True, exist_ok=True)
                (args.out / relative).write_text(text)
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    if args.refit is not None:
        factors = refit(tuple(args.refit) or (*FITTED, *SPECULATIVE))
        print(f"wrote {FITTED_FACTORS_PATH}")
    else:
        factors = fitted_factors()
    print("factors:", factors.model_dump_json())
    if factors.hopper is not None:
        print(f"hopper efficiencies ({HOPPER_MEASURED_PATH.name}):", factors.hopper.model_dump_json())
    if args.aic is not None:
        queries = [query for query in (aic_query(row) for row in PUBLISHED) if query is not None]
        aic = run_aic(args.aic, queries)
        AIC_REFERENCE_PATH.write_text(aic.model_dump_json(indent=1) + "\n")
        print(f"wrote {AIC_REFERENCE_PATH}")
    else:
        aic = stored_reference()
    comparisons = compare(factors)
    print(table_markdown(comparisons, aic))
    print()
    print(speedup_markdown(speedups(factors, aic=aic)))
    layouts = [
        Layout(
            hardware="b200",
            precision=Precision(kv_cache="fp8"),
            pools={
                "prefill": PoolLayout(tp=2, max_num_tokens=PREFILL_MAX_NUM_TOKENS),
                "decode": PoolLayout(tp=4, attention_dp=True),
            },
        ),
        Layout(hardware="b200", pools={"agg": PoolLayout(tp=2)}),
    ]
    print("\nReplay against the model's own step times (gpt-oss-120b, B200, 32k prompts, 16 in flight):")
    for layout in layouts:
        for check in check_step_times(layout, 32768, 16, factors):
            print(
                f"- {layout.describe()}: {check.step}: model {check.model_ms:.2f} ms, replay {check.replay_ms:.2f} ms ({check.error:+.1%})"
            )
    return 1 if misses(comparisons) else 0
