"""Faults, overload and hostile input against the disaggregated mocker graph, each under steady load
from a second process: one table, one row per fault or campaign.

Each row serves a fresh graph (gpt-oss-20b disaggregated on Dynamo's mocker, H200 model, 10x slower
than modelled so this 2-core machine keeps up), starts the load process (CONCURRENCY streaming chats
of TOKENS tokens each, back to back through the gateway, waiting as long as a refusal's Retry-After
says before the next), injects its fault FAULT_AT_S seconds in and keeps the load on until LOAD_S. Every request is classified by what its client saw:
- succeeded: HTTP 200 and exactly TOKENS completion tokens (the usage of the stream's last chunk);
- retryable: a 503 with Retry-After, or a stream that ends with an error event saying 503;
- lost: anything else (a cut or corrupt stream, a wrong length, another status, a client error).
Recovery is the time from the fault to the first success after the last failure. Writes results.md
and results.json beside this file; about 8 minutes here:

    uv run python benchmarks/reliability/run.py
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import yaml

from dynamo_oss.bench.ports import on_free_ports
from dynamo_oss.bench.served import served_graph
from dynamo_oss.launch.state import RunState

HERE = Path(__file__).resolve().parent
MODEL = "openai/gpt-oss-20b"
CONCURRENCY = 8
TOKENS = 120
TIME_SCALE = 10.0
FAULT_AT_S = 6.0
LOAD_S = 30.0
FUZZ_REQUESTS = 400


def write_graph(folder: Path, prefill: int = 1, decode: int = 1, max_in_flight: int | None = None) -> Path:
    """graphs/disagg.yaml's shape for gpt-oss-20b on mocker workers (one gateway process, one frontend),
    on free ports."""
    graph = {
        "name": "reliability",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": prefill + decode},
        "frontend": {"migration_limit": 3, "replicas": 1},
        "gateway": {"processes": 1, **({"max_in_flight": max_in_flight} if max_in_flight else {})},
        "pools": {
            "prefill": {"workers": prefill, "engine": "mocker"},
            "decode": {"workers": decode, "engine": "mocker"},
        },
    }
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(graph)))
    return path


# ---- the load process -------------------------------------------------------------------------------


def classify(status: int, retry_after: str | None, events: list[dict], tokens: int) -> str:
    if status == 503 and retry_after:
        return "retryable"
    if status != 200:
        return "lost"
    errors = [event["error"] for event in events if "error" in event]
    if errors:
        code = errors[-1].get("code")
        return "retryable" if code in (503, "503", "frontend_unavailable") else "lost"
    usage = next((event["usage"] for event in reversed(events) if event.get("usage")), None)
    return "succeeded" if usage and usage["completion_tokens"] == tokens else "lost"


async def one_stream(client: httpx.AsyncClient, tokens: int) -> tuple[str, str, float | None, float]:
    """What the client saw, and how long it waits before its next request: Retry-After when the answer
    carries one, a second after an in-stream error, as the OpenAI SDKs back off."""
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Tell me a story {random.random()}"}],
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    first_token: float | None = None
    try:
        async with client.stream("POST", "/chat/completions", json=request) as reply:
            events = []
            async for line in reply.aiter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
                    if first_token is None and events[-1].get("choices"):
                        first_token = time.monotonic() - started
            retry_after = reply.headers.get("retry-after")
            outcome = classify(reply.status_code, retry_after, events, tokens)
            backoff = float(retry_after) if retry_after else (1.0 if outcome != "succeeded" else 0.0)
            return outcome, f"HTTP {reply.status_code}", first_token, backoff
    except (httpx.HTTPError, ValueError) as err:  # a cut connection; an event that is not JSON
        return "lost", f"{type(err).__name__}: {err}", None, 1.0


async def steady_load(endpoint: str, concurrency: int, seconds: float, tokens: int, log: Path) -> None:
    t0 = time.monotonic()
    with log.open("w") as out:

        async def user() -> None:
            async with httpx.AsyncClient(base_url=endpoint, timeout=120) as client:
                while time.monotonic() - t0 < seconds:
                    start = time.monotonic() - t0
                    outcome, detail, ttft, backoff = await one_stream(client, tokens)
                    row = {
                        "start": start,
                        "end": time.monotonic() - t0,
                        "outcome": outcome,
                        "detail": detail,
                        "ttft_s": ttft,
                    }
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    await asyncio.sleep(backoff)

        await asyncio.gather(*(user() for _ in range(concurrency)))


def load_process(endpoint: str, concurrency: int, seconds: float, tokens: int, log: Path) -> None:
    asyncio.run(steady_load(endpoint, concurrency, seconds, tokens, log))


# ---- faults -----------------------------------------------------------------------------------------


def kill(process: str) -> Callable[[Path], None]:
    def fault(run_dir: Path) -> None:
        pid = next(p.pid for p in RunState.read(run_dir).processes if p.name == process)
        os.kill(pid, signal.SIGKILL)

    return fault


def fault_row(name: str, folder: Path, graph: Path, fault: Callable[[Path], None] | None, **load: int) -> dict:
    """Serve `graph`, load it from a second process, inject `fault` at FAULT_AT_S, tally what clients saw."""
    log = folder / "requests.jsonl"
    concurrency, tokens = load.get("concurrency", CONCURRENCY), load.get("tokens", TOKENS)
    with served_graph(graph, folder / "run", engine="mocker", time_scale=TIME_SCALE) as state:
        args = (state.endpoint, concurrency, LOAD_S, tokens, log)
        loader = multiprocessing.get_context("spawn").Process(target=load_process, args=args)
        t0 = time.monotonic()
        memory = [graph_memory_mb(state.supervisor_pid)]
        loader.start()
        fault_at = None
        while loader.is_alive() and time.monotonic() - t0 < LOAD_S + 240:
            if fault is not None and fault_at is None and time.monotonic() - t0 >= FAULT_AT_S:
                fault(folder / "run")
                fault_at = time.monotonic() - t0
            memory.append(graph_memory_mb(state.supervisor_pid))
            loader.join(0.5)
        hung = loader.is_alive()
        if hung:
            loader.kill()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    tally = {outcome: sum(1 for r in rows if r["outcome"] == outcome) for outcome in ("succeeded", "retryable", "lost")}
    return {
        "row": name,
        "requests": len(rows),
        **tally,
        "hung": hung,
        "recovery_s": recovery(rows, fault_at),
        "examples": sorted({r["detail"] for r in rows if r["outcome"] == "lost"})[:3],
        "memory_mb_at_start": memory[0],
        "memory_mb_peak": max(memory),
        "admitted_ttft_p50_s": percentile([r["ttft_s"] for r in rows if r["outcome"] == "succeeded"], 50),
        "admitted_ttft_p99_s": percentile([r["ttft_s"] for r in rows if r["outcome"] == "succeeded"], 99),
    }


def graph_memory_mb(supervisor_pid: int) -> int:
    """Resident memory of the launcher and every process it started, MB."""
    root = psutil.Process(supervisor_pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass  # exited between the listing and the reading: a killed process, say
    return total // 2**20


def recovery(rows: list[dict], fault_at: float | None) -> float | None:
    """From the fault to the first success that started after the last failure (0 with no failure)."""
    if fault_at is None:
        return None
    failures = [r["start"] for r in rows if r["outcome"] != "succeeded" and r["start"] >= fault_at - 30]
    if not failures:
        return 0.0
    later = [r["start"] for r in rows if r["outcome"] == "succeeded" and r["start"] > max(failures)]
    return round(min(later) - fault_at, 1) if later else None


def percentile(values: list[float], q: int) -> float | None:
    values = sorted(v for v in values if v is not None)
    return round(values[min(len(values) - 1, int(len(values) * q / 100))], 2) if values else None


# ---- the fuzz campaign ------------------------------------------------------------------------------


def hostile_body(rng: random.Random) -> bytes:
    """A request with a valid core and a few fields made hostile: wrong types, huge or negative values,
    deep nesting, unsupported fields, broken JSON or UTF-8."""
    body: dict = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    wild = [None, True, -1, 0, 2**63, 1e308, "", "x" * 10_000, [], {}, [[[]]], {"a": {"b": {}}}, "8"]
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(
            [
                "messages",
                "max_tokens",
                "n",
                "tools",
                "temperature",
                "stream",
                "stop",
                "model",
                "response_format",
                "logprobs",
                "prompt",
                "tool_choice",
            ]
        )
        body[field] = rng.choice(wild)
    raw = json.dumps(body).encode()
    mangle = rng.random()
    if mangle < 0.05:
        return b"[" * 100_000 + b"]" * 100_000
    if mangle < 0.10:
        return raw[: len(raw) // 2]
    if mangle < 0.15:
        return raw.replace(b'"hi"', b'"\xff\xfe"')
    return raw


def fuzz_outcome(reply: httpx.Response) -> str:
    if reply.status_code >= 500:
        return "5xx"
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return "not JSON"
    if reply.status_code < 400:
        return "2xx"
    error = reply.json().get("error") if isinstance(reply.json(), dict) else None
    openai_shaped = isinstance(error, dict) and {"message", "type", "param", "code"} <= error.keys()
    return "4xx (OpenAI JSON)" if openai_shaped else "4xx (other)"


def fuzz_row(folder: Path, graph: Path) -> dict:
    """Hostile requests on every route, with steady load alongside: no 5xx, no plain text, nothing lost."""
    log = folder / "requests.jsonl"
    rng = random.Random(16)
    counts = {"2xx": 0, "4xx (OpenAI JSON)": 0, "4xx (other)": 0, "5xx": 0, "not JSON": 0}
    with served_graph(graph, folder / "run", engine="mocker", time_scale=TIME_SCALE) as state:
        args = (state.endpoint, CONCURRENCY // 2, LOAD_S, TOKENS, log)
        loader = multiprocessing.get_context("spawn").Process(target=load_process, args=args)
        loader.start()
        with httpx.Client(base_url=state.endpoint, timeout=60) as client:
            for _ in range(FUZZ_REQUESTS):
                route = rng.choice(["/chat/completions", "/completions", "/responses"])
                body = hostile_body(rng)
                if body.startswith(b'{"model"') and body.endswith(b"}"):
                    body = body.replace(b'"stream": true', b'"stream": false')
                reply = client.post(route, content=body, headers={"content-type": "application/json"})
                counts[fuzz_outcome(reply)] += 1
        loader.join(LOAD_S + 240)
        restarts = sum(p.restarts for p in RunState.read(folder / "run").processes)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    tally = {outcome: sum(1 for r in rows if r["outcome"] == outcome) for outcome in ("succeeded", "retryable", "lost")}
    return {
        "row": "fuzz: hostile requests beside steady load",
        "requests": len(rows),
        **tally,
        "hung": False,
        "recovery_s": None,
        "fuzz": {"sent": FUZZ_REQUESTS, **counts},
        "restarts": restarts,
        "examples": [],
    }


# ---- the table --------------------------------------------------------------------------------------

SCENARIOS: list[tuple[str, dict, str | None, dict]] = [
    ("decode worker SIGKILL, 2 decode workers", {"decode": 2}, "decode-0", {}),
    ("decode worker SIGKILL, 1 decode worker", {}, "decode-0", {}),
    ("prefill worker SIGKILL, 2 prefill workers", {"prefill": 2}, "prefill-0", {}),
    ("prefill worker SIGKILL, 1 prefill worker", {}, "prefill-0", {}),
    ("frontend SIGKILL", {}, "frontend", {}),
    ("etcd SIGKILL", {}, "etcd", {}),
    ("nats-server SIGKILL", {}, "nats", {}),
    ("overload: 64 streams, max_in_flight 8", {"max_in_flight": 8}, None, {"concurrency": 64}),
]
MUST_LOSE_NOTHING = {
    "decode worker SIGKILL, 2 decode workers",
    "prefill worker SIGKILL, 2 prefill workers",
    "etcd SIGKILL",
    "nats-server SIGKILL",
    "overload: 64 streams, max_in_flight 8",
    "fuzz: hostile requests beside steady load",
}


def table(rows: list[dict]) -> str:
    lines = [
        "| row | requests | succeeded | retryable | lost | must lose none | recovery (s) | admitted TTFT p50 / p99 (s) "
        "| memory at start / peak (MB) |",
        "|---|---:|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    for r in rows:
        must = "yes" if r["row"] in MUST_LOSE_NOTHING else ""
        ttft = (
            f"{r.get('admitted_ttft_p50_s')} / {r.get('admitted_ttft_p99_s')}" if r.get("admitted_ttft_p50_s") else ""
        )
        lines.append(
            f"| {r['row']} | {r['requests']} | {r['succeeded']} | {r['retryable']} | {r['lost']} | {must} "
            f"| {'' if r['recovery_s'] is None else r['recovery_s']} | {ttft} "
            f"| {r.get('memory_mb_at_start', '')} / {r.get('memory_mb_peak', '')} |"
        )
    return "\n".join(lines)


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as scratch:
        for index, (name, shape, victim, load) in enumerate(SCENARIOS):
            folder = Path(scratch) / str(index)
            folder.mkdir()
            print(f"[{index + 1}/{len(SCENARIOS) + 1}] {name}", flush=True)
            rows.append(fault_row(name, folder, write_graph(folder, **shape), kill(victim) if victim else None, **load))
            print(f"    {rows[-1]}", flush=True)
        folder = Path(scratch) / "fuzz"
        folder.mkdir()
        print(f"[{len(SCENARIOS) + 1}/{len(SCENARIOS) + 1}] fuzz", flush=True)
        rows.append(fuzz_row(folder, write_graph(folder)))
        print(f"    {rows[-1]}", flush=True)
    (HERE / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    write_report(rows)
    print(table(rows))
    fuzz = rows[-1]["fuzz"]
    failed = [r["row"] for r in rows if (r["row"] in MUST_LOSE_NOTHING and r["lost"]) or r["hung"]]
    return 1 if failed or fuzz["5xx"] or fuzz["not JSON"] or fuzz["4xx (other)"] else 0


def write_report(rows: list[dict]) -> None:
    fuzz = rows[-1]["fuzz"]
    (HERE / "results.md").write_text(
        "# Reliability: faults, overload and hostile input under load\n\n"
        f"`uv run python benchmarks/reliability/run.py` (the module docstring says how each request is classified). "
        f"Load: {CONCURRENCY} streaming chats of {TOKENS} tokens back to back (64 in the overload row), mocker "
        f"{TIME_SCALE:g}x slower than modelled; fault {FAULT_AT_S:g} s in, load for {LOAD_S:g} s. "
        "A request succeeded with exactly its tokens, failed retryably (503 with Retry-After, or a stream ending "
        "in an error event saying 503), or was lost (anything else). Recovery: from the fault to the first success "
        "after the last failure. TTFT: the client's time to the first token of a succeeded request. Memory: "
        "resident memory of the launcher and every process it started, sampled every half second.\n\n"
        + table(rows)
        + f"\n\nFuzz campaign: {fuzz['sent']} hostile requests across /v1/chat/completions, /v1/completions and "
        f"/v1/responses beside the load: {fuzz['2xx']} answered 200, {fuzz['4xx (OpenAI JSON)']} got a 4xx with an "
        f"OpenAI error body, {fuzz['4xx (other)']} a 4xx of another shape, {fuzz['5xx']} a 5xx, {fuzz['not JSON']} a "
        "body that is not JSON; "
        f"process restarts during the campaign: {rows[-1]['restarts']}.\n"
    )


if __name__ == "__main__":
    sys.exit(main())
