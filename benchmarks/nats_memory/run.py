"""What the graph's NATS holds as requests go by: its memory (RSS) and JetStream's bytes and messages
after each phase of requests, for chat (nothing stored), stored Responses and unstored Responses.

Why: the hour's soak (benchmarks/soak) saw NATS grow 23 to 47 MiB through two synced Dynamo frontends,
where an earlier soak, before responses were stored, held it flat. This separates the two suspects:
the frontends' replica sync (router events over NATS, per request) and the response store (a JetStream
key-value record per stored response, kept for the graph's retention).

How: the README's graph (graphs/disagg.yaml) on Dynamo's mocker at TIME_SCALE, its endpoint one gateway
process and two synced Dynamo frontends (`router: kv`), on free ports. PHASES run in turn, each REQUESTS
requests CONCURRENCY at a time; NATS's RSS and its monitoring port's /jsz are read after each. Writes
results.json and results.md beside this file; about two minutes here:

    uv run python benchmarks/nats_memory/run.py
"""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import sys
import tempfile
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from dynamo_oss.bench.ports import shipped_on_free_ports  # noqa: E402
from dynamo_oss.bench.served import served_graph  # noqa: E402

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/nats_memory/run.py"
TIME_SCALE = 0.02
REQUESTS = 1500
CONCURRENCY = 8
TOKENS = 32
# (label, path, body of request i)
PHASES: list[tuple[str, str, Any]] = [
    *(
        (
            f"chat, round {r + 1}",
            "/chat/completions",
            lambda i, r=r: {"messages": [{"role": "user", "content": f"{r} {i}"}]},
        )
        for r in range(3)
    ),
    ("stored Responses", "/responses", lambda i: {"input": f"stored {i}"}),
    ("stored Responses, again", "/responses", lambda i: {"input": f"stored again {i}"}),
    ("unstored Responses", "/responses", lambda i: {"input": f"unstored {i}", "store": False}),
]


async def send(base: str, model: str, path: str, body: Any) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:

        async def one(index: int) -> None:
            async with limit:
                tokens = {"max_output_tokens": TOKENS} if path == "/responses" else {"max_tokens": TOKENS}
                reply = await client.post(path, json={"model": model, **tokens, **body(index)})
                reply.raise_for_status()

        await asyncio.gather(*(one(index) for index in range(REQUESTS)))


def reading(label: str, nats: psutil.Process, monitoring: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{monitoring}/jsz", timeout=10) as reply:
        jetstream = json.load(reply)
    return {
        "phase": label,
        "rss_mib": round(nats.memory_info().rss / 2**20, 1),
        "jetstream_bytes": jetstream.get("bytes", 0),
        "jetstream_messages": jetstream.get("messages", 0),
    }


def markdown(settings: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Command: `{settings['command']}`",
        "",
        "# What the graph's NATS holds: replica sync against stored responses",
        "",
        f"{settings['host_cpu']}, Python {settings['python']}, {settings['date']}, code {settings['code']}. "
        f"{settings['graph']}. Each phase: {REQUESTS} requests, {CONCURRENCY} at a time, {TOKENS} output tokens. "
        "Read after each phase: NATS's resident memory, and JetStream's stored bytes and messages (its "
        "monitoring port's /jsz; the response store is the graph's only JetStream data).",
        "",
        "| after | NATS RSS MiB | JetStream bytes | JetStream messages |",
        "|---|---:|---:|---:|",
        *(
            f"| {row['phase']} | {row['rss_mib']} | {row['jetstream_bytes']:,} | {row['jetstream_messages']:,} |"
            for row in rows
        ),
    ]
    stored = [row for row in rows if row["phase"].startswith("stored")]
    before = rows[len(rows) - len(stored) - 2]
    per_record_kib = (stored[-1]["rss_mib"] - before["rss_mib"]) * 1024 / (REQUESTS * len(stored))
    per_record_bytes = (stored[-1]["jetstream_bytes"] - before["jetstream_bytes"]) / (REQUESTS * len(stored))
    lines += [
        "",
        f"Chat through the synced frontends, {3 * REQUESTS:,} requests: NATS's memory moved "
        f"{rows[2]['rss_mib'] - rows[0]['rss_mib']:+.1f} MiB from the first round's end to the third's. "
        f"Stored responses: about {per_record_kib:.2f} KiB of NATS memory and {per_record_bytes:.0f} bytes of "
        "JetStream storage each, kept for the graph's retention (`gateway.responses.retention_s`, 30 days by "
        "default) up to `gateway.responses.max_mib`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    settings = {
        "command": COMMAND,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": f"{platform.processor() or platform.machine()} ({psutil.cpu_count()} cores)",
        "python": platform.python_version(),
        "code": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip(),
        "graph": f"graphs/disagg.yaml on Dynamo's mocker at {TIME_SCALE:g}x its modelled step time, its endpoint "
        "one gateway process and two Dynamo frontends synced over NATS (`router: kv`)",
    }
    frontend = {"replicas": 2, "router": "kv"}
    contents = yaml.safe_load((REPO / "graphs" / "disagg.yaml").read_text())
    contents["frontend"] = {**contents.get("frontend", {}), **frontend}
    contents["gateway"] = {**contents.get("gateway", {}), "processes": 1}
    graph = shipped_on_free_ports(REPO / "graphs" / "disagg.yaml", contents)
    with tempfile.TemporaryDirectory(prefix="nats-memory-") as scratch:
        folder = Path(scratch)
        (folder / "graph.yaml").write_text(yaml.safe_dump(graph))
        monitoring = f"http://127.0.0.1:{graph['infrastructure']['nats']['monitoring_port']}"
        with served_graph(folder / "graph.yaml", folder / "run", engine="mocker", time_scale=TIME_SCALE) as state:
            nats = psutil.Process(next(p.pid for p in state.processes if p.kind == "nats"))
            base, model = state.endpoint, state.served_name
            rows = []
            for label, path, body in PHASES:
                asyncio.run(send(base, model, path, body))
                rows.append(reading(label, nats, monitoring))
                print(rows[-1], flush=True)
    (HERE / "results.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(settings, rows))
    print((HERE / "results.md").read_text())


if __name__ == "__main__":
    main()
