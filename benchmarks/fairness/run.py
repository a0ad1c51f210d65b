"""One tenant flooding the graph, another tenant's time to first token beside it: with and without a
per-key limit on the flood (gateway.auth.limits_per_key, or the key's line in the keys file).

Why: without limits one key may take the whole graph. The requirement: a tenant flooding the graph
does not push another tenant's TTFT past the graph's target (graphs/disagg.yaml: TTFT p90 2000 ms).

How: graphs/disagg.yaml on Dynamo's mocker at its modelled B200 speed, on free ports, its pools fixed
at one prefill and one decode worker (no planner: it would add workers and hide the contention), with
three keys, each a tenant of its own: `quiet`, `flood` (no limits) and `flood-capped` (at most
CAPPED requests in flight). The flood is FLOOD_STREAMS closed-loop streams of prompts of about
FLOOD_WORDS words (each its own, so nothing is cached) and FLOOD_TOKENS output tokens: prefill-heavy,
so the prefill worker queues. The quiet tenant sends QUIET_REQUESTS streaming chats one after another,
prompts of about QUIET_WORDS words. Three runs: the quiet tenant alone, beside the open flood, and
beside the capped flood. TTFT is measured as aiperf measures it: from sending the request to the first
streamed chunk that carries generated text (reasoning included). Writes results.json and results.md
beside this file; about 4 minutes here:

    uv run python benchmarks/fairness/run.py
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import yaml

from benchmarks.gateway_cpu.run import code_version, host_cpu
from dynamo_oss.bench.host_load import CpuSampler
from dynamo_oss.bench.ports import on_free_ports
from dynamo_oss.bench.served import measured_copy, served_graph

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
COMMAND = "uv run python benchmarks/fairness/run.py"
GRAPH = REPO / "graphs" / "disagg.yaml"
KEYS = {"quiet": "sk-quiet-5a1d", "flood": "sk-flood-09be", "flood-capped": "sk-flood-capped-77c2"}
CAPPED = 4  # flood-capped's concurrent_requests
FLOOD_STREAMS = 128
FLOOD_WORDS = 6000
FLOOD_TOKENS = 16
QUIET_REQUESTS = 30
QUIET_WORDS = 300
QUIET_TOKENS = 16
WARMUP_S = 15.0  # the flood runs this long before the quiet tenant starts
WORDS = (
    "ledger invoice river harbor copper signal lantern orbit meadow quartz thunder velvet canyon "
    "falcon marble prism saddle tundra willow ember"
).split()


def graph(folder: Path) -> Path:
    """The README's graph on free ports with fixed pools, no planner, and the three keys."""
    spec = measured_copy(GRAPH)
    for pool in spec["pools"].values():
        pool.pop("autoscale", None)
        pool["workers"] = 1
    spec.pop("planner", None)
    spec.pop("observability", None)
    keys = folder / "api-keys"
    keys.write_text(
        "".join(
            f"{name} {key}{f' concurrent_requests={CAPPED}' if name == 'flood-capped' else ''}\n"
            for name, key in KEYS.items()
        )
    )
    keys.chmod(0o600)
    spec["gateway"] = {"auth": {"keys_file": str(keys)}}
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(spec), sort_keys=False))
    return path


def prompt(words: int, rng: random.Random) -> str:
    return f"{rng.random():.12f} " + " ".join(rng.choice(WORDS) for _ in range(words))


def chat(model: str, text: str, tokens: int) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "max_tokens": tokens,
        "ignore_eos": True,
        "min_tokens": tokens,
    }


@dataclass
class Flood:
    """Closed-loop streams of one key until stopped: what they got."""

    completed: int = 0
    refused: int = 0
    failed: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def stream_ttft(session: aiohttp.ClientSession, url: str, key: str, body: dict) -> tuple[int, float | None]:
    """(status, seconds to the first chunk with generated text) of one streaming chat, read to its end."""
    started = time.monotonic()
    first = None
    async with session.post(url, json=body, headers={"authorization": f"Bearer {key}"}) as reply:
        if reply.status != 200:
            await reply.read()
            return reply.status, None
        async for line in reply.content:
            if first is None and line.startswith(b"data: {") and (b'"content":"' in line or b'"reasoning":"' in line):
                if b'"content":""' not in line:
                    first = time.monotonic() - started
    return 200, first


async def flood_stream(session: aiohttp.ClientSession, url: str, key: str, model: str, flood: Flood, seed: int) -> None:
    rng = random.Random(seed)
    while not flood.stop.is_set():
        try:
            status, _ = await stream_ttft(session, url, key, chat(model, prompt(FLOOD_WORDS, rng), FLOOD_TOKENS))
        except (aiohttp.ClientError, TimeoutError):
            flood.failed += 1
            continue
        if status == 200:
            flood.completed += 1
        elif status == 429:
            flood.refused += 1
            await asyncio.sleep(0.2)  # as a client backs off on a 429 (Retry-After would say 1 s)
        else:
            flood.failed += 1


async def run(endpoint: str, model: str, flood_key: str | None) -> dict:
    url = f"{endpoint}/chat/completions"
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=FLOOD_STREAMS + 4)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        flood = Flood()
        streams = []
        if flood_key is not None:
            streams = [
                asyncio.create_task(flood_stream(session, url, KEYS[flood_key], model, flood, seed))
                for seed in range(FLOOD_STREAMS)
            ]
            await asyncio.sleep(WARMUP_S)
        flood.completed = flood.refused = 0
        started, started_at = time.monotonic(), time.time()
        rng = random.Random(1)
        ttfts, statuses = [], []
        for _ in range(QUIET_REQUESTS):
            status, ttft = await stream_ttft(
                session, url, KEYS["quiet"], chat(model, prompt(QUIET_WORDS, rng), QUIET_TOKENS)
            )
            statuses.append(status)
            if ttft is not None:
                ttfts.append(ttft * 1000)
        elapsed, ended_at = time.monotonic() - started, time.time()
        flood.stop.set()
        await asyncio.gather(*streams)
    return {
        "flood": flood_key,
        "quiet_statuses": statuses,
        "quiet_ttft_ms": [round(t, 1) for t in ttfts],
        "quiet_ttft_p50_ms": round(statistics.median(ttfts), 1),
        "quiet_ttft_p90_ms": round(statistics.quantiles(ttfts, n=10)[-1], 1),
        "quiet_ttft_max_ms": round(max(ttfts), 1),
        "seconds": round(elapsed, 1),
        "flood_completed_per_s": round(flood.completed / elapsed, 2),
        "flood_refused_429": flood.refused,
        "flood_failed": flood.failed,
        "window": [started_at, ended_at],
    }


def markdown(settings: dict, rows: list[dict]) -> str:
    target = settings["ttft_target_ms"]
    lines = [
        f"Command: `{COMMAND}`",
        "",
        "# One tenant flooding the graph, another tenant's TTFT beside it",
        "",
        f"{settings['date']}, {settings['host']}, code {settings['code']}. graphs/disagg.yaml on Dynamo's mocker at "
        "its modelled B200 speed, pools fixed at 1 prefill + 1 decode TP1 worker (no planner), each key a tenant of "
        f"its own. Flood: {FLOOD_STREAMS} closed-loop streams, prompts of about {FLOOD_WORDS} words (each its own, "
        f"nothing cached), {FLOOD_TOKENS} output tokens; `flood-capped` has `concurrent_requests={CAPPED}`. Quiet "
        f"tenant: {QUIET_REQUESTS} streaming chats one after another, prompts of about {QUIET_WORDS} words, "
        f"{QUIET_TOKENS} output tokens, after {WARMUP_S:g} s of flood. TTFT as aiperf measures it: from sending the "
        "request to the first streamed chunk carrying generated text (reasoning included). Target: TTFT p90 <= "
        f"{target:g} ms (graphs/disagg.yaml's planner.ttft_ms).",
        "",
        "| flood | quiet TTFT p50 ms | quiet TTFT p90 ms | quiet TTFT max ms | within target | flood answers/s | "
        "flood 429s | quiet errors | cores busy |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        name = {
            None: "none (quiet alone)",
            "flood": "open (no limits)",
            "flood-capped": f"capped at {CAPPED} in flight",
        }
        met = "yes" if row["quiet_ttft_p90_ms"] <= target else "**no**"
        errors = sum(1 for status in row["quiet_statuses"] if status != 200)
        lines.append(
            f"| {name[row['flood']]} | {row['quiet_ttft_p50_ms']:.0f} | {row['quiet_ttft_p90_ms']:.0f} | "
            f"{row['quiet_ttft_max_ms']:.0f} | {met} | {row['flood_completed_per_s']:.2f} | "
            f"{row['flood_refused_429']} | {errors} | {row['cores_busy']:.0%} |"
        )
    lines += [
        "",
        "The open flood queues the prefill worker: each quiet request waits behind about "
        f"{FLOOD_STREAMS} flood prompts. Capped at {CAPPED} in flight, the flood gets a 429 for the rest (its "
        "clients back off 0.2 s and retry), the queue ahead of the quiet tenant is at most that short, and the flood "
        "is served at the rate its share allows. With the cores this busy, part of every TTFT here is this 2-core "
        "host's own CPU (the gateway, Dynamo's frontend and this client share it), not the modelled GPUs.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    started = time.monotonic()
    target = yaml.safe_load(GRAPH.read_text())["planner"]["ttft_ms"]
    settings = {
        "command": COMMAND,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": f"{host_cpu()} ({os.cpu_count()} cores), Python {platform.python_version()}",
        "code": code_version(),
        "ttft_target_ms": target,
        "capped_concurrent_requests": CAPPED,
        "flood_streams": FLOOD_STREAMS,
        "flood_words": FLOOD_WORDS,
        "flood_tokens": FLOOD_TOKENS,
        "quiet_requests": QUIET_REQUESTS,
        "quiet_words": QUIET_WORDS,
        "quiet_tokens": QUIET_TOKENS,
        "warmup_s": WARMUP_S,
    }
    with tempfile.TemporaryDirectory(prefix="fairness-") as scratch:
        folder = Path(scratch)
        print(f"serving graphs/disagg.yaml on the mocker (logs in {folder})", flush=True)
        with served_graph(graph(folder), folder / "run", engine="mocker", time_scale=1.0, keyed=True) as state:
            endpoint = state.endpoint.rstrip("/")
            rows = []
            for flood_key in (None, "flood", "flood-capped"):
                print(f"run: flood {flood_key or 'none'}", flush=True)
                with CpuSampler() as cpu:
                    row = asyncio.run(run(endpoint, state.served_name, flood_key))
                busy = cpu.busy_between(*row.pop("window"))
                row["cores_busy"] = round(busy, 3) if busy is not None else None
                print(
                    f"  quiet TTFT p50 {row['quiet_ttft_p50_ms']:.0f} ms, p90 {row['quiet_ttft_p90_ms']:.0f} ms; "
                    f"flood {row['flood_completed_per_s']:.2f}/s, {row['flood_refused_429']} 429s",
                    flush=True,
                )
                rows.append(row)
    settings["total_s"] = round(time.monotonic() - started)
    (HERE / "results.json").write_text(json.dumps({"settings": settings, "runs": rows}, indent=2) + "\n")
    report = markdown(settings, rows)
    (HERE / "results.md").write_text(report)
    print(report)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; the graph is stopped")
