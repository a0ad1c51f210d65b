"""A sweep, or two compared, as a table and a Pareto plot (drawn with matplotlib: aiperf's own
plot export needs a browser)."""

from __future__ import annotations

from pathlib import Path

from dynamo_oss.bench.results import BUSY_LIMIT, Sweep
from dynamo_oss.perf.metrics import DEFINITIONS
from dynamo_oss.perf.pareto import interactivity_ratios, pareto_front, ratio_summary

COLUMNS = "| concurrency | requests | failed | tok/s/user | output tok/s/GPU | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | req/s | cores busy |"


def table(sweep: Sweep) -> str:
    """Markdown: one row per run, then what each column means."""
    lines = [COLUMNS, "|" + "---:|" * (COLUMNS.count("|") - 1)]
    for run in sweep.runs:
        p = run.point
        busy = (
            "-"
            if run.host_cpu_busy is None
            else f"{run.host_cpu_busy:.0%}" + (" (machine-bound)" if run.machine_bound else "")
        )
        lines.append(
            f"| {run.concurrency} | {p.requests} | {run.failed} | {p.tok_s_user:.1f} | {p.tok_s_gpu:.1f} | "
            f"{p.ttft_p50_ms:.1f} | {p.ttft_p99_ms:.1f} | {p.itl_p50_ms:.2f} | {p.itl_p99_ms:.2f} | "
            f"{run.request_rate:.2f} | {busy} |"
        )
    lines += ["", *legend(sweep)]
    return "\n".join(lines)


def legend(sweep: Sweep) -> list[str]:
    p = sweep.parameters
    lines = [
        f"{sweep.label}: ISL {p.isl}, OSL {p.osl}, streaming chat, {p.gpus} GPU(s), measured by aiperf at {sweep.endpoint}.",
        f"- tok/s/user: {DEFINITIONS['tok_s_user']}",
        f"- output tok/s/GPU: {DEFINITIONS['tok_s_gpu']}",
        f"- TTFT, ITL: {DEFINITIONS['ttft_*_ms']}; {DEFINITIONS['itl_*_ms']}",
        f"- cores busy: share of all of this machine's cores in use while measuring; at {BUSY_LIMIT:.0%} or more "
        "the machine, not the deployment, sets the pace (machine-bound)",
    ]
    if p.time_scale != 1.0:
        lines.append(
            f"- mocker workers ran {p.time_scale:g}x slower than the modelled hardware: divide latencies by "
            f"{p.time_scale:g} and multiply throughputs by it for the modelled figures"
        )
    return lines


def comparison(base: Sweep, other: Sweep) -> str:
    """`other` against `base`: tok/s/user at equal output tok/s/GPU, as the simulated study computes it."""
    ratios = interactivity_ratios(pareto_front(base.points), pareto_front(other.points))
    summary = ratio_summary(ratios)
    lines = [f"Interactivity of {other.label} over {base.label} at equal output tok/s/GPU (aiperf tok/s/user):"]
    if not len(ratios):
        lines.append("  the two sweeps reach no common tok/s/GPU range; sweep more concurrencies to overlap them")
        return "\n".join(lines)
    for x, r in ratios[:: max(1, len(ratios) // 6)]:
        lines.append(f"  at {x:8.1f} tok/s/GPU: {r:5.2f}x")
    lines.append(
        f"  at 50% of the highest common tok/s/GPU: {_x(summary['at_50pct'])}, at 90%: {_x(summary['at_90pct'])}, "
        f"highest {_x(summary['max'])} at {summary['max_at_tok_s_gpu']} tok/s/GPU"
    )
    return "\n".join(lines)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def plot(sweeps: list[Sweep], path: Path) -> Path:
    """Pareto (tok/s/user against output tok/s/GPU, concurrency at each point) and TTFT by concurrency.
    Machine-bound runs are drawn hollow."""
    import matplotlib  # here, not at the top: `dynamo serve` imports this module and never plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the file-only backend

    fig, (pareto, ttft) = plt.subplots(1, 2, figsize=(12, 4.8))
    for sweep in sweeps:
        runs = sorted(sweep.runs, key=lambda r: r.concurrency)
        line = pareto.plot(
            [r.point.tok_s_gpu for r in runs], [r.point.tok_s_user for r in runs], "-", label=sweep.label
        )
        color = line[0].get_color()
        for r in runs:
            pareto.plot(
                r.point.tok_s_gpu, r.point.tok_s_user, "o", color=color, mfc="none" if r.machine_bound else color
            )
            pareto.annotate(
                str(r.concurrency),
                (r.point.tok_s_gpu, r.point.tok_s_user),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
        concurrency = [r.concurrency for r in runs]
        ttft.plot(concurrency, [r.point.ttft_p50_ms for r in runs], "o-", color=color, label=f"{sweep.label} p50")
        ttft.plot(concurrency, [r.point.ttft_p99_ms for r in runs], "x--", color=color, label=f"{sweep.label} p99")
    p = sweeps[0].parameters
    pareto.set(
        xlabel="output tok/s/GPU (output tokens / duration / GPUs)",
        ylabel="tok/s/user (aiperf: mean of 1000 / ITL)",
        title=f"ISL {p.isl}, OSL {p.osl}",
    )
    ttft.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="TTFT ms (aiperf)", title="time to first token")
    for axes in (pareto, ttft):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
