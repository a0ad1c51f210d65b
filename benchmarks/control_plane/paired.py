"""The gateway against Dynamo's frontend direct, measured at the same time: two aiperf runs start
together against one served graph, one through the gateway and one direct, each with half the
streams. Both paths then meet the same queue, the same machine load and the same moment, which
run.py's back-to-back runs cannot give them (the same path varies 10-20% between two sweeps there).

graphs/disagg.yaml on the mocker SLOW times slower than modelled; ISL 1000 / OSL 200; total
concurrency 16 to 512. Writes paired.md and paired.json beside this file; about 15 minutes here:

    uv run python benchmarks/control_plane/paired.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from run import GRAPHS, HERE, SLOW, TTFT_TARGET_MS, THROUGHPUT_TARGET, _frontend_url, _mark, measure, sweep_for

from dynamo_oss.bench.served import served_graph

TOTAL_CONCURRENCIES = (16, 64, 256, 512)  # streams in flight, split evenly between the two paths
REPEATS = 2


def paired(folder: Path) -> list[dict]:
    graph, run_dir = GRAPHS / "disagg.yaml", folder / "serve"
    rows = []
    with served_graph(graph, run_dir, engine="mocker", time_scale=SLOW) as state:
        for repeat in range(REPEATS):
            for total in TOTAL_CONCURRENCIES:
                half = total // 2
                # Seeds differ per path and repeat, so no run meets another's prompts in the prefix cache.
                gateway = sweep_for(
                    "gateway", state.endpoint.removesuffix("/v1"), graph, seed=10 + repeat, time_scale=SLOW
                )
                direct = sweep_for("direct", _frontend_url(run_dir), graph, seed=20 + repeat, time_scale=SLOW)
                requests = max(32, 2 * half)
                with ThreadPoolExecutor(2) as both:
                    runs = [both.submit(measure, s, half, folder / f"r{repeat}", requests) for s in (gateway, direct)]
                    g, d = (run.result() for run in runs)
                rows.append({"repeat": repeat, "total_concurrency": total, "gateway": g, "direct": d})
    return rows


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| streams (each path) | repeat | TTFT p50 direct | TTFT p50 gateway | added (target <= 2 ms) | TTFT p99 direct "
        "| TTFT p99 gateway | ITL p50 direct / gateway | output tok/s direct | output tok/s gateway "
        "| throughput cost (target <= 3%) | cores busy |",
        "|" + "---:|" * 12,
    ]
    for r in rows:
        d, g = r["direct"], r["gateway"]
        added, cost = g["ttft_p50_ms"] - d["ttft_p50_ms"], 1 - g["output_tok_s"] / d["output_tok_s"]
        busy = d["host_cpu_busy"] or 0
        lines.append(
            f"| {r['total_concurrency'] // 2} | {r['repeat'] + 1} | {d['ttft_p50_ms']:.1f} ms | {g['ttft_p50_ms']:.1f} ms "
            f"| {added:+.1f} ms {_mark(added <= TTFT_TARGET_MS)} | {d['ttft_p99_ms']:.1f} ms | {g['ttft_p99_ms']:.1f} ms "
            f"| {d['itl_p50_ms']:.2f} / {g['itl_p50_ms']:.2f} ms | {d['output_tok_s']:.0f} | {g['output_tok_s']:.0f} "
            f"| {cost:+.1%} {_mark(cost <= THROUGHPUT_TARGET)} | {busy:.0%}{' (machine-bound)' if busy >= 0.9 else ''} |"
        )
    return lines


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="control-plane-paired-"))
    print(f"aiperf exports and logs in {folder}", flush=True)
    rows = paired(folder)
    (HERE / "paired.json").write_text(json.dumps(rows, indent=2))
    text = [
        "# The gateway and the direct path, measured at the same time",
        "",
        "Command: `uv run python benchmarks/control_plane/paired.py`. Two aiperf runs start together against one "
        f"graphs/disagg.yaml served on the mocker {SLOW:g}x slower than modelled: one through the gateway, one to "
        "Dynamo's frontend direct, each with half the streams, ISL 1000 / OSL 200, 2 x streams requests (at least "
        f"32) after one warm-up request per stream, each with its own prompts. Repeated {REPEATS} times. TTFT and "
        "ITL: aiperf, percentiles over requests; output tok/s: each path's output tokens / its duration. Cores "
        "busy: the whole machine (both aiperf runs included) while measuring.",
        "",
        *table(rows),
        "",
    ]
    (HERE / "paired.md").write_text("\n".join(text))
    shutil.rmtree(folder, ignore_errors=True)
    print((HERE / "paired.md").read_text())


if __name__ == "__main__":
    main()
