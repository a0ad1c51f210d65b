"""CPU-seconds each process of the README's graph spends serving streams on the mocker: where the
suite's and the benchmarks' CPU goes once a graph is up (issue 26: the suite is CPU-bound on two cores).

How: serve graphs/disagg.yaml on Dynamo's mocker, on free ports, stepping 20x faster than modelled;
once it is served and its processes have settled (Dynamo's planner imports its forecasting libraries
after the graph is ready), read every process's user + system CPU time from /proc (psutil), send STREAMS
streaming chat requests of exactly TOKENS tokens each at once through the official openai client
(these are each mocker worker's first requests), and read the CPU times again. Writes results.md
beside this file; about a minute here:

    uv run python benchmarks/mocker_cpu/run.py
"""

from __future__ import annotations

import asyncio
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import openai
import psutil

from benchmarks.startup_cpu.run import readme_graph
from dynamo_oss.bench.served import served_graph

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/mocker_cpu/run.py"
STREAMS, TOKENS, TIME_SCALE = 40, 400, 0.05
SETTLED_CPU_S, SETTLE_LOOK_S, SETTLE_TIMEOUT_S = 0.1, 2.0, 90.0  # all processes together, per look


async def _streams(endpoint: str, model: str) -> list[int]:
    """Output tokens of each stream, from its usage."""
    client = openai.AsyncOpenAI(base_url=endpoint, api_key="unused", max_retries=0, timeout=300)

    async def one(index: int) -> int:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Question {index}: why disaggregate?"}],
            max_tokens=TOKENS,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "min_tokens": TOKENS},
        )
        return next(iter([chunk.usage.completion_tokens async for chunk in stream if chunk.usage]))

    return list(await asyncio.gather(*(one(i) for i in range(STREAMS))))


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _settled(processes: dict[str, psutil.Process]) -> None:
    """Wait until the graph's processes together use less than SETTLED_CPU_S per SETTLE_LOOK_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = sum(map(_cpu, processes.values()))
    while time.monotonic() < deadline:
        time.sleep(SETTLE_LOOK_S)  # the span the CPU is measured over, not a wait for an event
        now = sum(map(_cpu, processes.values()))
        if now - last < SETTLED_CPU_S:
            return
        last = now
    raise SystemExit(f"the graph's processes did not settle within {SETTLE_TIMEOUT_S:.0f} s")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mocker-cpu-") as tmp:
        folder = Path(tmp)
        with served_graph(readme_graph(folder), folder / "run", engine="mocker", time_scale=TIME_SCALE) as state:
            processes = {p.name: psutil.Process(p.pid) for p in state.processes if p.pid}
            _settled(processes)
            before = {name: _cpu(process) for name, process in processes.items()}
            started = time.monotonic()
            tokens = asyncio.run(_streams(state.endpoint, state.served_name))
            took_s = time.monotonic() - started
            spent = {name: _cpu(process) - before[name] for name, process in processes.items()}
    total = sum(tokens)
    lines = [
        "# CPU-seconds of the README's graph serving streams on the mocker",
        "",
        f"Command: `{COMMAND}`. Run {datetime.now(timezone.utc):%Y-%m-%d} on {platform.machine()} with "
        f"{psutil.cpu_count()} cores. {STREAMS} streaming chat requests of exactly {TOKENS} tokens each, sent at "
        f"once to a freshly served graph once its processes settled (each worker's first requests), the mocker "
        f"stepping {1 / TIME_SCALE:g}x faster than modelled: {total} output tokens (from the streams' usage) in "
        f"{took_s:.1f} s. CPU is user + system time from /proc, read before and after the streams.",
        "",
        "| process | CPU-s | µs per output token |",
        "|---|---:|---:|",
        *[f"| `{name}` | {cpu:.2f} | {cpu / total * 1e6:.0f} |" for name, cpu in spent.items()],
        f"| all | {sum(spent.values()):.2f} | {sum(spent.values()) / total * 1e6:.0f} |",
        "",
    ]
    (HERE / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
