"""The gateway's CPU per streamed token with tracing off, at a sample ratio of 0.01 and at 1.

Why: a traced graph must not make its gateway slower per token. Tracing off must cost nothing (no
tracer exists); a request sampled out, next to nothing (a sampling decision, a traceparent and one
wrapped call per request); a sampled one, its five spans written once it ends, never per token
(gateway/tracing.py).

How: run.py's graph, load and counters (one aggregated gpt-oss-20b mocker worker at 0.001x its
modelled step time behind one Dynamo frontend and one gateway process; CONCURRENCY streaming chat
requests of exactly TOKENS output tokens), served three times: `observability.tracing` off, then
embedded (Arize Phoenix on loopback) at sample_ratio 0.01, then at 1. Each graph has the same
observability section otherwise (an embedded Prometheus). After a warm-up, REPEATS runs per graph;
the gateway's serving process's CPU seconds over each run, divided by the output tokens the streams'
usage reports. Phoenix and Dynamo's own exporters run on the same two cores, so cores busy is
reported with each. Writes results-tracing.json and results-tracing.md beside this file; about 8
minutes here:

    uv run python benchmarks/gateway_cpu/tracing.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as gateway_cpu  # noqa: E402 - run.py beside this file: its graph, load and counters

from dynamo_oss.bench.ports import on_free_ports  # noqa: E402
from dynamo_oss.bench.served import served_graph  # noqa: E402

HERE = gateway_cpu.HERE
COMMAND = "uv run python benchmarks/gateway_cpu/tracing.py"
SETTINGS = {"off": None, "ratio 0.01": 0.01, "ratio 1": 1.0}
REPEATS = 3
API = "chat"


def write_graph(folder: Path, ratio: float | None) -> Path:
    """run.py's graph with an embedded Prometheus and, for a ratio, tracing into an embedded Phoenix."""
    graph = yaml.safe_load(gateway_cpu.write_graph(folder, processes=1).read_text())
    graph["observability"] = {"prometheus": "embedded"}
    if ratio is not None:
        graph["observability"]["tracing"] = {"mode": "embedded", "sample_ratio": ratio}
    path = folder / f"graph-{'off' if ratio is None else ratio}.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(graph)))
    return path


def measure_setting(name: str, ratio: float | None, folder: Path) -> list[dict]:
    graph = write_graph(folder, ratio)
    print(f"{name}: serving {graph.name}", flush=True)
    run_dir = folder / f"run-{name.replace(' ', '-')}"
    with served_graph(graph, run_dir, engine="mocker", time_scale=gateway_cpu.TIME_SCALE) as state:
        pids = {process: gateway_cpu.pid_of(state, process) for process in ("gateway", "frontend")}
        gateway_cpu.measure(API, state, pids, gateway_cpu.WARMUP_REQUESTS)
        rows = []
        for _ in range(REPEATS):
            row = gateway_cpu.measure(API, state, pids, gateway_cpu.REQUESTS)
            rows.append({"setting": name, "sample_ratio": ratio, **row})
    return rows


def markdown(summary: dict, settings: dict) -> str:
    off = summary["off"]["gateway_us_per_token"]["median"]
    lines = [
        f"Command: `{settings['command']}`",
        "",
        "# Gateway CPU per streamed token: tracing off, sampled at 0.01 and at 1",
        "",
        f"{settings['host_cpu']} ({settings['cores']} cores), Python {settings['python']}, {settings['date']}, code "
        f"{settings['code']}. gpt-oss-20b, one aggregated mocker worker (H200 model) at {gateway_cpu.TIME_SCALE:g}x "
        "its modelled step time, one Dynamo frontend behind one gateway process, an embedded Prometheus; traced, "
        "every process exports to an embedded Arize Phoenix. A plain aiohttp client at concurrency "
        f"{gateway_cpu.CONCURRENCY}, streaming chat, {gateway_cpu.REQUESTS} requests of exactly {gateway_cpu.TOKENS} "
        f"output tokens per run after {gateway_cpu.WARMUP_REQUESTS} warm-up requests; {REPEATS} runs per graph, one "
        "graph per setting. Each cell: median (min-max) over the runs.",
        "",
        "| tracing | gateway us/token | vs off | frontend us/token | output tok/s | cores busy |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in SETTINGS:
        s = summary[name]
        gateway = s["gateway_us_per_token"]
        lines.append(
            f"| {name} | {gateway_cpu.cell(gateway)} | {gateway['median'] / off:.2f}x | "
            f"{gateway_cpu.cell(s['frontend_us_per_token'])} | {gateway_cpu.cell(s['tok_s'], 0)} | "
            f"{gateway_cpu.cell(s['cores_busy'], percent=True)} |"
        )
    lines += [
        "",
        "Per token: the gateway serving process's CPU seconds (user + system) over the run, divided by the output "
        "tokens the streams' usage reports (the last chunk's `usage.completion_tokens`). The frontend column is "
        "Dynamo's frontend, which exports its own spans at the same ratio. Failed requests: "
        f"{summary['failed_requests']}. A fixed Python loop took {settings['loop_seconds_before']} s of CPU before "
        f"and {settings['loop_seconds_after']} s after (the host is shared and its speed drifts).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    started = time.monotonic()
    settings = {
        "command": COMMAND,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": gateway_cpu.host_cpu(),
        "cores": gateway_cpu.CORES,
        "python": gateway_cpu.platform.python_version(),
        "code": gateway_cpu.code_version(),
        "loop_seconds_before": gateway_cpu.loop_seconds(),
    }
    with tempfile.TemporaryDirectory(prefix="gateway-cpu-tracing-") as scratch:
        rows = [row for name, ratio in SETTINGS.items() for row in measure_setting(name, ratio, Path(scratch))]
    summary: dict = {
        name: {
            field: gateway_cpu.spread([r[field] for r in rows if r["setting"] == name])
            for field in ("gateway_us_per_token", "frontend_us_per_token", "tok_s", "cores_busy")
        }
        for name in SETTINGS
    }
    summary["failed_requests"] = sum(r["failed"] for r in rows)
    settings["loop_seconds_after"] = gateway_cpu.loop_seconds()
    settings["total_s"] = round(time.monotonic() - started)
    (HERE / "results-tracing.json").write_text(
        json.dumps({"settings": settings, "summary": summary, "runs": rows}, indent=2)
    )
    report = markdown(summary, settings)
    (HERE / "results-tracing.md").write_text(report)
    print(report)
    if summary["failed_requests"]:
        sys.exit(f"{summary['failed_requests']} requests failed")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; the graph is stopped")
