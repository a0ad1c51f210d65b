"""CPU per streamed token of the request gateway and of Dynamo's frontend, for Chat Completions and
for the gateway's own Responses API, under the same streaming load.

Why: the gateway now owns POST /v1/responses (it renders the request into harmony, streams a plain
/v1/completions from Dynamo's frontend and turns each text chunk into Responses events) and
rewrites chat's reasoning chunks. The requirement: the Responses path may cost the gateway at most
1.5x the chat path's CPU per token.

How: a one-worker aggregated gpt-oss-20b mocker graph on free ports, the mocker TIME_SCALE of its
modelled H200 speed (as fast as a graph file lets it go: the control plane's ceiling setting), so
the software, not the simulated engine, sets the pace. A plain aiohttp client keeps CONCURRENCY
streams of exactly TOKENS output tokens busy for REQUESTS requests per run. The user+system CPU
time of the gateway and frontend processes is read before and after each run and divided by the
output tokens the streams' usage reports. After a warm-up of each API, the runs alternate chat,
responses, ... REPEATS times each, since this 2-core machine is noisy; medians and ranges are
reported. Writes results.json and results.md beside this file; about 4 minutes here:

    uv run python benchmarks/gateway_cpu/run.py
"""

from __future__ import annotations

import asyncio
import itertools
import json
import platform
import random
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import psutil
import yaml

from dynamo_oss.bench.served import served_graph
from dynamo_oss.launch.state import RunState

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/gateway_cpu/run.py"
CONCURRENCY = 16
TOKENS = 256
REQUESTS = 320  # per measured run: 81,920 tokens
WARMUP_REQUESTS = 48  # per API, before the first measured run
REPEATS = 3
TIME_SCALE = 0.001  # mocker 1000x faster than the modelled H200
RUN_TIMEOUT_S = 120.0  # a run stops starting requests after this; unfinished ones count as failed
REQUEST_TIMEOUT_S = 60.0
TARGET_RATIO = 1.5
APIS = ("chat", "responses")


@dataclass
class Api:
    """One API's streaming request and how its last events report the output tokens."""

    path: str
    body: Callable[[str, str], dict]
    tokens: Callable[[list[dict]], int | None]


def chat_body(model: str, prompt: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": TOKENS, "ignore_eos": True,
            "min_tokens": TOKENS}  # fmt: skip


def responses_body(model: str, prompt: str) -> dict:
    return {"model": model, "input": prompt, "stream": True, "max_output_tokens": TOKENS, "ignore_eos": True,
            "min_tokens": TOKENS}  # fmt: skip


def chat_tokens(events: list[dict]) -> int | None:
    usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    return usage["completion_tokens"] if usage else None


def responses_tokens(events: list[dict]) -> int | None:
    """From the final event: response.completed, or response.incomplete when max_output_tokens cut it."""
    final = next((e for e in events if e.get("type") in ("response.completed", "response.incomplete")), None)
    return final["response"]["usage"]["output_tokens"] if final and final["response"].get("usage") else None


API = {
    "chat": Api("/v1/chat/completions", chat_body, chat_tokens),
    "responses": Api("/v1/responses", responses_body, responses_tokens),
}
FINAL_MARKERS = (b'"usage":{', b'"type":"response.completed"', b'"type":"response.incomplete"')


# ---- the graph ----------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """Distinct ports free now, below 32768 (Dynamo's limit for system ports, and under the ephemeral range)."""
    ports: list[int] = []
    candidates = itertools.count(random.randrange(10_000, 30_000))
    while len(ports) < count:
        candidate = next(candidates)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue
        ports.append(candidate)
    return ports


def write_graph(folder: Path) -> Path:
    """One aggregated gpt-oss-20b mocker worker behind Dynamo's frontend and the gateway, on free ports."""
    etcd_client, etcd_peer, nats, monitoring, frontend, dynamo, worker = free_ports(7)
    graph = {
        "name": "gateway-cpu",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": 1},
        "infrastructure": {
            "etcd": {"mode": "embedded", "client_port": etcd_client, "peer_port": etcd_peer},
            "nats": {"mode": "embedded", "port": nats, "monitoring_port": monitoring},
        },
        "frontend": {"port": frontend, "dynamo_port": dynamo},
        "pools": {"agg": {"workers": 1, "engine": "mocker", "system_port": worker}},
    }
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


# ---- the load -----------------------------------------------------------------------------------


async def one_stream(session: aiohttp.ClientSession, url: str, api: Api, model: str) -> int | None:
    """The output tokens one streamed request reports in its usage; None for any failure. Only the
    events that can carry the usage are parsed, so the client spends little CPU per token."""
    try:
        async with session.post(url + api.path, json=api.body(model, f"Tell me a story {random.random()}")) as reply:
            if reply.status != 200:
                return None
            finals = [json.loads(line[6:]) async for line in reply.content
                      if line.startswith(b"data: {") and any(m in line for m in FINAL_MARKERS)]  # fmt: skip
            return api.tokens(finals)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError):
        return None


async def load(url: str, api: Api, model: str, requests: int) -> tuple[list[int | None], float]:
    """`requests` streams, CONCURRENCY at a time; each one's reported tokens, and the wall time."""
    results: list[int | None] = []
    pending = iter(range(requests))
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def user(session: aiohttp.ClientSession) -> None:
        for _ in pending:
            if time.monotonic() - started > RUN_TIMEOUT_S:
                results.append(None)
                continue
            results.append(await one_stream(session, url, api, model))

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(user(session) for _ in range(CONCURRENCY)))
    return results, time.monotonic() - started


def measure(name: str, state: RunState, pids: dict[str, int], requests: int) -> dict:
    """One run of `requests` streams of API `name`, with the CPU each watched process spent over it."""
    before = {process: cpu_seconds(pid) for process, pid in pids.items()}
    psutil.cpu_percent()  # starts the machine-wide reading
    results, wall = asyncio.run(load(state.endpoint.removesuffix("/v1"), API[name], state.served_name, requests))
    cpu = {process: cpu_seconds(pid) - before[process] for process, pid in pids.items()}
    tokens = sum(t for t in results if t)
    failed = sum(1 for t in results if t != TOKENS)
    row = {"api": name, "requests": len(results), "failed": failed, "tokens": tokens, "wall_s": round(wall, 2),
           "tok_s": round(tokens / wall), "cores_busy": psutil.cpu_percent() / 100,
           **{f"{p}_cpu_s": round(s, 3) for p, s in cpu.items()},
           **{f"{p}_us_per_token": round(1e6 * s / tokens, 2) if tokens else None for p, s in cpu.items()}}  # fmt: skip
    row["gateway_share"] = round(cpu["gateway"] / (cpu["gateway"] + cpu["frontend"]), 3)
    print(f"  {name:<9} {row['requests']} requests ({failed} failed) {tokens} tokens in {wall:5.1f} s "
          f"{row['tok_s']:6d} tok/s  gateway {row['gateway_us_per_token']} us/tok  "
          f"frontend {row['frontend_us_per_token']} us/tok  cores {row['cores_busy']:.0%}", flush=True)  # fmt: skip
    return row


# ---- the report ---------------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rows: list[dict]) -> dict:
    fields = ("gateway_us_per_token", "frontend_us_per_token", "gateway_share", "tok_s")
    summary = {api: {f: spread([r[f] for r in rows if r["api"] == api]) for f in fields} for api in APIS}
    pairs = [(c["gateway_us_per_token"], r["gateway_us_per_token"])
             for c, r in zip([r for r in rows if r["api"] == "chat"], [r for r in rows if r["api"] == "responses"])]  # fmt: skip
    ratio = summary["responses"]["gateway_us_per_token"]["median"] / summary["chat"]["gateway_us_per_token"]["median"]
    summary["gateway_ratio_responses_over_chat"] = {
        "of_medians": round(ratio, 3), "per_pair": [round(r / c, 3) for c, r in pairs], "target": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO}  # fmt: skip
    summary["failed_requests"] = sum(r["failed"] for r in rows)
    return summary


def cell(s: dict, digits: int = 1, percent: bool = False) -> str:
    def fmt(value: float) -> str:
        return f"{value:.0%}" if percent else f"{value:.{digits}f}"

    return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"


def markdown(summary: dict, settings: dict) -> str:
    ratio = summary["gateway_ratio_responses_over_chat"]
    lines = [
        f"Command: `{COMMAND}`",
        "",
        "# Gateway and frontend CPU per streamed token: Chat Completions against Responses",
        "",
        f"{settings['host_cpu']} ({settings['cores']} cores), Python {settings['python']}, {settings['date']}. "
        f"{settings['graph']}. A plain aiohttp client at concurrency {CONCURRENCY}, streaming, {REQUESTS} requests "
        f"of exactly {TOKENS} output tokens per run (`ignore_eos`, `min_tokens`), after {WARMUP_REQUESTS} warm-up "
        f"requests per API; {REPEATS} runs per API, alternating chat and responses. Each cell: median (min-max) over "
        "the runs.",
        "",
        "| API | gateway us/token | frontend us/token | gateway share of gateway+frontend | output tok/s |",
        "|---|---:|---:|---:|---:|",
        *(f"| {api} | {cell(s['gateway_us_per_token'])} | {cell(s['frontend_us_per_token'])} | "
          f"{cell(s['gateway_share'], percent=True)} | {cell(s['tok_s'], 0)} |"
          for api, s in ((api, summary[api]) for api in APIS)),  # fmt: skip
        "",
        "Per token: the process's CPU seconds (user + system) over the run, divided by the output tokens the "
        "streams' usage reports (chat: the last chunk's `usage.completion_tokens`; responses: the final event's "
        "`response.usage.output_tokens`).",
        "",
        f"Responses / chat, gateway CPU per token: **{ratio['of_medians']:.2f}x** (ratio of medians; per run pair "
        f"{', '.join(f'{r:.2f}' for r in ratio['per_pair'])}) against the target of at most {TARGET_RATIO}x: "
        f"{'met' if ratio['met'] else '**missed**'}. Failed requests: {summary['failed_requests']}.",
    ]
    return "\n".join(lines) + "\n"


def host_cpu() -> str:
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")]  # fmt: skip
    return names[0] if names else platform.processor()


def main() -> None:
    started = time.monotonic()
    settings = {
        "command": COMMAND, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host_cpu": host_cpu(),
        "cores": psutil.cpu_count(), "python": platform.python_version(),
        "graph": f"gpt-oss-20b, one aggregated mocker worker (H200 model) at {TIME_SCALE:g}x its modelled step "
                 "time, Dynamo's frontend behind the gateway",
        "concurrency": CONCURRENCY, "tokens": TOKENS, "requests_per_run": REQUESTS,
        "warmup_requests_per_api": WARMUP_REQUESTS, "repeats": REPEATS, "mocker_time_scale": TIME_SCALE,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gateway-cpu-") as scratch:
        folder = Path(scratch)
        print(f"serving a mocker graph (logs in {folder})", flush=True)
        with served_graph(write_graph(folder), folder / "run", engine="mocker", time_scale=TIME_SCALE) as state:
            pids = {name: next(p.pid for p in state.processes if p.name == name) for name in ("gateway", "frontend")}
            print(f"served in {time.monotonic() - started:.0f} s; warm-up", flush=True)
            for api in APIS:
                measure(api, state, pids, WARMUP_REQUESTS)
            print("measuring", flush=True)
            rows = [measure(api, state, pids, REQUESTS) for _ in range(REPEATS) for api in APIS]
    summary = summarize(rows)
    settings["total_s"] = round(time.monotonic() - started)
    (HERE / "results.json").write_text(json.dumps({"settings": settings, "summary": summary, "runs": rows}, indent=2))
    report = markdown(summary, settings)
    (HERE / "results.md").write_text(report)
    print(report)
    if summary["failed_requests"]:
        sys.exit(f"{summary['failed_requests']} requests failed")


if __name__ == "__main__":
    main()
