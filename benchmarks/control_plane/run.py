"""The control plane's cost on this machine, measured with aiperf through `dynamo bench`'s runner.

1. The request gateway against Dynamo's frontend direct, on graphs/disagg.yaml, concurrency 1 to
   512, each concurrency through both paths back to back (the order alternating):
   a. with the mocker SLOW times slower than the modelled B200s, so this machine keeps up and what
      is measured is the hop itself;
   b. at the modelled speed, where from concurrency 64 on the machine's two cores are the limit.
   The gateway's CPU time per streamed token is read from /proc for each run, and TTFT at
   concurrency 1 is measured a second way, by a plain aiohttp client alternating the two paths
   request by request (aiperf's sockets meet a delay of their own at Dynamo's frontend: see
   results.md).
2. The disaggregated path against the aggregated graph (graphs/agg.yaml) at the modelled speed,
   each against Dynamo's offline replay of the same layout, so the software's share of TTFT shows
   apart from the modelled GPU time.
3. The highest request and token rates one frontend sustains here: the mocker 1000x faster than
   modelled, so only software sets the pace.

ISL 1000 / OSL 200 (the workload of the first live run, issue 12), streaming, exact lengths.
Writes results.json, results.md and plot.png beside this file; about 30 minutes on the 2-core
CI machine:

    uv run python benchmarks/control_plane/run.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import matplotlib

from dynamo_oss.bench.results import Sweep, SweepParameters
from dynamo_oss.bench.served import served_graph, sweep_fields
from dynamo_oss.bench.sweep import run_once
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.launch.state import RunState
from dynamo_oss.perf.graphs import layout_from_file
from dynamo_oss.perf.layout import Workload
from dynamo_oss.perf.replay import simulate

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the file-only backend

HERE = Path(__file__).parent
GRAPHS = HERE.parent.parent / "graphs"
ISL, OSL = 1000, 200
TEMPLATE_TOKENS = 67  # what the harmony chat template adds to aiperf's prompt (usage.prompt_tokens - ISL)
CONCURRENCIES = (1, 4, 16, 64, 256, 512)
SLOW = 4.0  # mocker time scale at which this machine keeps up at every concurrency
FAST = 0.001  # mocker time scale for one frontend's ceiling
CAPACITY_CONCURRENCY = 256
CEILING_SHORT_OSL = 8  # the fewest tokens whose harmony answer carries text (aiperf fails a run without any)
PLAIN_CLIENT_PAIRS = 40
TTFT_TARGET_MS, THROUGHPUT_TARGET = 2.0, 0.03  # the targets for the gateway


def requests_at(concurrency: int) -> int:
    return max(32, 2 * concurrency)


def sweep_for(
    label: str, endpoint: str, graph: Path, seed: int, isl: int = ISL, osl: int = OSL, time_scale: float = 1.0
) -> Sweep:
    """A sweep's settings; every sweep gets its own `seed`, so no sweep meets another's prompts in the prefix cache."""
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    parameters = SweepParameters(
        isl=isl,
        osl=osl,
        concurrencies=list(CONCURRENCIES),
        time_scale=time_scale,
        seed=seed,
        **sweep_fields(deployment),
    )
    return Sweep(label=label, target=str(graph), endpoint=endpoint, parameters=parameters)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(sweep: Sweep, concurrency: int, folder: Path, requests: int, gateway_pid: int | None = None) -> dict:
    """One aiperf run; with `gateway_pid`, the gateway's CPU time over it as well."""
    sweep.parameters.requests = requests
    before = cpu_seconds(gateway_pid) if gateway_pid else 0.0
    run = run_once(sweep, concurrency, folder / sweep.label)
    gateway_cpu = cpu_seconds(gateway_pid) - before if gateway_pid else None
    export = json.loads((folder / sweep.label / run.artifacts / "profile_export_aiperf.json").read_text())
    p = run.point
    row = {
        "label": sweep.label,
        "time_scale": sweep.parameters.time_scale,
        "concurrency": concurrency,
        "requests": p.requests,
        "failed": run.failed,
        "ttft_p50_ms": p.ttft_p50_ms,
        "ttft_p99_ms": p.ttft_p99_ms,
        "itl_p50_ms": p.itl_p50_ms,
        "output_tok_s": p.output_tok_s,
        "request_rate": run.request_rate,
        "host_cpu_busy": run.host_cpu_busy,
        "response_headers_p50_ms": export["http_req_waiting"]["p50"],
        "gateway_cpu_ms_per_1k_tokens": None,
    }
    if gateway_cpu is not None:  # over warm-up and measured requests alike
        tokens = (requests + sweep.parameters.warmup_at(concurrency)) * sweep.parameters.osl
        row["gateway_cpu_ms_per_1k_tokens"] = 1e6 * gateway_cpu / tokens
    print(
        f"  {sweep.label:<22} c={concurrency:<4} TTFT p50 {p.ttft_p50_ms:8.1f} ms  p99 {p.ttft_p99_ms:8.1f} ms  "
        f"{p.output_tok_s:7.0f} tok/s  {run.request_rate:6.1f} req/s  cores {run.host_cpu_busy or 0:.0%}",
        flush=True,
    )
    return row


def _frontend_url(run_dir: Path) -> str:
    frontend = next(p for p in RunState.read(run_dir).processes if p.name == "frontend")
    return f"http://127.0.0.1:{frontend.ports[0]}"


def _gateway_pid(run_dir: Path) -> int:
    pid = next(p.pid for p in RunState.read(run_dir).processes if p.name == "gateway")
    assert pid is not None
    return pid


def gateway_against_direct(folder: Path, time_scale: float) -> tuple[list[dict], dict | None]:
    graph, run_dir = GRAPHS / "disagg.yaml", folder / f"serve-disagg-{time_scale:g}"
    rows = []
    with served_graph(graph, run_dir, engine="mocker", time_scale=time_scale) as state:
        gateway_url, direct_url = state.endpoint.removesuffix("/v1"), _frontend_url(run_dir)
        plain = asyncio.run(plain_client_ttft(gateway_url, direct_url, state.served_name)) if time_scale == 1 else None
        gateway = sweep_for(f"gateway-x{time_scale:g}", gateway_url, graph, seed=1, time_scale=time_scale)
        direct = sweep_for(f"direct-x{time_scale:g}", direct_url, graph, seed=2, time_scale=time_scale)
        for index, concurrency in enumerate(CONCURRENCIES):
            for sweep in (gateway, direct) if index % 2 == 0 else (direct, gateway):  # drift hits both
                pid = _gateway_pid(run_dir) if sweep is gateway else None
                rows.append(measure(sweep, concurrency, folder, requests_at(concurrency), gateway_pid=pid))
    return rows, plain


async def plain_client_ttft(gateway_url: str, direct_url: str, model: str) -> dict:
    """TTFT p50 (first streamed content) of one request at a time, alternating the two paths, from a
    plain aiohttp client with the operating system's default sockets."""
    times: dict[str, list[float]] = {"gateway": [], "direct": []}
    async with aiohttp.ClientSession() as session:
        for index in range(PLAIN_CLIENT_PAIRS):
            for path, url in (("gateway", gateway_url), ("direct", direct_url)):
                body = {
                    "model": model,
                    "stream": True,
                    "max_tokens": OSL,
                    "ignore_eos": True,
                    "messages": [{"role": "user", "content": f"{index} {path} " + "word " * ISL}],
                }
                start = time.perf_counter()
                async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                    async for chunk in response.content.iter_any():
                        if b'"reasoning_content":"' in chunk or b'"content":"' in chunk:
                            times[path].append(1e3 * (time.perf_counter() - start))
                            break
    return {path: statistics.median(values) for path, values in times.items()}


def aggregated(folder: Path) -> list[dict]:
    graph = GRAPHS / "agg.yaml"
    with served_graph(graph, folder / "serve-agg", engine="mocker", time_scale=1.0) as state:
        agg = sweep_for("agg-gateway-x1", state.endpoint.removesuffix("/v1"), graph, seed=3)
        return [measure(agg, c, folder, requests_at(c)) for c in CONCURRENCIES]


def replayed_ttft(graph: str) -> dict[int, float]:
    """TTFT p50 of the offline replay of the same layout and prompt (ISL plus the template's tokens)."""
    points = simulate(layout_from_file(GRAPHS / graph), Workload(isl=ISL + TEMPLATE_TOKENS, osl=OSL), CONCURRENCIES)
    return {p.concurrency: p.ttft_p50_ms for p in points}


def capacity(folder: Path) -> list[dict]:
    """One frontend's ceiling: short prompts, the mocker 1000x faster than modelled."""
    graph, run_dir = GRAPHS / "disagg.yaml", folder / "serve-fast"
    rows = []
    with served_graph(graph, run_dir, engine="mocker", time_scale=FAST) as state:
        paths = (("direct", _frontend_url(run_dir), 4), ("gateway", state.endpoint.removesuffix("/v1"), 5))
        for path, endpoint, seed in paths:
            for what, osl in (("requests", CEILING_SHORT_OSL), ("tokens", 500)):
                sweep = sweep_for(f"ceiling-{path}-{what}", endpoint, graph, seed, isl=100, osl=osl, time_scale=FAST)
                rows.append(measure(sweep, CAPACITY_CONCURRENCY, folder, 2 * CAPACITY_CONCURRENCY))
    return rows


def _mark(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _busy(row: dict) -> str:
    busy = row["host_cpu_busy"]
    return "-" if busy is None else f"{busy:.0%}" + (" (machine-bound)" if busy >= 0.9 else "")


def gateway_table(rows: list[dict], time_scale: float) -> list[str]:
    by = {(r["label"].split("-")[0], r["concurrency"]): r for r in rows}
    lines = [
        "| concurrency | TTFT p50 direct | TTFT p50 gateway | added (target <= 2 ms) | TTFT p99 direct | TTFT p99 gateway "
        "| output tok/s direct | output tok/s gateway | throughput cost (target <= 3%) | gateway CPU per 1k tokens "
        "| cores busy direct / gateway |",
        "|" + "---:|" * 11,
    ]
    for c in CONCURRENCIES:
        d, g = by[("direct", c)], by[("gateway", c)]
        added = g["ttft_p50_ms"] - d["ttft_p50_ms"]
        cost = 1 - g["output_tok_s"] / d["output_tok_s"]
        lines.append(
            f"| {c} | {d['ttft_p50_ms']:.1f} ms | {g['ttft_p50_ms']:.1f} ms | {added:+.1f} ms {_mark(added <= TTFT_TARGET_MS)} "
            f"| {d['ttft_p99_ms']:.1f} ms | {g['ttft_p99_ms']:.1f} ms | {d['output_tok_s']:.0f} | {g['output_tok_s']:.0f} "
            f"| {cost:+.1%} {_mark(cost <= THROUGHPUT_TARGET)} | {g['gateway_cpu_ms_per_1k_tokens']:.1f} ms "
            f"| {_busy(d)} / {_busy(g)} |"
        )
    return lines


def path_table(disagg: list[dict], agg: list[dict], replay: dict[str, dict[int, float]]) -> list[str]:
    lines = [
        "| concurrency | disagg TTFT p50 live | replay | software | agg TTFT p50 live | replay | software "
        "| output tok/s disagg / agg | cores busy disagg / agg |",
        "|" + "---:|" * 9,
    ]
    for d, a in zip(disagg, agg, strict=True):
        c = d["concurrency"]
        ds, as_ = replay["disagg"][c], replay["agg"][c]
        lines.append(
            f"| {c} | {d['ttft_p50_ms']:.1f} ms | {ds:.1f} ms | {d['ttft_p50_ms'] - ds:+.1f} ms | {a['ttft_p50_ms']:.1f} ms "
            f"| {as_:.1f} ms | {a['ttft_p50_ms'] - as_:+.1f} ms | {d['output_tok_s']:.0f} / {a['output_tok_s']:.0f} "
            f"| {_busy(d)} / {_busy(a)} |"
        )
    return lines


def capacity_table(rows: list[dict]) -> list[str]:
    lines = ["| path | workload | requests/s | output tok/s | TTFT p50 | cores busy |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        _, path, what = r["label"].split("-")
        workload = f"ISL 100 / OSL {CEILING_SHORT_OSL if what == 'requests' else 500}"
        lines.append(
            f"| {path} | {workload} | {r['request_rate']:.1f} | {r['output_tok_s']:.0f} | "
            f"{r['ttft_p50_ms']:.1f} ms | {_busy(r)} |"
        )
    return lines


def plot(rows: list[dict], path: Path) -> None:
    fig, (ttft, rate) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label in sorted({r["label"] for r in rows if not r["label"].startswith("ceiling")}):
        mine = [r for r in rows if r["label"] == label]
        cs = [r["concurrency"] for r in mine]
        line = ttft.plot(cs, [r["ttft_p50_ms"] for r in mine], "o-", label=f"{label} p50")
        ttft.plot(cs, [r["ttft_p99_ms"] for r in mine], "x--", color=line[0].get_color())
        rate.plot(cs, [r["output_tok_s"] for r in mine], "o-", label=label)
    ttft.set(
        xscale="log",
        yscale="log",
        xlabel="concurrency",
        ylabel="TTFT ms (aiperf; p50 solid, p99 dashed)",
        title="time to first token",
    )
    rate.set(xscale="log", xlabel="concurrency", ylabel="output tok/s, whole endpoint (aiperf)", title="throughput")
    for axes in (ttft, rate):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    fig.suptitle(
        f"Control plane on the 2-core CI machine: ISL {ISL} / OSL {OSL}; xN = mocker N times slower than modelled"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="control-plane-"))
    print(f"aiperf exports and logs in {folder}", flush=True)
    print(f"1a. gateway against direct, mocker {SLOW:g}x slower than modelled", flush=True)
    slow, _ = gateway_against_direct(folder, SLOW)
    print("1b. gateway against direct, modelled speed", flush=True)
    modelled, plain = gateway_against_direct(folder, 1.0)
    print("2. aggregated graph, modelled speed", flush=True)
    agg = aggregated(folder)
    print("3. one frontend's ceiling", flush=True)
    ceiling = capacity(folder)
    replay = {"disagg": replayed_ttft("disagg.yaml"), "agg": replayed_ttft("agg.yaml")}
    rows = slow + modelled + agg + ceiling
    (HERE / "results.json").write_text(
        json.dumps(
            {"isl": ISL, "osl": OSL, "rows": rows, "plain_client_ttft_p50_ms": plain, "replay_ttft_p50_ms": replay},
            indent=2,
        )
    )
    headers = {r["label"].split("-")[0]: r["response_headers_p50_ms"] for r in modelled if r["concurrency"] == 1}
    disagg = [r for r in modelled if r["label"].startswith("gateway")]
    assert plain is not None
    sections = [
        "# The control plane's cost on this machine",
        "",
        "Command: `uv run python benchmarks/control_plane/run.py` on the 2-core CI machine. aiperf 0.13 through "
        f"`dynamo bench`'s runner: ISL {ISL} / OSL {OSL} (the chat template adds {TEMPLATE_TOKENS} prompt tokens), "
        "streaming chat, exact lengths, 2 x concurrency requests per run (at least 32) after one warm-up request "
        "per stream. TTFT: aiperf time_to_first_token, percentiles over requests. Output tok/s: output tokens / "
        "benchmark duration, whole endpoint. Cores busy: share of the machine's 2 cores in use while measuring, "
        "aiperf included; at 90% or more the machine, not the deployment, sets the pace. Gateway CPU: its "
        "process's CPU time over the run (warm-up included) per 1,000 streamed tokens.",
        "",
        f"## The gateway against Dynamo's frontend direct, mocker {SLOW:g}x slower than modelled (this machine keeps up)",
        "",
        *gateway_table(slow, SLOW),
        "",
        "## The same at the modelled B200 speed (graphs/disagg.yaml as shipped)",
        "",
        *gateway_table(modelled, 1.0),
        "",
        f"TTFT p50 at concurrency 1 from a plain aiohttp client (default sockets), {PLAIN_CLIENT_PAIRS} requests "
        f"alternating the paths: gateway {plain['gateway']:.1f} ms, direct {plain['direct']:.1f} ms, added "
        f"{plain['gateway'] - plain['direct']:+.1f} ms. aiperf's own sockets wait longer for the frontend's response "
        f"headers when they talk to it directly (aiperf http_req_waiting p50 at concurrency 1: direct "
        f"{headers['direct']:.1f} ms, through the gateway {headers['gateway']:.1f} ms), so aiperf's direct TTFT at "
        "low concurrency is the higher one.",
        "",
        "## The disaggregated path against the aggregated graph (modelled speed), each against its offline replay",
        "",
        "Replay: Dynamo's offline replay of the same layout and prompt at the calibrated model's speed, with no "
        "software in the loop. Software = live minus replay: the gateway, the frontend's preprocessing and routing, "
        "the request plane and, for disagg, the prefill-to-decode hop.",
        "",
        *path_table(disagg, agg, replay),
        "",
        f"## One frontend's ceiling (mocker {1 / FAST:.0f}x faster than modelled, concurrency {CAPACITY_CONCURRENCY})",
        "",
        *capacity_table(ceiling),
        "",
    ]
    (HERE / "results.md").write_text("\n".join(sections))
    plot(rows, HERE / "plot.png")
    shutil.rmtree(folder, ignore_errors=True)
    print((HERE / "results.md").read_text())


if __name__ == "__main__":
    main()
