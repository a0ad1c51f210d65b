"""The 32k study live: graphs/agg.yaml against graphs/disagg.yaml (the B200 recipes) served through
`dynamo serve --engine mocker` with the calibrated profiles, measured by aiperf, and set beside
Dynamo's offline replay of the same layouts.

Scaled to fit this 2-core machine: in time, the mocker runs TIME_SCALE times slower than the
modelled B200s (steps and KV handoff alike; `--mocker-time-scale`), so a second of live time is
1 / TIME_SCALE of a modelled second; in size, concurrency 1 to 16 and 2 x concurrency requests (at least 8).
Live figures are converted to modelled time (latencies / TIME_SCALE, rates x TIME_SCALE); the
software's own time (preprocessing, routing, streaming) shrinks by the same factor, so the gap
below is the gap at the modelled speed with that overhead scaled down, not removed.

A run whose cores were 90% busy or more is machine-bound: it is listed, marked, and left out of
the gap and the ratio. Writes agg/ and disagg/ (sweep.json, sweep.md, pareto.png), compare.png,
results.md and results.json beside this file; about 15 minutes here:

    uv run python benchmarks/live_vs_sim/run.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from dynamo_oss.bench.report import comparison, plot, table
from dynamo_oss.bench.results import Sweep, SweepParameters
from dynamo_oss.bench.served import served_graph, sweep_fields
from dynamo_oss.bench.sweep import run_once
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.perf.graphs import layout_from_file
from dynamo_oss.perf.layout import Workload
from dynamo_oss.perf.metrics import ServingPoint
from dynamo_oss.perf.pareto import interactivity_ratios, pareto_front, ratio_summary
from dynamo_oss.perf.replay import simulate

HERE = Path(__file__).parent
GRAPHS = HERE.parent.parent / "graphs"
ISL, OSL = 32768, 256
TEMPLATE_TOKENS = 67  # the harmony chat template's tokens around aiperf's prompt
TIME_SCALE = 8.0
CONCURRENCIES = (1, 4, 8, 16)
LAYOUTS = {"agg": "agg.yaml", "disagg": "disagg.yaml"}


def requests_at(concurrency: int) -> int:
    return max(8, 2 * concurrency)


def live_sweep(name: str, work: Path) -> Sweep:
    graph = GRAPHS / LAYOUTS[name]
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    parameters = SweepParameters(
        isl=ISL, osl=OSL, concurrencies=list(CONCURRENCIES), time_scale=TIME_SCALE, **sweep_fields(deployment)
    )
    with served_graph(graph, work / f"serve-{name}", engine="mocker", time_scale=TIME_SCALE) as state:
        sweep = Sweep(
            label=name,
            target=f"graphs/{LAYOUTS[name]}",
            endpoint=state.endpoint.removesuffix("/v1"),
            parameters=parameters,
        )
        for concurrency in CONCURRENCIES:
            sweep.parameters.requests = requests_at(concurrency)
            run = run_once(sweep, concurrency, work / name)
            sweep.runs.append(run)
            p = run.point
            print(
                f"  {name:<7} c={concurrency:<3} {p.tok_s_user:7.1f} tok/s/user  TTFT p50 {p.ttft_p50_ms:8.0f} ms  "
                f"cores {run.host_cpu_busy or 0:.0%}",
                flush=True,
            )
    sweep.parameters.requests = None
    return sweep


def replayed(name: str) -> list[ServingPoint]:
    """The offline replay of the same layout, prompt and request count as each live run (no warm-up:
    the replay starts every stream at once, where the live run had one warm-up request per stream)."""
    layout, workload = layout_from_file(GRAPHS / LAYOUTS[name]), Workload(isl=ISL + TEMPLATE_TOKENS, osl=OSL)
    return [simulate(layout, workload, [c], requests=requests_at(c))[0] for c in CONCURRENCIES]


def modelled(point: ServingPoint) -> ServingPoint:
    """A live point in modelled time: latencies / TIME_SCALE, rates x TIME_SCALE."""
    f = TIME_SCALE
    return point.model_copy(
        update={
            "tok_s_user": point.tok_s_user * f,
            "tok_s_user_tpot": point.tok_s_user_tpot * f,
            "tok_s_user_e2e": point.tok_s_user_e2e * f,
            "tok_s_gpu": point.tok_s_gpu * f,
            "total_tok_s_gpu": point.total_tok_s_gpu * f,
            "output_tok_s": point.output_tok_s * f,
            "ttft_mean_ms": point.ttft_mean_ms / f,
            "ttft_p50_ms": point.ttft_p50_ms / f,
            "ttft_p99_ms": point.ttft_p99_ms / f,
            "itl_p50_ms": point.itl_p50_ms / f,
            "itl_p99_ms": point.itl_p99_ms / f,
        }
    )


def gap_rows(name: str, sweep: Sweep, replay: list[ServingPoint]) -> list[dict]:
    rows = []
    for run, sim in zip(sweep.runs, replay, strict=True):
        live = modelled(run.point)
        rows.append(
            {
                "layout": name,
                "concurrency": run.concurrency,
                "machine_bound": run.machine_bound,
                "cores_busy": run.host_cpu_busy,
                **{f"live_{k}": getattr(live, k) for k in ("tok_s_user", "tok_s_gpu", "ttft_p50_ms", "itl_p50_ms")},
                **{f"replay_{k}": getattr(sim, k) for k in ("tok_s_user", "tok_s_gpu", "ttft_p50_ms", "itl_p50_ms")},
            }
        )
    return rows


def _pct(live: float, sim: float) -> str:
    return f"{live / sim - 1:+.0%}"


def markdown(rows: list[dict], ratios: dict[str, dict], compare_text: str) -> str:
    lines = [
        "# The 32k study live, against the offline replay",
        "",
        "Command: `uv run python benchmarks/live_vs_sim/run.py`. graphs/agg.yaml (2 x TP4/EP4 with attention DP) and "
        "graphs/disagg.yaml (1 prefill TP4/EP4 + 1 decode TP4/EP4 with attention DP) on 8 modelled B200s, served "
        f"on Dynamo's mocker {TIME_SCALE:g}x slower than modelled, ISL {ISL} (+{TEMPLATE_TOKENS} template tokens) / "
        f"OSL {OSL}, aiperf 0.13, 2 x concurrency requests per run (at least 8). Live figures are in modelled time "
        f"(latencies / {TIME_SCALE:g}, rates x {TIME_SCALE:g}). Replay: Dynamo's offline replay of the same layouts, "
        "same profiles, same closed loop and request count (the live runs had one warm-up request per stream "
        "first; the replay starts every stream at once).",
        "",
        "tok/s/user: aiperf output_token_throughput_per_user (mean over requests of 1000 / ITL, ITL = (e2e - TTFT) / "
        "(OSL - 1)), in both columns. tok/s/GPU: output tokens / duration / 8 GPUs. TTFT and ITL: p50 over requests.",
        "",
        "| layout | concurrency | cores busy | tok/s/user live | replay | gap | tok/s/GPU live | replay | gap | "
        "TTFT p50 ms live | replay | gap | ITL p50 ms live | replay | gap |",
        "|---|" + "---:|" * 14,
    ]
    for r in rows:
        busy = f"{r['cores_busy']:.0%}" + (" machine-bound" if r["machine_bound"] else "")
        cells = []
        for k in ("tok_s_user", "tok_s_gpu", "ttft_p50_ms", "itl_p50_ms"):
            live, sim = r[f"live_{k}"], r[f"replay_{k}"]
            cells += [f"{live:.1f}", f"{sim:.1f}", _pct(live, sim)]
        lines.append(f"| {r['layout']} | {r['concurrency']} | {busy} | " + " | ".join(cells) + " |")
    kept = [r for r in rows if not r["machine_bound"]]
    lines += ["", f"Gap over the {len(kept)} runs that kept up (live / replay - 1; machine-bound runs left out):", ""]
    for k, label in (
        ("tok_s_user", "tok/s/user"),
        ("tok_s_gpu", "tok/s/GPU"),
        ("ttft_p50_ms", "TTFT p50"),
        ("itl_p50_ms", "ITL p50"),
    ):
        gaps = [r[f"live_{k}"] / r[f"replay_{k}"] - 1 for r in kept]
        if gaps:
            lines.append(f"- {label}: {min(gaps):+.0%} to {max(gaps):+.0%}, mean {sum(gaps) / len(gaps):+.0%}")
    lines += ["", "## Disaggregated over aggregated, tok/s/user at equal tok/s/GPU", ""]
    for source, summary in ratios.items():
        lines.append(
            f"- {source}: at 50% of the common range {summary['at_50pct']}, at 90% {summary['at_90pct']}, "
            f"highest {summary['max']} at {summary['max_at_tok_s_gpu']} tok/s/GPU"
        )
    lines += [
        "",
        "Live, as `dynamo bench compare` prints it (live time, not rescaled):",
        "",
        "```",
        compare_text,
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="live-vs-sim-"))
    print(f"aiperf exports and logs in {work}", flush=True)
    sweeps, replays, rows = {}, {}, []
    for name in LAYOUTS:
        print(f"{name}: live", flush=True)
        sweeps[name] = live_sweep(name, work)
        print(f"{name}: offline replay", flush=True)
        replays[name] = replayed(name)
        rows += gap_rows(name, sweeps[name], replays[name])
    for name, sweep in sweeps.items():
        out = HERE / name
        sweep.save(out)
        (out / "sweep.md").write_text(table(sweep) + "\n")
        plot([sweep], out / "pareto.png")
    plot([sweeps["agg"], sweeps["disagg"]], HERE / "compare.png")

    def kept(name: str) -> list[ServingPoint]:
        return [modelled(r.point) for r in sweeps[name].runs if not r.machine_bound]

    ratios = {
        "live (modelled time, runs that kept up)": ratio_summary(
            interactivity_ratios(pareto_front(kept("agg")), pareto_front(kept("disagg")))
        ),
        "replay": ratio_summary(interactivity_ratios(pareto_front(replays["agg"]), pareto_front(replays["disagg"]))),
    }
    compare_text = comparison(sweeps["agg"], sweeps["disagg"])
    (HERE / "results.json").write_text(json.dumps({"time_scale": TIME_SCALE, "rows": rows, "ratios": ratios}, indent=2))
    (HERE / "results.md").write_text(markdown(rows, ratios, compare_text))
    shutil.rmtree(work, ignore_errors=True)
    print((HERE / "results.md").read_text())


if __name__ == "__main__":
    main()
