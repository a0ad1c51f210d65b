"""The gateway's CPU per streamed token with tracing off, at a sample ratio of 0.01 and at 1.

Why: a traced graph must not make its gateway slower per token. Tracing off must cost nothing (no
tracer exists); a request sampled out, next to nothing (a sampling decision, a traceparent and one
wrapped call per request); a sampled one, its five spans written once it ends, never per token
(gateway/tracing.py).

How, end to end: run.py's graph, load and counters (one aggregated gpt-oss-20b mocker worker at
0.001x its modelled step time behind one Dynamo frontend and one gateway process; CONCURRENCY
streaming chat requests of exactly TOKENS output tokens), served once per setting and round:
`observability.tracing` off, embedded (Arize Phoenix on loopback) at sample_ratio 0.01, and at 1,
the same observability section otherwise (an embedded Prometheus). The tracing setting is the
graph's, so each needs a graph of its own; the shared host's speed drifts between them, so ROUNDS
rounds run the settings in alternating order, and each run records a fixed loop's CPU time beside
it. After a warm-up, RUNS runs per graph: the gateway serving process's CPU seconds over each run,
divided by the output tokens the streams' usage reports. Phoenix and Dynamo's exporters share the
two cores.

And in this process, apart from the host's drift: the gateway's tracing work for one request
(gateway/tracing.py: the sampling decision, the traceparent, the first-bytes mark, the latency
histograms and, sampled, its five spans handed to the batch processor), for a request sampled out
and a sampled one, averaged over PER_REQUEST_ITERATIONS; the export itself (encoding and gRPC, in the
batch processor's thread) is in the end-to-end figures only.

Writes results-tracing.json and results-tracing.md beside this file; about 12 minutes here:

    uv run python benchmarks/gateway_cpu/tracing.py
"""

from __future__ import annotations

import asyncio
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
ROUNDS = 2  # the settings in order, then in reverse
RUNS = 2  # measured runs per graph
API = "chat"
PER_REQUEST_ITERATIONS = 20_000


def write_graph(folder: Path, ratio: float | None) -> Path:
    """run.py's graph with an embedded Prometheus and, for a ratio, tracing into an embedded Phoenix."""
    graph = yaml.safe_load(gateway_cpu.write_graph(folder, processes=1).read_text())
    graph["observability"] = {"prometheus": "embedded"}
    if ratio is not None:
        graph["observability"]["tracing"] = {"mode": "embedded", "sample_ratio": ratio}
    path = folder / f"graph-{'off' if ratio is None else ratio}.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(graph)))
    return path


def measure_setting(name: str, ratio: float | None, folder: Path, round_: int) -> list[dict]:
    graph = write_graph(folder, ratio)
    print(f"round {round_ + 1}, {name}: serving {graph.name}", flush=True)
    run_dir = folder / f"run-{round_}-{name.replace(' ', '-')}"
    with served_graph(graph, run_dir, engine="mocker", time_scale=gateway_cpu.TIME_SCALE) as state:
        pids = {process: gateway_cpu.pid_of(state, process) for process in ("gateway", "frontend")}
        gateway_cpu.measure(API, state, pids, gateway_cpu.WARMUP_REQUESTS)
        rows = []
        for _ in range(RUNS):
            loop = gateway_cpu.loop_seconds()
            row = gateway_cpu.measure(API, state, pids, gateway_cpu.REQUESTS)
            rows.append({"setting": name, "sample_ratio": ratio, "round": round_, "loop_seconds": loop, **row})
    return rows


def per_request_us(ratio: float, folder: Path) -> float:
    """Microseconds of the gateway's tracing work for one request at `ratio`, in this process."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dynamo_oss.gateway.config import TracingConfig
    from dynamo_oss.gateway.latency_histograms import Exemplars
    from dynamo_oss.gateway.tracing import Tracing
    from dynamo_oss.gateway.usage import Usage

    class Answer:  # what the gateway's tracing reads of a transform: its first feed and its usage
        billed = Usage(input=100, cached=0, output=gateway_cpu.TOKENS, reasoning=0)

        def feed(self, body: bytes) -> bytes:
            return body

    exporter = InMemorySpanExporter()
    tracing = Tracing(TracingConfig(endpoint="http://127.0.0.1:1", sample_ratio=ratio), Exemplars(folder), exporter)
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"user-agent", b"bench")]

    async def requests() -> float:
        started = time.process_time()
        for index in range(PER_REQUEST_ITERATIONS):
            trace = tracing.begin(headers, "chat")
            trace.mark_admitted()
            trace.upstream_headers(headers)
            answer = Answer()
            trace.watch_first_bytes(answer)  # type: ignore[arg-type]
            answer.feed(b"x")
            tracing.end(trace, 200, "")
            if index % 1000 == 0:
                exporter.clear()
        return time.process_time() - started

    seconds = asyncio.run(requests())
    tracing.close()
    return 1e6 * seconds / PER_REQUEST_ITERATIONS


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
        f"output tokens per run after {gateway_cpu.WARMUP_REQUESTS} warm-up requests; {RUNS} runs per graph, a graph "
        f"per setting and round, {ROUNDS} rounds in alternating order. Each cell: median (min-max) over the runs; "
        "the last column is the fixed loop's CPU seconds before each run (higher: a slower host then).",
        "",
        "| tracing | gateway us/token | vs off | frontend us/token | output tok/s | loop s (host speed) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in SETTINGS:
        s = summary[name]
        gateway = s["gateway_us_per_token"]
        lines.append(
            f"| {name} | {gateway_cpu.cell(gateway)} | {gateway['median'] / off:.2f}x | "
            f"{gateway_cpu.cell(s['frontend_us_per_token'])} | {gateway_cpu.cell(s['tok_s'], 0)} | "
            f"{gateway_cpu.cell(s['loop_seconds'], 3)} |"
        )
    micro = summary["per_request_us"]
    lines += [
        "",
        f"The gateway's tracing work per request, in this process ({PER_REQUEST_ITERATIONS:,} requests each; "
        "the export's encoding and gRPC not included):",
        "",
        f"| tracing | us per request | us per token at {gateway_cpu.TOKENS} tokens |",
        "|---|---:|---:|",
        "| off | 0 (no tracer exists; the shell's hooks see None) | 0 |",
        *(
            f"| {name} | {micro[name]:.1f} | {micro[name] / gateway_cpu.TOKENS:.3f} |"
            for name in ("sampled out", "sampled")
        ),
    ]
    lines += [
        "",
        "Per token: the gateway serving process's CPU seconds (user + system) over the run, divided by the output "
        "tokens the streams' usage reports (the last chunk's `usage.completion_tokens`). The frontend column is "
        "Dynamo's frontend, which exports its own spans at the same ratio. Output tok/s is the whole graph's, "
        "load generator included, on two cores: traced, Phoenix ingests every span of every process beside it "
        "(about 30 per request at ratio 1), so the graph serves fewer tokens a second while the gateway's CPU per "
        "token stays within the runs' spread. Failed requests: "
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
        order = list(SETTINGS.items())
        rows = [
            row
            for round_ in range(ROUNDS)
            for name, ratio in (order if round_ % 2 == 0 else order[::-1])
            for row in measure_setting(name, ratio, Path(scratch), round_)
        ]
        micro = {
            "sampled out": per_request_us(0.0, Path(scratch) / "micro-out"),
            "sampled": per_request_us(1.0, Path(scratch) / "micro-in"),
        }
    summary: dict = {
        name: {
            field: gateway_cpu.spread([r[field] for r in rows if r["setting"] == name])
            for field in ("gateway_us_per_token", "frontend_us_per_token", "tok_s", "cores_busy", "loop_seconds")
        }
        for name in SETTINGS
    }
    summary["per_request_us"] = {name: round(us, 2) for name, us in micro.items()}
    summary["failed_requests"] = sum(r["failed"] for r in rows)
    settings["loop_seconds_after"] = gateway_cpu.loop_seconds()
    settings["total_s"] = round(time.monotonic() - started)
    gateway_cpu.write_report("results-tracing", settings, summary, rows, markdown(summary, settings))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; the graph is stopped")
