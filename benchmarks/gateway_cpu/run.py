"""CPU per streamed token of the request gateway and of Dynamo's frontend, for Chat Completions and
for the gateway's own Responses API, under the same streaming load.

Why: the gateway owns POST /v1/responses and /v1/chat/completions (it renders each request into
harmony, streams a plain /v1/completions from Dynamo's frontend and turns each chunk's token ids into
the API's events). The requirements (issue 40, item 5): the Responses path may cost the gateway at
most 1.5x the chat path's CPU per token, and chat no more than on the day the issue was filed, when
the gateway passed chat through to Dynamo's own chat endpoint. That gateway (BASELINE, d78d3b2's
code from this repository's history, run with today's packages) serves beside today's in front of
the same frontend, so the two are compared in one run on one host: this host's speed drifts within
the hour, and only ratios within a run mean much.

How: a one-worker aggregated gpt-oss-20b mocker graph on free ports, its steps TIME_SCALE of the
modelled H200's (`--mocker-time-scale`, as the control plane's ceiling runs; a graph file cannot
pick the mocker's timing model), so the software, not the simulated engine, sets the pace. A plain
aiohttp client keeps CONCURRENCY streams of exactly TOKENS output tokens busy for REQUESTS requests
per run. The user+system CPU time of the gateway that serves a run and of the frontend is read
before and after it and divided by the output tokens the streams' usage reports; the client counts
its socket's reads, to show how bunched each stream reached it. Beside the graph's gateway run
BASELINE's and one of today's with `gateway.streaming.coalesce_ms` at COALESCE_MS (chat-coalesced). A
last API is a control: /v1/completions, the stream the Responses path reads from the frontend, which
the gateway passes through untransformed. After a warm-up of each API, REPEATS rounds run each API in
turn, since this 2-core machine is noisy; medians and ranges are reported. Writes results.json and
results.md beside this file (or STEM.* with --stem); about 8 minutes here:

    uv run python benchmarks/gateway_cpu/run.py
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import psutil
import yaml

from dynamo_oss.bench.ports import free_block, on_free_ports
from dynamo_oss.bench.served import served_graph
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.graph.schema import GatewayStreamingSection
from dynamo_oss.launch.state import RunState

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/gateway_cpu/run.py"
CONCURRENCY = 16
TOKENS = 256
REQUESTS = 320  # per measured run: 81,920 tokens
WARMUP_REQUESTS = 48  # per API, before the first measured run
REPEATS = 7
TIME_SCALE = 0.001  # mocker 1000x faster than the modelled H200
RUN_TIMEOUT_S = 120.0  # a run stops starting requests after this; unfinished ones count as failed
REQUEST_TIMEOUT_S = 60.0
TARGET_RATIO = 1.5
BASELINE = "d78d3b2"  # the gateway of the day issue 40 was filed: chat passed through to Dynamo's chat endpoint
BESIDE_READY_S = 120.0
PASSTHROUGH = "chat-passthrough"  # chat through BASELINE's gateway
COALESCED = "chat-coalesced"  # chat through today's gateway with gateway.streaming.coalesce_ms at COALESCE_MS
COALESCE_MS = 15.0  # about how long the tokens the pass-through's clients got in one read had waited here
# The first through BASELINE's gateway; the last a control: the Responses upstream, passed through.
APIS = (PASSTHROUGH, "chat", COALESCED, "responses", "completions")
CORES = psutil.cpu_count()


@dataclass
class Api:
    """One API's streaming request and how its last events report the output tokens."""

    path: str
    body: Callable[[str, str], dict]
    tokens: Callable[[list[dict]], int | None]


def chat_body(model: str, prompt: str) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "min_tokens": TOKENS,
    }


def responses_body(model: str, prompt: str) -> dict:
    return {
        "model": model,
        "input": prompt,
        "stream": True,
        "max_output_tokens": TOKENS,
        "ignore_eos": True,
        "min_tokens": TOKENS,
    }


def completions_body(model: str, prompt: str) -> dict:
    return {
        "model": model,
        "prompt": prompt,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "min_tokens": TOKENS,
    }


def usage_tokens(events: list[dict]) -> int | None:
    """Chat and completions: the usage of the last chunk."""
    usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    return usage["completion_tokens"] if usage else None


def responses_tokens(events: list[dict]) -> int | None:
    """From the final event: response.completed, or response.incomplete when max_output_tokens cut it."""
    final = next((e for e in events if e.get("type") in ("response.completed", "response.incomplete")), None)
    return final["response"]["usage"]["output_tokens"] if final and final["response"].get("usage") else None


CHAT = Api("/v1/chat/completions", chat_body, usage_tokens)
API = {
    PASSTHROUGH: CHAT,
    COALESCED: CHAT,
    "chat": CHAT,
    "responses": Api("/v1/responses", responses_body, responses_tokens),
    "completions": Api("/v1/completions", completions_body, usage_tokens),
}
FINAL_MARKERS = (b'"usage":{', b'"type":"response.completed"', b'"type":"response.incomplete"')


# ---- the graph ----------------------------------------------------------------------------------


def write_graph(folder: Path, processes: int) -> Path:
    """One aggregated gpt-oss-20b mocker worker behind one Dynamo frontend and `processes` gateway
    processes, on free ports."""
    graph = {
        "name": "gateway-cpu",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": 1},
        "frontend": {"replicas": 1},
        "gateway": {"processes": processes},
        "pools": {"agg": {"workers": 1, "engine": "mocker"}},
    }
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(graph)))
    return path


@dataclass
class Beside:
    """A gateway run beside the graph's, in front of its frontend: where clients reach it, and its first
    process."""

    url: str
    pid: int


@contextmanager
def baseline_gateway(folder: Path, frontend_port: int) -> Iterator[Beside]:
    """BASELINE's gateway, which passed chat through to Dynamo's chat endpoint, in front of the graph's
    frontend on a free port: its code from this repository's history, run with today's packages."""
    archive = subprocess.run(["git", "archive", BASELINE, "dynamo_oss"], cwd=HERE.parents[1], capture_output=True)
    if archive.returncode:
        sys.exit(f"the baseline gateway's code ({BASELINE}) is not in this checkout's history: {archive.stderr!r}")
    source = folder / f"gateway-{BASELINE}"
    tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(source, filter="data")
    port = free_block(1)
    argv = ["--port", str(port), "--model", "gpt-oss-20b", "--upstream", f"http://127.0.0.1:{frontend_port}"]
    with gateway_beside(argv, source, port, folder / f"gateway-{BASELINE}.log") as beside:
        yield beside


@contextmanager
def coalescing_gateway(folder: Path, run_dir: Path) -> Iterator[Beside]:
    """Today's gateway as the graph's, but with `gateway.streaming.coalesce_ms` at COALESCE_MS, on a free port
    in front of the same frontend: one process, and nothing kept on the graph's NATS (chat needs none of it)."""
    port = free_block(1)
    config = GatewayConfig.read(run_dir / "gateway.json").model_copy(
        update={
            "port": port,
            "processes": 1,
            "state_dir": folder / "coalescing",
            "streaming": GatewayStreamingSection(coalesce_ms=COALESCE_MS),
            **dict.fromkeys(("metrics_port", "nats", "responses", "batches", "cluster_share", "tracing")),
        }
    )
    path = folder / "gateway-coalescing.json"
    path.write_text(config.model_dump_json())
    with gateway_beside(["--config", str(path)], HERE.parents[1], port, folder / "gateway-coalescing.log") as beside:
        yield beside


@contextmanager
def gateway_beside(arguments: list[str], source: Path, port: int, log_path: Path) -> Iterator[Beside]:
    """`python -m dynamo_oss.gateway ARGUMENTS` with `source` first on the path; yielded once it listens on
    `port`, stopped afterwards."""
    argv = [sys.executable, "-m", "dynamo_oss.gateway", *arguments]
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, cwd=source, env={**os.environ, "PYTHONPATH": str(source)}, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + BESIDE_READY_S
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"a gateway beside the graph's did not start; see {log_path}")
            time.sleep(0.2)  # polling its port against the deadline above
        yield Beside(f"http://127.0.0.1:{port}", process.pid)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def served_beside(
    processes: int, time_scale: float
) -> Iterator[tuple[RunState, dict[str, int], dict[str, Beside], Path]]:
    """The measured graph (write_graph's, on the mocker at `time_scale`) in a scratch folder, with BASELINE's
    gateway and the coalescing one beside it: the run's state, the pids of its gateway and frontend, the
    gateways beside it by the API each serves, and the folder; all stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="gateway-cpu-") as scratch:
        folder = Path(scratch)
        print(f"serving a mocker graph (logs in {folder})", flush=True)
        graph = write_graph(folder, processes)
        with served_graph(graph, folder / "run", engine="mocker", time_scale=time_scale) as state:
            pids = {name: pid_of(state, name) for name in ("gateway", "frontend")}
            frontend_port = next(p for p in state.processes if p.name == "frontend").ports[0]
            with (
                baseline_gateway(folder, frontend_port) as baseline,
                coalescing_gateway(folder, folder / "run") as coalescing,
            ):
                yield state, pids, {PASSTHROUGH: baseline, COALESCED: coalescing}, folder


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Counters:
    """CPU seconds so far: of the frontend, of each gateway serving process (the endpoint's first
    process, which serves no client, is left out) and of each gateway run beside the graph's, of the
    graph's processes, those beside it and this client together, and of the whole machine; and the read
    syscalls (socket reads, mostly) of today's gateway ("gateway") and of each beside it."""

    cpu: dict[str, float]
    ours: float
    machine: float
    reads: dict[str, int]

    @classmethod
    def read(cls, supervisor_pid: int, pids: dict[str, int], beside: dict[str, int]) -> Counters:
        """`pids` names the gateway's first process and the frontend; `beside`, the gateways run beside the
        graph's, by the API each serves."""
        graph = psutil.Process(supervisor_pid)
        sides = {api: serving(psutil.Process(top)) for api, top in beside.items()}
        watched = [psutil.Process(), graph, *graph.children(recursive=True)]
        watched += [process for top in beside.values() for process in family(psutil.Process(top))]
        ours = sum(cpu_seconds(process, gone=0.0) for process in watched)
        machine = psutil.cpu_times()
        today = sorted(psutil.Process(pids["gateway"]).children(), key=pid)
        cpu = {"frontend": cpu_seconds(psutil.Process(pids["frontend"]))}
        cpu |= {api: sum(cpu_seconds(process) for process in processes) for api, processes in sides.items()}
        cpu |= {f"gateway-{index}": cpu_seconds(process) for index, process in enumerate(today)}
        reads = {api: read_calls(processes) for api, processes in sides.items()} | {"gateway": read_calls(today)}
        return cls(
            cpu=cpu,
            ours=ours,
            machine=machine.user + machine.nice + machine.system + machine.irq + machine.softirq,
            reads=reads,
        )


def serving(top: psutil.Process) -> list[psutil.Process]:
    """A gateway's serving processes: its first process's children, or itself for one of a single process."""
    return top.children() or [top]


def family(top: psutil.Process) -> list[psutil.Process]:
    return [top, *top.children()]


def read_calls(processes: list[psutil.Process]) -> int:
    return sum(process.io_counters().read_count for process in processes)


def pid(process: psutil.Process) -> int:
    return process.pid


def cpu_seconds(process: psutil.Process, gone: float | None = None) -> float:
    """User plus system CPU time; `gone` for a process that has exited meanwhile (None: raise)."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        if gone is None:
            raise
        return gone
    return times.user + times.system


def loop_seconds() -> float:
    """CPU seconds of a fixed pure-Python loop: this machine's speed of the moment (the host is shared)."""
    started = time.process_time()
    sum(range(2_000_000)) + sum(i * i for i in range(2_000_000))
    return round(time.process_time() - started, 3)


def pid_of(state: RunState, name: str) -> int:
    pid = next(p.pid for p in state.processes if p.name == name)
    assert pid is not None, f"{name} is not running"
    return pid


# ---- the load -----------------------------------------------------------------------------------


@dataclass
class Stream:
    """What one streamed request delivered: its reported output tokens (None for any failure) and the
    reads of the client's socket that carried its body, so tokens a read is how bunched the stream
    reached its user."""

    tokens: int | None
    reads: int = 0


async def one_stream(session: aiohttp.ClientSession, url: str, api: Api, model: str) -> Stream:
    """One streamed request. Only the lines that can carry the usage are parsed, so the client spends
    little CPU per token."""
    try:
        async with session.post(url + api.path, json=api.body(model, f"Tell me a story {random.random()}")) as reply:
            if reply.status != 200:
                return Stream(None)
            reads, tail, finals = 0, b"", []
            async for data in reply.content.iter_any():
                reads += 1
                *lines, tail = (tail + data).split(b"\n")
                finals += [json.loads(line[6:]) for line in lines if final_line(line)]
            return Stream(api.tokens(finals), reads)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError):
        return Stream(None)


def final_line(line: bytes) -> bool:
    return line.startswith(b"data: {") and any(marker in line for marker in FINAL_MARKERS)


async def load(url: str, api: Api, model: str, requests: int) -> tuple[list[Stream], float]:
    """`requests` streams, CONCURRENCY at a time; what each delivered, and the wall time."""
    results: list[Stream] = []
    pending = iter(range(requests))
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def user(session: aiohttp.ClientSession) -> None:
        for _ in pending:
            if time.monotonic() - started > RUN_TIMEOUT_S:
                results.append(Stream(None))
                continue
            results.append(await one_stream(session, url, api, model))

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(user(session) for _ in range(CONCURRENCY)))
    return results, time.monotonic() - started


def measure(name: str, state: RunState, pids: dict[str, int], requests: int, beside: dict[str, Beside]) -> dict:
    """One run of `requests` streams of API `name` (to the gateway beside the graph's that serves it, if
    one does, else the graph's endpoint), with the CPU each watched process spent over it; "gateway" is
    the gateway that served it."""
    tops = {api: side.pid for api, side in beside.items()}
    before = Counters.read(state.supervisor_pid, pids, tops)
    url = beside[name].url if name in beside else state.endpoint.removesuffix("/v1")
    results, wall = asyncio.run(load(url, API[name], state.served_name, requests))
    after = Counters.read(state.supervisor_pid, pids, tops)
    cpu = {process: after.cpu[process] - before.cpu[process] for process in after.cpu}
    served_by = name if name in beside else "gateway"
    today = sum(seconds for process, seconds in cpu.items() if process.startswith("gateway-"))
    cpu["gateway"] = cpu[name] if name in beside else today
    tokens = sum(stream.tokens for stream in results if stream.tokens)
    failed = sum(1 for stream in results if stream.tokens != TOKENS)
    machine = after.machine - before.machine
    row = {
        "api": name,
        "requests": len(results),
        "failed": failed,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "tok_s": round(tokens / wall),
        **{f"{p}_cpu_s": round(s, 3) for p, s in cpu.items()},
        **{f"{p}_us_per_token": round(1e6 * s / max(tokens, 1), 2) for p, s in cpu.items()},
        "gateway_share": round(cpu["gateway"] / (cpu["gateway"] + cpu["frontend"]), 3),
        "gateway_reads_per_token": round((after.reads[served_by] - before.reads[served_by]) / max(tokens, 1), 3),
        "client_tokens_per_read": round(tokens / max(sum(stream.reads for stream in results if stream.tokens), 1), 2),
        "cores_busy": round(machine / wall / CORES, 3),
        "other_processes_cores": round(max(0.0, machine - (after.ours - before.ours)) / wall, 2),
    }
    print(
        f"  {name:<16} {row['requests']} requests ({failed} failed) {tokens} tokens in {wall:5.1f} s "
        f"{row['tok_s']:6d} tok/s  gateway {row['gateway_us_per_token']:5.1f} us/tok  "
        f"frontend {row['frontend_us_per_token']:5.1f} us/tok  cores busy {row['cores_busy']:.0%} "
        f"(others {row['other_processes_cores']:.2f} cores)",
        flush=True,
    )
    return row


# ---- the report ---------------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


SUMMARIZED = (
    "gateway_us_per_token",
    "frontend_us_per_token",
    "gateway_share",
    "tok_s",
    "gateway_reads_per_token",
    "client_tokens_per_read",
    "cores_busy",
    "other_processes_cores",
)


def ratio(rows: list[dict], summary: dict, api: str, base: str) -> dict:
    """`api`'s gateway CPU per token over `base`'s: of the medians, and of each round's two runs."""
    per_round = [
        r["gateway_us_per_token"] / b["gateway_us_per_token"]
        for r, b in zip([r for r in rows if r["api"] == api], [r for r in rows if r["api"] == base])
    ]
    medians = summary[api]["gateway_us_per_token"]["median"] / summary[base]["gateway_us_per_token"]["median"]
    return {"of_medians": round(medians, 3), "per_round": [round(r, 3) for r in per_round]}


def summarize(rows: list[dict]) -> dict:
    fields = [*SUMMARIZED, *(field for field in rows[0] if field.startswith("gateway-") and field.endswith("_token"))]
    summary = {api: {f: spread([r[f] for r in rows if r["api"] == api]) for f in fields} for api in APIS}
    for base in ("chat", "completions"):
        summary[f"gateway_ratio_responses_over_{base}"] = ratio(rows, summary, "responses", base)
    summary["gateway_ratio_responses_over_chat"]["met"] = (
        summary["gateway_ratio_responses_over_chat"]["of_medians"] <= TARGET_RATIO
    )
    summary["gateway_ratio_chat_over_passthrough"] = ratio(rows, summary, "chat", PASSTHROUGH)
    summary["gateway_ratio_chat_over_passthrough"]["met"] = (
        summary["gateway_ratio_chat_over_passthrough"]["of_medians"] <= 1.0
    )
    summary["gateway_ratio_coalesced_over_passthrough"] = ratio(rows, summary, COALESCED, PASSTHROUGH)
    summary["failed_requests"] = sum(r["failed"] for r in rows)
    return summary


def cell(s: dict, digits: int = 1, percent: bool = False) -> str:
    def fmt(value: float) -> str:
        return f"{value:.0%}" if percent else f"{value:.{digits}f}"

    return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"


ROW_LABELS = {
    PASSTHROUGH: f"chat, passed through ({BASELINE}'s gateway)",
    COALESCED: f"chat, coalesced ({COALESCE_MS:g} ms)",
    "completions": "completions (control)",
}


def table_row(api: str, s: dict) -> str:
    label = ROW_LABELS.get(api, api)
    return (
        f"| {label} | {cell(s['gateway_us_per_token'])} | {cell(s['frontend_us_per_token'])} | "
        f"{cell(s['gateway_share'], percent=True)} | {cell(s['tok_s'], 0)} |"
    )


def per_api(summary: dict, field: str, digits: int = 1, percent: bool = False) -> str:
    return ", ".join(f"{api} {cell(summary[api][field], digits, percent)}" for api in APIS)


def markdown(summary: dict, settings: dict) -> str:
    chat, control = summary["gateway_ratio_responses_over_chat"], summary["gateway_ratio_responses_over_completions"]
    then = summary["gateway_ratio_chat_over_passthrough"]
    coalesced = summary["gateway_ratio_coalesced_over_passthrough"]
    lines = [
        f"Command: `{settings['command']}`",
        "",
        "# Gateway and frontend CPU per streamed token: Chat Completions against Responses",
        "",
        f"{settings['host_cpu']} ({settings['cores']} cores), Python {settings['python']}, {settings['date']}, "
        f"code {settings['code']}. {settings['graph']}. A plain aiohttp client at concurrency {CONCURRENCY}, "
        f"streaming, {settings['requests_per_run']} requests of exactly {TOKENS} output tokens per run (`ignore_eos`, "
        f"`min_tokens`), after {settings['warmup_requests_per_api']} warm-up requests per API; {settings['repeats']} "
        "rounds of one run per API in turn. Each cell: "
        "median (min-max) over the runs. The first row is chat through the gateway of the day issue 40 was filed "
        f"(code {BASELINE}, which passed chat through to Dynamo's own chat endpoint), run beside today's in front "
        f"of the same frontend. The third is today's chat with `gateway.streaming.coalesce_ms: {COALESCE_MS:g}`, "
        "from a gateway of one process beside the graph's. The completions row is a control: the stream the Responses and chat paths read "
        "from Dynamo's frontend, passed through by the gateway untransformed.",
        "",
        "| API | gateway us/token | frontend us/token | gateway share of gateway+frontend | output tok/s |",
        "|---|---:|---:|---:|---:|",
        *(table_row(api, summary[api]) for api in APIS),
        "",
        "Per token: the process's CPU seconds (user + system) over the run, divided by the output tokens the "
        "streams' usage reports (chat and completions: the last chunk's `usage.completion_tokens`; responses: the "
        "final event's `response.usage.output_tokens`, in `response.incomplete` since `max_output_tokens` ends it).",
        "",
        f"Responses / chat, gateway CPU per token: **{chat['of_medians']:.2f}x** (ratio of medians; per round "
        f"{rounds(chat)}) against the target of at most {TARGET_RATIO}x: {'met' if chat['met'] else '**missed**'}. "
        f"Responses / completions passed through, what the Responses transform adds to the same upstream stream: "
        f"{control['of_medians']:.2f}x (per round {rounds(control)}). Failed requests: {summary['failed_requests']}.",
        "",
        f"Chat / chat passed through at {BASELINE}, gateway CPU per token: **{then['of_medians']:.2f}x** (ratio of "
        f"medians; per round {rounds(then)}) against the target of no more than then (1.0x): "
        f"{'met' if then['met'] else '**missed**'}. With `gateway.streaming.coalesce_ms: {COALESCE_MS:g}` (a "
        "stream whose reads come closer together than that read again only that long after a read that gave its "
        "client something; a gateway beside the "
        f"graph's, in front of the same frontend), chat / chat passed through: **{coalesced['of_medians']:.2f}x** "
        f"(per round {rounds(coalesced)}).",
        "",
        "Every read from the frontend costs the gateway a wakeup, a parse, a transform and a write to the client, "
        "whatever it carries, and Dynamo's frontend writes chat in bursts but completions about a token at a time "
        f"(a client of the frontend alone sees the same). The gateway's read syscalls per streamed token: "
        f"{per_api(summary, 'gateway_reads_per_token', 2)}. How bunched each stream reached its client, in "
        f"output tokens a read of the client's socket: {per_api(summary, 'client_tokens_per_read', 2)} (above 1, "
        "tokens that waited to go out with others).",
        "",
        *(processes_line(summary, settings["gateway_processes"]) if settings["gateway_processes"] > 1 else []),
        f"Cores busy: {per_api(summary, 'cores_busy', percent=True)}; processes outside the graph and this client "
        f"used {per_api(summary, 'other_processes_cores', 2)} cores (above about 0.1, the figures are noisier). The "
        f"host is shared and its speed drifts: a fixed Python loop took {settings['loop_seconds_before']} s of CPU "
        f"before and {settings['loop_seconds_after']} s after, so compare runs by their ratios, not microseconds.",
    ]
    return "\n".join(lines) + "\n"


def processes_line(summary: dict, processes: int) -> list[str]:
    """What each gateway process spent per token of the whole run (the kernel spreads connections, not
    tokens, evenly), per API: how evenly SO_REUSEPORT shared the load."""
    shares = "; ".join(
        f"{api} " + ", ".join(cell(summary[api][f"gateway-{index}_us_per_token"]) for index in range(processes))
        for api in APIS
        if api not in (PASSTHROUGH, COALESCED)
    )
    return [f"Each gateway process's CPU per token of the run (us, process 0 first): {shares}.", ""]


def rounds(ratio: dict) -> str:
    return ", ".join(f"{r:.2f}" for r in ratio["per_round"])


def code_version(checkout: Path = HERE.parents[1]) -> str:
    """The commit measured (of this checkout, or of the one whose dynamo_oss/ is measured), marked when
    its dynamo_oss/ differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        " + uncommitted dynamo_oss/ changes" if git("status", "--porcelain", "--", "dynamo_oss") else ""
    )


def host_cpu() -> str:
    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    return names[0] if names else platform.processor()


# Two loads: the (the mocker as fast as it goes: the gateway and frontend saturate two cores),
# and one well below saturation (the mocker 10x slower than modelled), where every token arrives on a read
# of its own for every API, so the paths are compared token for token.
LOADS = {"saturated": (TIME_SCALE, REQUESTS, REPEATS), "unsaturated": (10.0, 48, 2)}  # scale, requests, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--load",
        choices=sorted(LOADS),
        default="saturated",
        help="saturated (results.md) or unsaturated (results-unsaturated.md)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        help="gateway processes on the endpoint's one port (default 1, into results.md; given, into "
        "results-N-process(es).md, so runs of one and two processes the same hour sit beside the committed one)",
    )
    parser.add_argument(
        "--stem",
        type=stem_name,
        help="write STEM.md and STEM.json beside this file instead (a run kept beside the committed ones, "
        "which stay what the endpoint's sizing and the README quote)",
    )
    args = parser.parse_args()
    load, processes = args.load, args.processes or 1
    time_scale, requests, repeats = LOADS[load]
    named = "" if args.processes is None else f"-{processes}-process{'es' if processes > 1 else ''}"
    suffix = ("" if load == "saturated" else f"-{load}") + named
    options = (f" --load {load}" if load != "saturated" else "") + (
        f" --processes {processes}" if args.processes is not None else ""
    )
    options += f" --stem {args.stem}" if args.stem else ""
    started = time.monotonic()
    settings = {
        "command": COMMAND + options,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": host_cpu(),
        "cores": CORES,
        "python": platform.python_version(),
        "code": code_version(),
        "graph": f"gpt-oss-20b, one aggregated mocker worker (H200 model) at {time_scale:g}x its modelled step "
        f"time, one Dynamo frontend behind {processes} gateway process{'es' if processes > 1 else ''} (the gateway "
        "columns: all its serving processes together)",
        "gateway_processes": processes,
        "concurrency": CONCURRENCY,
        "tokens": TOKENS,
        "requests_per_run": requests,
        "warmup_requests_per_api": min(WARMUP_REQUESTS, requests // 3),
        "baseline": BASELINE,
        "repeats": repeats,
        "mocker_time_scale": time_scale,
        "loop_seconds_before": loop_seconds(),
    }
    with served_beside(processes, time_scale) as (state, pids, beside, _):
        print(f"served in {time.monotonic() - started:.0f} s, and {BASELINE}'s gateway beside it; warm-up", flush=True)
        for api in APIS:
            measure(api, state, pids, settings["warmup_requests_per_api"], beside)
        print("measuring", flush=True)
        rows = [measure(api, state, pids, requests, beside) for _ in range(repeats) for api in APIS]
    summary = summarize(rows)
    settings["loop_seconds_after"] = loop_seconds()
    settings["total_s"] = round(time.monotonic() - started)
    write_report(args.stem or f"results{suffix}", settings, summary, rows, markdown(summary, settings))


def stem_name(value: str) -> str:
    """A file name's stem beside this script, not a path."""
    if not value or "/" in value or value.startswith("."):
        raise argparse.ArgumentTypeError(f"expected a file name's stem such as results-run1, got {value!r}")
    return value


def write_report(stem: str, settings: dict, summary: dict, rows: list[dict], report: str) -> None:
    """STEM.json (the settings, the summary and every run) and the report as STEM.md, beside this file;
    the report printed, and a failing exit when any request failed."""
    (HERE / f"{stem}.json").write_text(json.dumps({"settings": settings, "summary": summary, "runs": rows}, indent=2))
    (HERE / f"{stem}.md").write_text(report)
    print(report)
    if summary["failed_requests"]:
        sys.exit(f"{summary['failed_requests']} requests failed")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: served_graph has stopped the graph by now
        sys.exit("interrupted; the graph is stopped")
