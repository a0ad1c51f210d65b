"""The study of issue 44, item 4: Dynamo's frontend over gptoss workers in one layout, a closed-loop
concurrency sweep at one input and output length, each point's figures as aiperf defines them, and the
performance model's prediction for the same layout beside each point.

    python -m benchmarks.gpu.serving.study measure --layout agg-1 --isl 32768 --osl 256 1024 \\
        --concurrency 1 2 4 8 --assets DIR --out DIR          # on the GPU machine: DIR/study-*.json
    python -m benchmarks.gpu.serving.study report DIR/study-*.json   # here: the predictions, study-*.md

Layouts (served.py starts them, each worker on its GPU, the KV router in front as graphs/gptoss has it):
- agg-1: one aggregated worker on GPU 0, what one lent GPU allows (round robin: one worker, nothing to route);
- agg-2: two aggregated workers, GPUs 0 and 1 (the issue's layout a);
- disagg-1p1d: a prefill worker on GPU 0 and a decode worker on GPU 1, the KV handed over by NIXL (b).

The client: C users, each sending its next streaming /v1/completions as its last one ends, `requests`
in all after one warm-up request; every prompt begins with its own number, so no two share a cached
prefix, and is `--isl` tokens long near enough (the usage's prompt_tokens, recorded, are exact); output
exactly `--osl` tokens (`ignore_eos`, `min_tokens`). It records each request's start, its first chunk
carrying a token (TTFT) and its last (end to end), and dynamo_oss.perf.metrics computes the figures from
those records as aiperf does (tok/s/user = mean of 1000 / ITL, ITL = (e2e - TTFT) / (OSL - 1); tok/s/GPU =
output tokens / duration / GPUs). aiperf itself is not carried: this client computes the same and says so.

`--trace agentic` replaces the fixed lengths with the agentic trace (benchmarks/agentic, scaled to
LIVE_SCALE as its live study serves it): `--concurrency` conversations in flight, each sending its
turns in order after its tool's time, the prompt the whole conversation so far in the words of its KV
blocks (so turns share their prefixes), and each point reports the workers' KV hit rate too.

In disagg-1p1d the decode worker logs every handoff it reads (handoff_config.timing_log: bytes,
descriptors, time from posting the NIXL read to the poll that saw it done), and each point reports their
median time and rate beside NIXL's measured rate between two H200s.

Two predictions stand beside each point, both Dynamo's replay of the same layout and engine files:
`engine_steps`, of this engine's own steps as step_times.py measured them on an H200
(dynamo_oss/perf/measured_steps.py; STEPS), and `trtllm`, of the project's performance model for
TensorRT-LLM on the same GPU (TP1, MXFP4 experts, BF16 KV), which is not fitted to this engine. `predict`
gives the first alone for layouts not yet run:

    python -m benchmarks.gpu.serving.study predict --layout agg-2 disagg-1p1d --osl 256 1024 --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np

from benchmarks.agentic.conversations import LIVE_SCALE, conversations, live_shape, words_for, write
from benchmarks.agentic.run import CACHED, TYPICAL
from benchmarks.gpu.serving.served import MODELS, PORT, Layout, Worker, served
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.perf.layout import Layout as PerfLayout
from dynamo_oss.perf.layout import PoolLayout, Precision, Workload
from dynamo_oss.perf.measured_steps import MeasuredSteps
from dynamo_oss.perf.metrics import DEFINITIONS, RequestRecord, ServingPoint, serving_point
from dynamo_oss.perf.replay import replay_trace, simulate

LAYOUTS = {
    "agg-1": Layout("agg-1", (Worker("agg-0", "agg", 0),), router="round-robin"),  # one worker: nothing to route
    "agg-2": Layout("agg-2", (Worker("agg-0", "agg", 0), Worker("agg-1", "agg", 1))),
    "disagg-1p1d": Layout(
        "disagg-1p1d", (Worker("prefill", "prefill", 0), Worker("decode", "decode", 1, logs_handoffs=True))
    ),
}
REQUEST_TIMEOUT_S = 600.0
POINT_TIMEOUT_S = 240.0  # a point stops sending after this; what finished is what it reports
PREDICTION = (
    "Dynamo's replay of the project's TensorRT-LLM model for the same H200s, layout and engine files "
    "(not fitted to the gptoss engine)"
)
PREDICTION_STEPS = "Dynamo's replay of the gptoss engine's own measured steps (dynamo_oss/perf/measured_steps.py)"
STEPS = Path(__file__).parent / "results" / "run13_decode_graphs" / "step_times.json"  # the engine's steps, H200


def prompt(index: int, isl: int) -> str:
    """About `isl` tokens, led by the request's own number so no two requests share a cached prefix."""
    return f"{index}:" + " hello" * max(1, isl - 3)


async def sse_lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An event stream's lines, split at newlines only: httpx's aiter_lines also splits at U+2028 and the
    like, which random-weight text carries inside JSON strings unescaped."""
    held = b""
    async for piece in pieces:
        *lines, held = (held + piece).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r")
    if held:
        yield held


async def one_request(
    client: httpx.AsyncClient, model: ModelShape, text: str, osl: int, epoch: float
) -> tuple[RequestRecord, int]:
    """One streamed completion: its record, and the prompt tokens the worker found cached."""
    body = {
        "model": model.served_name,
        "prompt": text,
        "max_tokens": osl,
        "min_tokens": osl,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first, usage = None, None
    async with client.stream("POST", f"http://127.0.0.1:{PORT}/v1/completions", json=body) as answer:
        if answer.status_code != 200:
            raise RuntimeError(f"HTTP {answer.status_code}: {(await answer.aread())[:200]!r}")
        async for line in sse_lines(answer.aiter_bytes()):
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and first is None:
                first = time.perf_counter()
            usage = chunk.get("usage") or usage
    ended = time.perf_counter()
    if first is None or usage is None:
        raise RuntimeError("the stream ended without a token or usage")
    record = RequestRecord(
        input_tokens=usage["prompt_tokens"],
        output_tokens=usage["completion_tokens"],
        start_ms=(sent - epoch) * 1e3,
        ttft_ms=(first - sent) * 1e3,
        e2e_ms=(ended - sent) * 1e3,
    )
    return record, (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


async def sweep_point(
    model: ModelShape, isl: int, osl: int, concurrency: int, requests: int, first: int, gpus: int
) -> dict:
    """One concurrency: `requests` requests through `concurrency` closed-loop users; tok/s/GPU over `gpus`."""
    records: list[RequestRecord] = []
    errors: list[str] = []
    numbers = iter(range(first, first + requests))
    epoch = time.perf_counter()
    deadline = epoch + POINT_TIMEOUT_S

    async def user(client: httpx.AsyncClient) -> None:
        for index in numbers:
            if time.perf_counter() > deadline:
                return
            try:
                records.append((await one_request(client, model, prompt(index, isl), osl, epoch))[0])
            except (httpx.HTTPError, RuntimeError) as error:
                errors.append(f"{type(error).__name__}: {error}")

    limits = httpx.Limits(max_connections=concurrency + 1)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        await asyncio.gather(*(user(client) for _ in range(concurrency)))
    point: dict = {"concurrency": concurrency, "sent": requests, "errors": errors}
    if records:
        point["figures"] = serving_point(records, concurrency=concurrency, gpus=gpus).model_dump()
    point["records"] = [record.model_dump() for record in records]
    return point


def agentic_conversations(lanes: int) -> list[list[dict]]:
    """The agentic trace as its live study serves it (conversations.live_shape)."""
    return list(conversations(live_shape(lanes)))


async def agentic_point(model: ModelShape, lanes: int, gpus: int, seconds: float = POINT_TIMEOUT_S) -> dict:
    """`lanes` conversations in flight, each sending its turns in order (the whole conversation so far as
    the prompt, the trace's words for its blocks) after its tool's time; a lane takes the next conversation
    when one ends. The KV hit rate is the workers' cached prompt tokens over all prompt tokens."""
    waiting = iter(agentic_conversations(lanes))
    records: list[RequestRecord] = []
    cached, errors = [], []
    epoch = time.perf_counter()
    deadline = epoch + seconds

    async def lane(client: httpx.AsyncClient) -> None:
        for turns in waiting:
            for row in turns:
                if time.perf_counter() > deadline:
                    return
                if row["dependencies"]:  # the tool runs before the next turn: the workload's own wait
                    await asyncio.sleep(row["dependencies"][0]["delay_ms"] / 1e3)
                text = words_for(row["hash_ids"], row["input_length"])
                try:
                    record, hit = await one_request(client, model, text, row["output_length"], epoch)
                except (httpx.HTTPError, RuntimeError) as error:
                    errors.append(f"{type(error).__name__}: {error}")
                    break  # the conversation cannot go on without this turn
                records.append(record)
                cached.append(hit)

    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=httpx.Limits(max_connections=lanes + 1)) as client:
        await asyncio.gather(*(lane(client) for _ in range(lanes)))
    point: dict = {"concurrency": lanes, "sent": len(records) + len(errors), "errors": errors}
    if records:
        point["figures"] = serving_point(records, concurrency=lanes, gpus=gpus).model_dump()
        point["kv_hit_rate"] = sum(cached) / sum(record.input_tokens for record in records)
    point["records"] = [record.model_dump() for record in records]
    return point


def handoffs_since(logs: dict[str, str], seen: dict[str, int]) -> dict:
    """The decode workers' handoffs logged since `seen` (lines read a log, which it updates): how many, and their
    median and p90 time and rate (bytes / time: the read's, as the decode worker polled it)."""
    rows = []
    for name, path in logs.items():
        lines = Path(path).read_text().splitlines() if Path(path).exists() else []
        rows += [json.loads(line) for line in lines[seen.get(name, 0) :]]
        seen[name] = len(lines)
    summary: dict = {"count": len(rows)}
    if rows:
        ms = np.array([row["ms"] for row in rows])
        rate = np.array([row["bytes"] / max(row["ms"], 1e-3) / 1e6 for row in rows])  # GB/s
        summary.update(
            ms_p50=float(np.percentile(ms, 50)),
            ms_p90=float(np.percentile(ms, 90)),
            gb_s_p50=float(np.percentile(rate, 50)),
            mib_p50=float(np.percentile([row["bytes"] / 2**20 for row in rows], 50)),
            descriptors_p50=float(np.percentile([row["descriptors"] for row in rows], 50)),
        )
    return summary


def header(layout: Layout, model: ModelShape, workload: dict | str, started: dict) -> dict:
    """What a study file says of its run before its points."""
    return {
        "layout": layout.name,
        "gpus": layout.gpus,
        "model": model.name,
        **(workload if isinstance(workload, dict) else {"trace": workload, "trace_scale": LIVE_SCALE}),
        "client": "this script's closed-loop client, figures by dynamo_oss.perf.metrics (aiperf's definitions)",
        "definitions": DEFINITIONS,
        **started,
    }


def progress(point: dict) -> str:
    got = point.get("figures") or {}
    return (
        f"{len(point['records'])}/{point['sent']} done, {len(point['errors'])} failed, tok/s/user "
        f"{got.get('tok_s_user', 0):.1f}, tok/s/GPU {got.get('tok_s_gpu', 0):.1f}, TTFT mean "
        f"{got.get('ttft_mean_ms', 0):.0f} ms, ITL p50 {got.get('itl_p50_ms', 0):.1f} ms"
    )


def measure(args: argparse.Namespace) -> None:
    """Serve the layout once and sweep it at each output length in turn, one JSON file each."""
    layout, model = LAYOUTS[args.layout], MODELS[args.model]
    args.out.mkdir(parents=True, exist_ok=True)
    with served(layout, model, args.assets, args.out) as started:
        print(f"{layout.name}: served after {started['ready_s']:.0f} s", flush=True)
        asyncio.run(sweep_point(model, args.isl, args.osl[0], 1, 1, 0, layout.gpus))  # warm-up, not reported
        first, seen = 1, {}
        handoffs_since(started["handoff_logs"], seen)  # the warm-up's, left out
        if args.trace == "agentic":
            report = {**header(layout, model, "agentic", started), "points": []}
            for lanes in args.concurrency:
                point = asyncio.run(agentic_point(model, lanes, layout.gpus, args.point_seconds))
                point["handoffs"] = handoffs_since(started["handoff_logs"], seen)
                report["points"].append(point)
                print(f"agentic, {lanes} conversations: {progress(point)}, KV hits {point.get('kv_hit_rate', 0):.0%}")
                (args.out / f"study-{layout.name}-agentic.json").write_text(json.dumps(report, indent=1))
            return
        for osl in args.osl:
            report = {**header(layout, model, {"isl": args.isl, "osl": osl}, started), "points": []}
            for concurrency in args.concurrency:
                requests = args.requests or max(4, 3 * concurrency)
                point = asyncio.run(sweep_point(model, args.isl, osl, concurrency, requests, first, layout.gpus))
                first += requests
                point["handoffs"] = handoffs_since(started["handoff_logs"], seen)
                report["points"].append(point)
                print(f"OSL {osl} C={concurrency}: {progress(point)}", flush=True)
                path = args.out / f"study-{layout.name}-{args.isl}-{osl}.json"
                path.write_text(json.dumps(report, indent=1))  # after every point: a run cut short keeps its points


def predicted_layout(name: str) -> PerfLayout:
    """The study's layout as the performance model describes it."""
    precision = Precision(experts="mxfp4", kv_cache="bf16")
    if name.startswith("agg"):
        pools = {"agg": PoolLayout(workers=LAYOUTS[name].gpus, tp=1, max_batch=256, max_num_tokens=8192)}
    else:
        pools = {
            "prefill": PoolLayout(workers=1, tp=1, max_batch=32, max_num_tokens=20000),
            "decode": PoolLayout(workers=1, tp=1, max_batch=256, max_num_tokens=8192),
        }
    return PerfLayout(model=GPT_OSS_120B.name, hardware="h200", engine="trtllm", precision=precision, pools=pools)


def predictions(
    layout: str, workload: dict, concurrencies: list[int], steps: MeasuredSteps, trtllm: bool = True
) -> dict:
    """The predictions of one layout and workload ({"isl", "osl"}, or {"trace": "agentic"}): from the
    engine's measured steps, and (`trtllm`) from the TensorRT-LLM model."""
    perf = predicted_layout(layout)
    made = {}
    kinds = [("engine_steps", steps, f"{PREDICTION_STEPS} ({steps.device}, {steps.engine_file})")]
    kinds += [("trtllm", None, PREDICTION)] if trtllm else []
    for name, engine_steps, what in kinds:
        if "trace" in workload:
            points = [agentic_prediction(perf, lanes, engine_steps) for lanes in concurrencies]
        else:
            points = simulate(
                perf, Workload(isl=workload["isl"], osl=workload["osl"]), concurrencies, steps=engine_steps
            )
        made[name] = {"what": what, "points": [point.model_dump() for point in points]}
    return made


def agentic_prediction(perf: PerfLayout, lanes: int, steps: MeasuredSteps | None) -> ServingPoint:
    """Dynamo's replay of the same scaled trace with `lanes` conversations in flight, behind the KV router;
    its passes charged as the agentic study's typical turn, scaled alike (benchmarks/agentic/run.py)."""
    typical = Workload(isl=round(TYPICAL.isl * LIVE_SCALE), osl=round(TYPICAL.osl * LIVE_SCALE), acceptance="agentic")
    with tempfile.TemporaryDirectory(prefix="study-trace-") as folder:
        trace = Path(folder) / "trace.jsonl"
        write(trace, live_shape(lanes))
        point = replay_trace(perf, trace, lanes, typical, cached_tokens=round(CACHED * LIVE_SCALE), steps=steps)
    return point.serving.model_copy(update={"gap_p99_ms": None})


FIGURES = {"tok_s_user": ("tok/s/user", 1), "tok_s_gpu": ("tok/s/GPU", 1), "ttft_mean_ms": ("TTFT mean ms", 0)}


def table(title: str, rows: list[dict], columns: list[str]) -> list[str]:
    """Each figure under each column (measured, then the predictions), a row a concurrency."""
    head = ["C", *(f"{label} {column}" for label, _ in FIGURES.values() for column in columns)]
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for row in rows:
        cells = [str(row["concurrency"])]
        for figure, (_, digits) in FIGURES.items():
            cells += [f"{row[column][figure]:.{digits}f}" if row.get(column) else "-" for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", f"tok/s/user: {DEFINITIONS['tok_s_user']}. tok/s/GPU: {DEFINITIONS['tok_s_gpu']}."]


def report(paths: list[Path], steps_path: Path) -> None:
    """Each measured study file with both predictions beside its points: JSON updated, a .md beside it."""
    steps = MeasuredSteps.read(steps_path)
    for path in paths:
        study = json.loads(path.read_text())
        done = [point for point in study["points"] if point.get("figures")]
        workload = {"trace": study["trace"]} if "trace" in study else {"isl": study["isl"], "osl": study["osl"]}
        study["prediction"] = predictions(study["layout"], workload, [point["concurrency"] for point in done], steps)
        path.write_text(json.dumps(study, indent=1))
        rows = [
            {
                "concurrency": point["concurrency"],
                "measured": point["figures"],
                **{name: made["points"][i] for name, made in study["prediction"].items()},
            }
            for i, point in enumerate(done)
        ]
        what = (
            f"the agentic trace at {LIVE_SCALE:g} scale"
            if "trace" in study
            else f"ISL {study['isl']} / OSL {study['osl']}"
        )
        title = (
            f"{study['layout']}, {study['model']} (random weights), {study['gpus']} GPU(s), {what}; measured: "
            f"{study['client']}; engine_steps: {study['prediction']['engine_steps']['what']}; trtllm: {PREDICTION}."
        )
        lines = table(title, rows, ["measured", "engine_steps", "trtllm"])
        curves = {"measured": [{**row["measured"], "concurrency": row["concurrency"]} for row in rows]}
        curves |= {f"model: {name}": made["points"] for name, made in study["prediction"].items()}
        plot(title, curves, path.with_suffix(".png"))
        timed = [(point["concurrency"], point["handoffs"]) for point in done if point.get("handoffs", {}).get("count")]
        lines += [
            f"Handoffs at C={c}: {h['count']}, {h['mib_p50']:.0f} MiB and {h['descriptors_p50']:.0f} descriptors each, "
            f"{h['ms_p50']:.1f} ms p50 / {h['ms_p90']:.1f} ms p90, {h['gb_s_p50']:.0f} GB/s p50 (NIXL between two "
            "H200s: 278-303 GB/s for consecutive blocks, 107-144 GB/s scattered; benchmarks/gpu/kv_handoff)."
            for c, h in timed
        ]
        path.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


def plot(title: str, curves: dict[str, list[dict]], path: Path) -> None:
    """tok/s/user against tok/s/GPU, a line a curve (measured points as markers), as Dynamo's Pareto plots."""
    import matplotlib  # only where a report is drawn: the GPU machine's image need not have it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=(8, 5.5))
    for index, (label, points) in enumerate(curves.items()):
        style = "o-" if label == "measured" else ("s--" if "engine" in label else "^:")
        xs, ys = [p["tok_s_gpu"] for p in points], [p["tok_s_user"] for p in points]
        axes.plot(xs, ys, style, color=f"C{index}", label=label)
        for x, y, point in zip(xs, ys, points, strict=True):
            axes.annotate(str(point["concurrency"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    axes.set(
        xlabel=f"output tok/s/GPU ({DEFINITIONS['tok_s_gpu']})",
        ylabel="tok/s/user (aiperf's output_token_throughput_per_user)",
        title="\n".join(title[i : i + 100] for i in range(0, min(len(title), 300), 100)),
    )
    axes.title.set_fontsize(7)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def predict(args: argparse.Namespace) -> None:
    """The layouts' predictions alone, from the engine's steps, for runs not yet made: one .json and .md."""
    steps = MeasuredSteps.read(args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    workloads = (
        [{"trace": "agentic"}] if args.trace == "agentic" else [{"isl": args.isl, "osl": osl} for osl in args.osl]
    )
    for workload in workloads:
        made = {
            layout: predictions(layout, workload, args.concurrency, steps, trtllm=False)["engine_steps"]
            for layout in args.layout
        }
        rows = [
            {"concurrency": c, **{layout: made[layout]["points"][i] for layout in args.layout}}
            for i, c in enumerate(args.concurrency)
        ]
        named = "agentic" if "trace" in workload else f"{workload['isl']}-{workload['osl']}"
        title = f"Predicted, not measured: {named}, {made[args.layout[0]]['what']}."
        lines = table(title, rows, list(args.layout))
        stem = args.out / f"predicted-{'-vs-'.join(args.layout)}-{named}"
        plot(
            title,
            {f"{layout} (engine's steps, predicted)": made[layout]["points"] for layout in args.layout},
            stem.with_suffix(".png"),
        )
        stem.with_suffix(".json").write_text(json.dumps(made, indent=1))
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("measure", help="serve a layout on this machine's GPUs and sweep it")
    run.add_argument("--layout", choices=sorted(LAYOUTS), required=True)
    run.add_argument("--model", choices=sorted(MODELS), default=GPT_OSS_120B.name)
    run.add_argument("--isl", type=int, default=32768, help="input tokens a request (default 32768)")
    run.add_argument("--osl", type=int, nargs="+", default=[256], help="output tokens a request, swept in turn")
    run.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="users, or conversations")
    run.add_argument("--trace", choices=["agentic"], help="the agentic trace, scaled, in place of --isl/--osl")
    run.add_argument(
        "--point-seconds", type=float, default=POINT_TIMEOUT_S, help="an agentic point sends no new turn after this"
    )
    run.add_argument("--requests", type=int, help="requests a point (default: 3 per user, at least 4)")
    run.add_argument("--assets", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    done = verbs.add_parser("report", help="set the predictions beside measured study JSON files")
    done.add_argument("paths", type=Path, nargs="+")
    done.add_argument("--steps", type=Path, default=STEPS, help=f"the engine's measured steps (default {STEPS})")
    ahead = verbs.add_parser("predict", help="the predictions alone, from the engine's steps, for layouts not run")
    ahead.add_argument("--layout", choices=sorted(LAYOUTS), nargs="+", required=True)
    ahead.add_argument("--isl", type=int, default=32768)
    ahead.add_argument("--osl", type=int, nargs="+", default=[256])
    ahead.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ahead.add_argument("--trace", choices=["agentic"], help="the agentic trace, scaled, in place of --isl/--osl")
    ahead.add_argument("--steps", type=Path, default=STEPS, help=f"the engine's measured steps (default {STEPS})")
    ahead.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.verb == "measure":
        measure(args)
    elif args.verb == "report":
        report(args.paths, args.steps)
    else:
        predict(args)


if __name__ == "__main__":
    main()
