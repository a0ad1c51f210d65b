"""The 32k-ISL study: is disaggregation up to 4x more interactive at 32k input on Blackwell?

gpt-oss-120b on 8 GPUs at ISL 32,768 with OSL 256 (the workload of Dynamo's own gpt-oss
benchmark) and OSL 1,024, on B200, H200 and GB200: the best aggregated layouts against the
best disaggregated splits (P:D ratio and TP per pool searched by dynamo_oss.perf.search),
concurrency swept, replayed in Dynamo's offline simulator at the calibrated model's speed.
Then the published recipes as they are, the comparison over ISL, and the sensitivity to
prefill speed, the one input no published figure pins down. Last, the H200 cases once more
with the efficiencies the model had for Hopper before the H200 measurements (the Blackwell
priors; `Factors(hopper=None)`), to show what the measurements moved, and once more with the
H200's MXFP4 expert weight reads at BF16's share (`expert_memory_mxfp4=None`), as before issue 27.

Run from the repository root; writes results.json, results.csv, results.md and pareto.png
beside this file:

    uv run python benchmarks/isl32k/run.py
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.perf.costs import Factors, fitted_factors, hopper_measured
from dynamo_oss.perf.graphs import layout_from_file
from dynamo_oss.perf.layout import Layout, Precision, Workload
from dynamo_oss.perf.metrics import DEFINITIONS, ServingPoint
from dynamo_oss.perf.pareto import interactivity_ratios, ratio_summary
from dynamo_oss.perf.search import LayoutPoint, SearchResult, search, sweep

if TYPE_CHECKING:
    from matplotlib.axes import Axes

HERE = Path(__file__).parent
MODEL, GPUS, ISL = "gpt-oss-120b", 8, 32768
OSLS = (256, 1024)
HARDWARES = ("b200", "h200", "gb200")
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TTFT_LIMIT_MS = 2000.0  # the SLA: a 32k prompt answered within 2 s at the median ...
TTFT_P99_LIMIT_MS = 5000.0  # ... and within 5 s at p99
TIGHT_SLA_MS = (1000.0, 2000.0)  # a tighter SLA (TTFT p50, p99) for the baseline table
PRECISION = Precision(kv_cache="fp8")  # FP8 KV cache, as Dynamo's gpt-oss-120b recipes run it
ISL_SWEEP = (8192, 65536, 114688)  # B200, OSL 256; 114,688 + 256 stays inside the 131,072 context
SWEEP_CONCURRENCIES = (4, 16, 64, 256, 512)
SLOW_PREFILL = 0.45  # compute efficiency for the sensitivity case: prefill about 1.7x slower
# The published recipes, as the shipped graphs run them: the aggregated recipe (2 x TP4/EP4 with
# attention DP, 16k-token steps) and Dynamo's gpt-oss guide (1 prefill TP4/EP4, 20k-token steps +
# 1 decode TP4/EP4 with attention DP), with the B200 and the H200 engine settings.
GRAPHS = HERE.parent.parent / "graphs"
RECIPES = {"b200": ("agg.yaml", "disagg-1p1d.yaml"), "h200": ("agg-h200.yaml", "disagg-h200.yaml")}

# Two ways to read "interactivity": aiperf's tok/s/user (DEFINITIONS["tok_s_user"]), and the
# stutter users notice (tokens per second at the p99 of every inter-token gap, DEFINITIONS["gap_p99_ms"]).
SPEEDS: dict[str, Callable[[ServingPoint], float]] = {
    "mean": lambda s: s.tok_s_user,
    "p99": lambda s: 1e3 / (s.gap_p99_ms or s.itl_p99_ms),
}


def ratios(agg: list[LayoutPoint], disagg: list[LayoutPoint], speed: Callable[[ServingPoint], float]) -> np.ndarray:
    """Disaggregated over aggregated `speed` at equal tok/s/GPU: rows (tok/s/GPU, ratio)."""
    return interactivity_ratios([p.serving for p in agg], [p.serving for p in disagg], speed)


def summarise(result: SearchResult, limit: float | None, p99_limit: float | None = None) -> dict[str, object]:
    """Fronts and interactivity ratios of one case within one TTFT limit (median, and p99)."""
    out: dict[str, object] = {"ttft_limit_ms": limit, "ttft_p99_limit_ms": p99_limit}
    for name, speed in SPEEDS.items():
        fronts = {
            mode: result.front(mode, ttft_ms=limit, speed=speed, ttft_p99_ms=p99_limit) for mode in ("agg", "disagg")
        }
        out[name] = {
            "fronts": {
                m: [{"layout": p.layout.describe(), **p.serving.model_dump()} for p in f] for m, f in fronts.items()
            },
            "best_tok_s_gpu": {m: round(max((p.serving.tok_s_gpu for p in f), default=0)) for m, f in fronts.items()},
            **ratio_summary(ratios(fronts["agg"], fronts["disagg"], speed)),
        }
    return out


def describe(result: SearchResult, hardware: str, label: str) -> dict[str, object]:
    w = result.workload
    return {
        "label": label,
        "hardware": hardware,
        "isl": w.isl,
        "osl": w.osl,
        "points": [
            {"mode": p.layout.mode, "layout": p.layout.describe(), **p.serving.model_dump()} for p in result.points
        ],
        "layouts": {p.layout.describe(): p.layout.model_dump() for p in result.points},
        "unlimited": summarise(result, None),
        "limited": summarise(result, TTFT_LIMIT_MS, TTFT_P99_LIMIT_MS),
    }


def run_case(
    hardware: str, isl: int, osl: int, concurrencies: tuple[int, ...], factors: Factors, label: str = ""
) -> dict:
    result = search(
        MODEL,
        hardware,
        GPUS,
        Workload(isl=isl, osl=osl),
        concurrencies,
        ttft_limits=(None, TTFT_LIMIT_MS),
        precision=PRECISION,
        factors=factors,
    )
    return describe(result, hardware, label or f"{HARDWARE[hardware].label}, ISL {isl:,} / OSL {osl}")


def recipe_case(hardware: str, osl: int, factors: Factors) -> dict:
    """The published aggregated and disaggregated recipes for `hardware` at 32k input, as they are."""
    workload = Workload(isl=ISL, osl=osl)
    layouts = [layout_from_file(GRAPHS / name) for name in RECIPES[hardware]]
    points = [point for layout in layouts for point in sweep(layout, workload, CONCURRENCIES, factors)]
    return describe(
        SearchResult(workload=workload, gpus=GPUS, points=points),
        hardware,
        f"{HARDWARE[hardware].label}, published recipes, ISL 32,768 / OSL {osl}",
    )


def result_of(case: dict) -> SearchResult:
    """A described case back as a SearchResult, to take fronts of it again."""
    fields = set(ServingPoint.model_fields)
    points = [
        LayoutPoint(
            layout=Layout(**case["layouts"][p["layout"]]),
            serving=ServingPoint(**{k: v for k, v in p.items() if k in fields}),
        )
        for p in case["points"]
    ]
    return SearchResult(workload=Workload(isl=case["isl"], osl=case["osl"]), gpus=GPUS, points=points)


def _ttft_at(front: list[LayoutPoint], x: float) -> float | None:
    """A front's median TTFT at `x` tok/s/GPU, between the two points around it (the nearer one's)."""
    curve = sorted(front, key=lambda p: p.serving.tok_s_gpu)
    if not curve or not 0.99 * curve[0].serving.tok_s_gpu <= x <= 1.01 * curve[-1].serving.tok_s_gpu:
        return None  # (the 1% covers `x` rounded to whole tok/s/GPU)
    return min(curve, key=lambda p: abs(np.log(p.serving.tok_s_gpu / x))).serving.ttft_p50_ms


def baseline(
    label: str, disagg: SearchResult, agg: SearchResult, sla: tuple[float | None, float | None]
) -> dict[str, object]:
    """Disaggregated over aggregated aiperf tok/s/user at equal tok/s/GPU, for one pair of sides."""
    points = [p for p in disagg.points if p.layout.mode == "disagg"] + [p for p in agg.points if p.layout.mode == "agg"]
    both = SearchResult(workload=disagg.workload, gpus=GPUS, points=points)
    fronts = {m: both.front(m, ttft_ms=sla[0], ttft_p99_ms=sla[1]) for m in ("agg", "disagg")}
    summary = ratio_summary(ratios(fronts["agg"], fronts["disagg"], SPEEDS["mean"]))
    at = summary["max_at_tok_s_gpu"]
    return {
        "baseline": label,
        "sla_ttft_ms": list(sla),
        **summary,
        "best_tok_s_gpu": {m: round(max((p.serving.tok_s_gpu for p in f), default=0)) for m, f in fronts.items()},
        "ttft_p50_at_max_ms": {m: None if at is None else _ttft_at(f, at) for m, f in fronts.items()},
    }


def baselines(searched: dict, recipes: dict) -> list[dict[str, object]]:
    """The 4x question against each baseline, under the SLA and under a tighter one."""
    found, published = result_of(searched), result_of(recipes)
    rows = []
    for sla in ((None, None), (TTFT_LIMIT_MS, TTFT_P99_LIMIT_MS), TIGHT_SLA_MS):
        for label, disagg, agg in (
            ("published disagg recipe / published agg recipe", published, published),
            ("best searched disagg / published agg recipe", found, published),
            ("best searched disagg / best searched agg", found, found),
        ):
            rows.append({"case": searched["label"], **baseline(label, disagg, agg, sla)})
    return rows


# ---- output ---------------------------------------------------------------------------
LIMIT = f"TTFT p50 <= {TTFT_LIMIT_MS / 1000:g} s, p99 <= {TTFT_P99_LIMIT_MS / 1000:g} s"


def _ratio_cell(s: dict) -> str:
    return " / ".join("-" if s[k] is None else f"{s[k]}x" for k in ("at_50pct", "at_90pct", "max"))


def _row(c: dict) -> str:
    limited, unlimited = c["limited"], c["unlimited"]
    best = limited["mean"]["best_tok_s_gpu"]
    return (
        f"| {c['label']} | {best['agg']:,} / {best['disagg']:,} | {_ratio_cell(limited['mean'])} "
        f"| {_ratio_cell(limited['p99'])} | {_ratio_cell(unlimited['mean'])} |"
    )


def _front_text(front: list[dict]) -> str:
    return "<br>".join(
        f"{p['layout']} c{p['concurrency']}: {p['tok_s_user']:.0f} @ {p['tok_s_gpu']:.0f}" for p in front
    )


def _speed_at(front: list[dict], x: float) -> float | None:
    """A front's tok/s/user at `x` tok/s/GPU, log-linear between its points (None outside them)."""
    curve = np.array(sorted((p["tok_s_gpu"], p["tok_s_user"]) for p in front))
    if not len(curve) or not curve[0, 0] <= x <= curve[-1, 0]:
        return None
    return float(np.exp(np.interp(np.log(x), np.log(curve[:, 0]), np.log(curve[:, 1]))))


def _top(c: dict) -> float:
    """The highest tok/s/GPU both fronts reach (TTFT <= 2 s)."""
    fronts = c["limited"]["mean"]["fronts"]
    return min(max(p["tok_s_gpu"] for p in fronts[m]) for m in ("agg", "disagg"))


def before_after(before: dict, after: dict) -> list[str]:
    """Table rows: one H200 case's figures with the Hopper priors and with the measured efficiencies."""
    rows = []

    def add(figure: str, pick: Callable[[dict], str]) -> None:
        rows.append(f"| OSL {after['osl']} | {figure} | {pick(before)} | {pick(after)} |")

    def point(p: dict) -> str:
        return f"{p['tok_s_gpu']:.0f} tok/s/GPU, {p['tok_s_user']:.0f} tok/s/user ({p['layout']} c{p['concurrency']})"

    def fronts(c: dict) -> dict[str, list[dict]]:
        return c["limited"]["mean"]["fronts"]

    def num(x: float | None, unit: str = "") -> str:
        return "-" if x is None else f"{x:,.0f}{unit}" if x >= 10 else f"{x:.2f}{unit}"

    def alone(c: dict, mode: str) -> str:
        """The lowest TTFT and the highest tok/s/user of one request alone, each over the mode's layouts."""
        points = [p for p in c["points"] if p["mode"] == mode and p["concurrency"] == 1]
        first = min(points, key=lambda p: p["ttft_p50_ms"])
        fastest = max(points, key=lambda p: p["tok_s_user"])
        return (
            f"{first['ttft_p50_ms']:.0f} ms ({first['layout']}), {fastest['tok_s_user']:.0f} tok/s/user "
            f"({fastest['layout']})"
        )

    for mode in ("agg", "disagg"):
        add(f"one request alone (c1), {mode}: lowest TTFT p50, highest tok/s/user", lambda c, m=mode: alone(c, m))
    add("best aggregated point (highest tok/s/GPU)", lambda c: point(fronts(c)["agg"][0]))
    add("best disaggregated point (highest tok/s/GPU)", lambda c: point(fronts(c)["disagg"][0]))
    top = min(_top(before), _top(after))
    for share in (0.5, 0.9):
        x = share * top
        for mode in ("agg", "disagg"):
            add(f"{mode} tok/s/user at {x:,.0f} tok/s/GPU", lambda c, m=mode, x=x: num(_speed_at(fronts(c)[m], x)))

        def ratio(c: dict, x: float = x) -> str:
            a, d = (_speed_at(fronts(c)[m], x) for m in ("agg", "disagg"))
            return "-" if a is None or d is None else f"{d / a:.2f}x"

        add(f"disagg / agg tok/s/user at {x:,.0f} tok/s/GPU", ratio)
    add("mean ratio at 50% / 90% of the common top / max", lambda c: _ratio_cell(c["limited"]["mean"]))
    add("p99-ITL ratio at 50% / 90% / max", lambda c: _ratio_cell(c["limited"]["p99"]))
    return rows


def _baseline_row(b: dict) -> str:
    ttft = b["ttft_p50_at_max_ms"]
    cost = "-" if None in ttft.values() else f"{ttft['disagg'] / 1e3:.2f} s / {ttft['agg'] / 1e3:.2f} s"
    where = "-" if b["max_at_tok_s_gpu"] is None else f"{b['max_at_tok_s_gpu']:,}"
    best = b["best_tok_s_gpu"]
    p50, p99 = b["sla_ttft_ms"]
    sla = "none" if p50 is None else f"{p50 / 1e3:g} / {p99 / 1e3:g} s"
    return (
        f"| {b['case']} | {b['baseline']} | {sla} "
        f"| {best['disagg']:,} / {best['agg']:,} | {_ratio_cell(b)} | {where} | {cost} |"
    )


def write_markdown(
    cases: list[dict],
    extra: list[dict],
    sweep_cases: list[dict],
    before: list[dict],
    before_mxfp4: list[dict],
    baseline_rows: list[dict],
    seconds: float,
) -> str:
    head = [
        (
            f"| case | best tok/s/GPU agg / disagg ({LIMIT}) | mean tok/s/user ratio, {LIMIT}: at 50% / 90% / max "
            f"| p99-ITL ratio, {LIMIT}: at 50% / 90% / max | mean tok/s/user ratio, no TTFT limit: at 50% / 90% / max |"
        ),
        "|---|---:|---:|---:|---:|",
    ]
    lines = [
        f"# {MODEL} on 8 GPUs: aggregated against disaggregated at long input",
        "",
        (
            "Generated by `uv run python benchmarks/isl32k/run.py`. A ratio is disaggregated over aggregated "
            "interactivity at equal output tok/s/GPU, each mode's Pareto front (best layouts of the search) "
            "interpolated between replayed concurrencies, at 50% and 90% of the highest tok/s/GPU both fronts "
            "reach, and its maximum. Interactivity is aiperf's tok/s/user, or 1000 / p99 inter-token gap for the "
            f"stutter a user sees. '{LIMIT}' keeps only points whose TTFT is within it."
        ),
        "",
        "Definitions (dynamo_oss/perf/metrics.py):",
        "",
        *[f"- `{name}`: {text}" for name, text in DEFINITIONS.items()],
        "",
        "## Against each baseline",
        "",
        (
            "aiperf tok/s/user, disaggregated over aggregated, at equal output tok/s/GPU; the TTFT columns are "
            "each side's median TTFT at the tok/s/GPU where the ratio peaks (disagg / agg)."
        ),
        "",
        "| case | baseline | SLA: TTFT p50 / p99 | best tok/s/GPU disagg / agg | ratio at 50% / 90% / max "
        "| max at tok/s/GPU | TTFT p50 there, disagg / agg |",
        "|---|---|---|---:|---:|---:|---:|",
        *[_baseline_row(b) for b in baseline_rows],
        "",
        "## 32k input, searched layouts",
        "",
        *head,
        *[_row(c) for c in cases],
        "",
        "## Published recipes as they are (their own fronts), and slower prefill",
        "",
        *head,
        *[_row(c) for c in extra],
        "",
        "## Over ISL (B200, OSL 256)",
        "",
        *head,
        *[_row(c) for c in sweep_cases],
        "",
        f"## Pareto fronts, mean tok/s/user @ tok/s/GPU, {LIMIT}",
        "",
        "| case | aggregated | disaggregated |",
        "|---|---|---|",
    ]
    for c in cases + extra + before + before_mxfp4:
        f = c["limited"]["mean"]["fronts"]
        lines.append(f"| {c['label']} | {_front_text(f['agg'])} | {_front_text(f['disagg'])} |")
    after = {c["osl"]: c for c in cases if c["hardware"] == "h200"}
    measured = hopper_measured()
    lines += [
        "",
        "## H200 before and after the H200 measurements",
        "",
        (
            "Before: Hopper at the Blackwell priors (compute 0.76, memory 0.90, link 0.87 of the datasheet; "
            "`Factors(hopper=None)`). After: the efficiencies measured on H200s (dynamo_oss/perf/hopper_measured.json, "
            f"benchmarks/gpu/CALIBRATION.md). Same search, same replay, {LIMIT}; tok/s/user at fixed tok/s/GPU "
            "levels (50% and 90% of the lower of the two runs' common top) compares the same operating points."
        ),
        "",
        "| case | figure | before | after |",
        "|---|---|---|---|",
        *[row for c in before for row in before_after(c, after[c["osl"]])],
        "",
        *head,
        *[_row(c) for c in before],
        *[_row(after[c["osl"]]) for c in before],
        "",
        "## H200 before and after the MXFP4 expert factor",
        "",
        (
            f"Before: MXFP4 expert weight reads at the share BF16 grouped GEMMs reach (expert_memory "
            f"{measured.expert_memory}; `expert_memory_mxfp4=None`). After: at the share the checkpoint's MXFP4 "
            f"experts reach in triton_kernels' W4A16 GEMMs (expert_memory_mxfp4 {measured.expert_memory_mxfp4}, "
            "benchmarks/gpu/mxfp4_experts). Everything else as committed; same search, same replay, "
            f"{LIMIT}, tok/s/user at the same kind of fixed tok/s/GPU levels."
        ),
        "",
        "| case | figure | before | after |",
        "|---|---|---|---|",
        *[row for c in before_mxfp4 for row in before_after(c, after[c["osl"]])],
        "",
        *head,
        *[_row(c) for c in before_mxfp4],
        *[_row(after[c["osl"]]) for c in before_mxfp4],
    ]
    lines += ["", f"Runtime: {seconds:.0f} s on this machine (2 cores)."]
    return "\n".join(lines) + "\n"


def _draw_fronts(ax: Axes, case: dict) -> None:
    for mode, colour in (("agg", "tab:blue"), ("disagg", "tab:red")):
        every = [p for p in case["points"] if p["mode"] == mode]
        ax.scatter([p["tok_s_gpu"] for p in every], [p["tok_s_user"] for p in every], s=8, color=colour, alpha=0.25)
        for key, style, label in (("unlimited", ":", "no TTFT limit"), ("limited", "-", LIMIT)):
            front = case[key]["mean"]["fronts"][mode]
            ax.plot(
                [p["tok_s_gpu"] for p in front],
                [p["tok_s_user"] for p in front],
                style,
                color=colour,
                marker="o",
                ms=3,
                label=f"{mode}, {label}",
            )
        p99 = case["limited"]["p99"]["fronts"][mode]
        ax.plot(
            [p["tok_s_gpu"] for p in p99],
            [1e3 / (p["gap_p99_ms"] or p["itl_p99_ms"]) for p in p99],
            "--",
            color=colour,
            lw=0.8,
            label=f"{mode}, 1000/p99 inter-token gap, {LIMIT}",
        )
    s = case["limited"]["mean"]
    ax.set_title(f"{case['label']}: {_ratio_cell(s)} (50%/90%/max)", fontsize=8)
    ax.set_xlabel("output tok/s/GPU (output tokens / duration / GPUs of all pools)")
    ax.set_ylabel("tok/s/user (aiperf: mean over requests of 1/ITL)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)


def plot(cases: list[dict], reference: dict, sweep_cases: list[dict], before: list[dict], path: Path) -> None:
    import matplotlib  # here, not at the top: the suite imports this module to test its tables

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the file-only backend

    fig, axes = plt.subplots(len(HARDWARES) + 1, len(OSLS), figsize=(11, 16), squeeze=False)
    for c in cases:
        _draw_fronts(axes[HARDWARES.index(c["hardware"])][OSLS.index(c["osl"])], c)
    for c in before:  # the H200 fronts with the Hopper priors, for comparison
        ax = axes[HARDWARES.index("h200")][OSLS.index(c["osl"])]
        for mode, colour in (("agg", "tab:blue"), ("disagg", "tab:red")):
            front = c["limited"]["mean"]["fronts"][mode]
            ax.plot(
                [p["tok_s_gpu"] for p in front],
                [p["tok_s_user"] for p in front],
                "-",
                color=colour,
                alpha=0.3,
                lw=2.5,
                label=f"{mode}, {LIMIT}, before the H200 measurements",
            )
        ax.legend(fontsize=6)
    _draw_fronts(axes[-1][0], reference)
    ax = axes[-1][1]
    isl = [c["isl"] for c in sweep_cases]
    for speed, key, style in (("mean", "max", "-o"), ("mean", "at_90pct", "--s"), ("p99", "at_90pct", "-^")):
        ax.plot(
            isl,
            [c["limited"][speed][key] or np.nan for c in sweep_cases],
            style,
            label=f"{speed} tok/s/user, {key}, {LIMIT}",
        )
    ax.plot(
        isl,
        [c["unlimited"]["mean"]["max"] or np.nan for c in sweep_cases],
        "-x",
        color="grey",
        label="mean, max, no TTFT limit",
    )
    ax.axhline(4, color="black", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_title(f"B200, OSL {OSLS[0]}: disaggregated / aggregated interactivity over ISL", fontsize=8)
    ax.set_xlabel("ISL")
    ax.set_ylabel("ratio")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"{MODEL} on 8 GPUs: Pareto fronts from Dynamo's replay at the calibrated model's speed")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=100)


def _rounded(value: object) -> object:
    """Figures to 0.01: results.json stays small enough to commit."""
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def write_csv(cases: list[dict], path: Path) -> None:
    fields = [
        "case",
        "mode",
        "layout",
        "concurrency",
        "tok_s_user",
        "tok_s_gpu",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p50_ms",
        "itl_p99_ms",
    ]
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for c in cases:
            for p in c["points"]:
                writer.writerow(
                    {"case": c["label"], **{k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()}}
                )


def main() -> None:
    start = time.monotonic()
    factors = fitted_factors()
    # Hopper as the model had it before the H200 measurements: the priors of `Factors`, not the fit.
    priors = factors.model_copy(update={"hopper": None, "compute_efficiency": Factors().compute_efficiency})
    slow_factors = factors.model_copy(update={"compute_efficiency": SLOW_PREFILL})
    # ... and with the measurements but MXFP4 experts read at BF16's share, as before issue 27.
    bf16_share = factors.model_copy(update={"hopper": factors.hopper.model_copy(update={"expert_memory_mxfp4": None})})

    def done(job: Future) -> dict:
        case = job.result()
        print(f"{case['label']}: {time.monotonic() - start:.0f} s", flush=True)
        return case

    # The cases are independent replays: one process per core of the 2-core machine the study targets.
    with ProcessPoolExecutor(max_workers=2) as pool:
        case_jobs = [pool.submit(run_case, hw, ISL, osl, CONCURRENCIES, factors) for hw in HARDWARES for osl in OSLS]
        recipe_jobs = {(hw, osl): pool.submit(recipe_case, hw, osl, factors) for hw in RECIPES for osl in OSLS}
        slow_job = pool.submit(
            run_case,
            "b200",
            ISL,
            OSLS[0],
            CONCURRENCIES,
            slow_factors,
            f"B200, ISL 32,768 / OSL 256, compute efficiency {SLOW_PREFILL}",
        )
        sweep_jobs = [pool.submit(run_case, "b200", isl, OSLS[0], SWEEP_CONCURRENCIES, factors) for isl in ISL_SWEEP]

        def h200_again(other: Factors, label: str) -> list[Future]:
            """The H200 cases once more under `other` factors, one per OSL."""
            return [
                pool.submit(run_case, "h200", ISL, osl, CONCURRENCIES, other, f"{label}, ISL 32,768 / OSL {osl}")
                for osl in OSLS
            ]

        before_jobs = h200_again(priors, "H200 before the H200 measurements")
        mxfp4_jobs = h200_again(bf16_share, "H200 before the MXFP4 expert factor")
        cases = [done(job) for job in case_jobs]
        recipes = {key: done(job) for key, job in recipe_jobs.items()}
        reference, slow = recipes[("b200", OSLS[0])], done(slow_job)
        main_b200 = cases[HARDWARES.index("b200") * len(OSLS)]
        sweep_cases = sorted([done(job) for job in sweep_jobs] + [main_b200], key=lambda c: c["isl"])
        before = [done(job) for job in before_jobs]
        before_mxfp4 = [done(job) for job in mxfp4_jobs]
    searched = {(c["hardware"], c["osl"]): c for c in cases}
    baseline_rows = [row for key, recipe in recipes.items() for row in baselines(searched[key], recipe)]
    seconds = time.monotonic() - start
    everything = {
        "definitions": DEFINITIONS,
        "cases": cases,
        "recipes": list(recipes.values()),
        "baselines": baseline_rows,
        "slow_prefill": slow,
        "isl_sweep": sweep_cases,
        "h200_before_measurements": before,
        "h200_before_mxfp4_factor": before_mxfp4,
        "seconds": round(seconds),
    }
    (HERE / "results.json").write_text(json.dumps(_rounded(everything)) + "\n")
    others = [c for c in sweep_cases if c is not main_b200]
    write_csv(cases + list(recipes.values()) + [slow] + others + before + before_mxfp4, HERE / "results.csv")
    (HERE / "results.md").write_text(
        write_markdown(cases, [*recipes.values(), slow], sweep_cases, before, before_mxfp4, baseline_rows, seconds)
    )
    plot(cases, reference, sweep_cases, before, HERE / "pareto.png")
    print((HERE / "results.md").read_text().split("## Pareto fronts")[0])
    print(f"total {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
