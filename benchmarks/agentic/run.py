"""The agentic study: does disaggregation pay for coding agents' traffic, with and without EAGLE3?

gpt-oss-120b on 8 GPUs (B200 and H200), serving benchmarks/agentic/conversations.py's trace (prompts that
grow turn by turn to 120k tokens, 400-token answers, a tool's seconds between turns), replayed offline
in Dynamo's simulator (perf/replay.py: the mocker at the calibrated model's speed, Dynamo's own KV
router and prefix caches, so the KV hit rate is measured). At equal GPUs: the best aggregated layout
and the published recipes' splits, each without speculation and with 3 EAGLE3 drafts a step at the
agentic acceptance profile (perf/speculation.py), at 8 to 256 conversations in flight; and KV-aware
routing against round robin.

    uv run python benchmarks/agentic/run.py            # writes results.md, results.json and pareto.png here
    uv run python benchmarks/agentic/run.py --report   # the tables and plot again from results.json

The trace is regenerated (deterministic, seed 42) into a temporary folder; conversations.py writes it
beside this file for a look.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from benchmarks.agentic.conversations import Shape, shape, write  # noqa: E402
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload  # noqa: E402
from dynamo_oss.perf.metrics import DEFINITIONS, ServingPoint  # noqa: E402
from dynamo_oss.perf.pareto import interactivity_ratios, pareto_front, ratio_summary  # noqa: E402
from dynamo_oss.perf.replay import TracePoint, replay_trace  # noqa: E402

HERE = Path(__file__).resolve().parent
LANES = (8, 16, 32, 64, 128, 256)
DRAFTS = 3  # Dynamo's gpt-oss recipe drafts 3 tokens a step
# The SLA the answer is read within, as benchmarks/isl32k's: TTFT p50 <= 2 s and p99 <= 5 s (None: no limit).
SLAS: tuple[tuple[float, float] | None, ...] = (None, (2000.0, 5000.0))
FP8 = Precision(kv_cache="fp8")
# What a typical turn's prefill is: the tool's output and the last answer (about 5,400 new tokens) after
# the conversation so far (about 56,000 cached), the trace's medians; a decode step's context is the
# trace's prompts', which the profile tables cover whole.
TYPICAL = Workload(isl=5_400, osl=400, acceptance="agentic")
CACHED = 56_000


def _agg(hardware: str, workers: int, tp: int, **pool: object) -> Layout:
    return Layout(hardware=hardware, precision=FP8, pools={"agg": PoolLayout(workers=workers, tp=tp, **pool)})


def _disagg(hardware: str, prefill: int, decode: int) -> Layout:
    return Layout(
        hardware=hardware,
        precision=FP8,
        pools={
            "prefill": PoolLayout(workers=prefill, tp=1, max_num_tokens=16384),
            "decode": PoolLayout(workers=decode),
        },
    )


# 8 GPUs each: the best aggregated layout at long input (8 x TP1, benchmarks/isl32k), the aggregated
# recipe (2 x TP4/EP4 with attention DP) on B200, and the disaggregated splits of Dynamo's agentic recipe
# (recipes/gpt-oss-120b: B200 2P6D, H200 4P4D) with one split beside each.
LAYOUTS: dict[str, dict[str, Layout]] = {
    "b200": {
        "agg 8xTP1": _agg("b200", 8, 1),
        "agg 2xTP4/ADP": _agg("b200", 2, 4, attention_dp=True, max_batch=256, max_num_tokens=16384),
        "disagg 2P6D": _disagg("b200", 2, 6),
        "disagg 3P5D": _disagg("b200", 3, 5),
    },
    "h200": {
        "agg 8xTP1": _agg("h200", 8, 1),
        "disagg 4P4D": _disagg("h200", 4, 4),
        "disagg 3P5D": _disagg("h200", 3, 5),
    },
}


def drafting(layout: Layout) -> Layout:
    pools = {role: pool.model_copy(update={"draft_tokens": DRAFTS}) for role, pool in layout.pools.items()}
    return layout.model_copy(update={"pools": pools})


def _case(layout: Layout, trace: str, lanes: int, router: str) -> dict:
    point = replay_trace(layout, Path(trace), lanes, TYPICAL, cached_tokens=CACHED, router=router)  # type: ignore[arg-type]
    return point.model_dump()


def run(trace: Path) -> list[dict]:
    """Every case, two at a time (one per core)."""
    jobs: list[tuple[dict, Future]] = []
    with ProcessPoolExecutor(max_workers=2) as pool:
        for hardware, layouts in LAYOUTS.items():
            for name, plain in layouts.items():
                for speculative in (False, True):
                    layout = drafting(plain) if speculative else plain
                    for lanes in LANES:
                        about = {"hardware": hardware, "layout": name, "speculative": speculative, "router": "kv"}
                        jobs.append((about, pool.submit(_case, layout, str(trace), lanes, "kv")))
        for hardware, name in (("b200", "agg 8xTP1"), ("b200", "disagg 2P6D")):
            for lanes in (32, 128):
                about = {"hardware": hardware, "layout": name, "speculative": False, "router": "round_robin"}
                jobs.append((about, pool.submit(_case, LAYOUTS[hardware][name], str(trace), lanes, "round_robin")))
        rows = []
        for about, job in jobs:
            rows.append({**about, **job.result()})
            row = rows[-1]
            print(
                f"{row['hardware']} {row['layout']:<14} {'EAGLE3' if row['speculative'] else 'plain':<6} "
                f"{row['router']:<11} lanes {row['lanes']:>3}: {row['serving']['tok_s_user']:7.1f} tok/s/user, "
                f"{row['serving']['tok_s_gpu']:7.1f} tok/s/GPU, KV hits {row['kv_hit_rate']:.0%}",
                flush=True,
            )
    return rows


def points(rows: list[dict], hardware: str, layout: str, speculative: bool, router: str = "kv") -> list[TracePoint]:
    return [
        TracePoint.model_validate(row)
        for row in rows
        if (row["hardware"], row["layout"], row["speculative"], row["router"])
        == (hardware, layout, speculative, router)
    ]


def _front(
    rows: list[dict], hardware: str, mode: str, speculative: bool, sla: tuple[float, float] | None
) -> list[ServingPoint]:
    """The Pareto front of one mode's layouts on one GPU, without or with speculation, within the SLA."""
    serving = [
        p.serving
        for name in LAYOUTS[hardware]
        if name.startswith(mode)
        for p in points(rows, hardware, name, speculative)
        if sla is None or (p.serving.ttft_p50_ms <= sla[0] and p.serving.ttft_p99_ms <= sla[1])
    ]
    return pareto_front(serving)


def answer(rows: list[dict]) -> list[dict]:
    """Disaggregated over aggregated, aiperf tok/s/user at equal tok/s/GPU, for each GPU, speculation and SLA;
    and EAGLE3 over no speculation in each mode."""
    out = []
    for sla in SLAS:
        for hardware in LAYOUTS:
            for speculative in (False, True):
                agg, disagg = (_front(rows, hardware, mode, speculative, sla) for mode in ("agg", "disagg"))
                best = {"agg": max(p.tok_s_gpu for p in agg), "disagg": max(p.tok_s_gpu for p in disagg)}
                ratio = ratio_summary(interactivity_ratios(agg, disagg))
                out.append(
                    {
                        "sla": sla,
                        "hardware": hardware,
                        "speculative": speculative,
                        "best_tok_s_gpu": best,
                        "ratio": ratio,
                    }
                )
            for mode in ("agg", "disagg"):
                plain, eagle3 = (_front(rows, hardware, mode, speculative, sla) for speculative in (False, True))
                ratio = ratio_summary(interactivity_ratios(plain, eagle3))
                out.append({"sla": sla, "hardware": hardware, "mode": mode, "eagle3_over_plain": ratio})
    return out


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _sla(sla: list[float] | tuple[float, float] | None) -> str:
    return "none" if sla is None else f"{sla[0] / 1e3:g} s / {sla[1] / 1e3:g} s"


def markdown(rows: list[dict], summary: list[dict], trace_shape: dict, seconds: float) -> str:
    lines = [
        "# Agentic study: results",
        "",
        f"`uv run python benchmarks/agentic/run.py`, {seconds:.0f} s on this machine (2 cores).",
        "",
        "Definitions: " + "; ".join(f"{k}: {DEFINITIONS[k]}" for k in ("tok_s_user", "tok_s_gpu")) + "; KV hits: "
        "prompt tokens a prefix cache held over all prompt tokens (the replay's prefix_cache_reused_ratio).",
        "",
        "The trace (benchmarks/agentic/conversations.py, measured on it): "
        + ", ".join(f"{k} {v:g}" for k, v in trace_shape.items()),
        "",
        "## Disaggregated over aggregated, tok/s/user at equal tok/s/GPU (8 GPUs)",
        "",
        "Each side is the Pareto front of its layouts' points within the SLA (TTFT p50 / p99).",
        "",
        "| SLA | GPU | EAGLE3 | best tok/s/GPU agg / disagg | ratio at 50% / 90% / max | max at tok/s/GPU |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in (row for row in summary if "ratio" in row):
        r, best = row["ratio"], row["best_tok_s_gpu"]
        lines.append(
            f"| {_sla(row['sla'])} | {row['hardware']} | {'3 drafts' if row['speculative'] else 'none'} | "
            f"{best['agg']:,.0f} / {best['disagg']:,.0f} | {_times(r['at_50pct'])} / {_times(r['at_90pct'])} / "
            f"{_times(r['max'])} | {r['max_at_tok_s_gpu'] or '-'} |"
        )
    lines += [
        "",
        "## EAGLE3 (3 drafts, agentic acceptance) over no speculation, tok/s/user at equal tok/s/GPU",
        "",
        "| SLA | GPU | mode | ratio at 50% / 90% / max |",
        "|---|---|---|---:|",
    ]
    for row in (row for row in summary if "eagle3_over_plain" in row):
        r = row["eagle3_over_plain"]
        lines.append(
            f"| {_sla(row['sla'])} | {row['hardware']} | {row['mode']} | "
            f"{_times(r['at_50pct'])} / {_times(r['at_90pct'])} / {_times(r['max'])} |"
        )
    lines += [
        "",
        "## Every case",
        "",
        "| GPU | layout | EAGLE3 | router | conversations | tok/s/user | tok/s/GPU | TTFT p50 (ms) | TTFT p99 (ms) | KV hits |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s = row["serving"]
        lines.append(
            f"| {row['hardware']} | {row['layout']} | {'3' if row['speculative'] else '-'} | {row['router']} | "
            f"{row['lanes']} | {s['tok_s_user']:.1f} | {s['tok_s_gpu']:.1f} | {s['ttft_p50_ms']:,.0f} | "
            f"{s['ttft_p99_ms']:,.0f} | {row['kv_hit_rate']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LAYOUTS), figsize=(7 * len(LAYOUTS), 5.5))
    for ax, (hardware, layouts) in zip(axes, LAYOUTS.items(), strict=True):
        for name in layouts:
            for speculative in (False, True):
                curve = [(p.serving.tok_s_gpu, p.serving.tok_s_user) for p in points(rows, hardware, name, speculative)]
                style = "-" if name.startswith("disagg") else "--"
                label = f"{name}{' + EAGLE3x3' if speculative else ''}"
                ax.plot(*zip(*curve, strict=True), style, marker="o" if speculative else "s", label=label)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="output tok/s/GPU over all GPUs (8 to 256 conversations; a line turning back is past its ceiling)",
            ylabel="tok/s/user (aiperf)",
            title=f"gpt-oss-120b, 8 x {hardware.upper()}, agentic trace, KV routing",
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    if "--report" in sys.argv:  # the tables and plot again from results.json, replaying nothing
        saved = json.loads((HERE / "results.json").read_text())
        rows, trace_shape, seconds = saved["rows"], saved["trace"], saved["seconds"]
    else:
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as folder:
            trace = Path(folder) / "trace.jsonl"
            trace_shape = shape(write(trace, Shape()))
            rows = run(trace)
        seconds = time.monotonic() - started
    summary = answer(rows)
    saved = {"seconds": seconds, "trace": trace_shape, "summary": summary, "rows": rows}
    (HERE / "results.json").write_text(json.dumps(saved, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(rows, summary, trace_shape, seconds))
    plot(rows, HERE / "pareto.png")
    print(f"wrote results.md, results.json and pareto.png ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
