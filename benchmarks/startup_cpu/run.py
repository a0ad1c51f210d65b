"""CPU-seconds each process of the README's graph spends to start, on the mocker: where the test
suite's time goes (issue 26: the suite is CPU-bound on two cores, and most of its CPU is graph
start-ups).

How: serve graphs/disagg.yaml on Dynamo's mocker, on free ports, wait until the model is served,
then read every process's user + system CPU time from /proc (psutil), and, for the processes that
run Dynamo's Rust runtime, how much of it their tokio threads spent; then, with no request sent,
the share of a core each process keeps using over the next IDLE_S seconds (a graph a test module
shares stays up, idle, while other modules run). Also loads the model folder's
`tokenizer.json` with HF tokenizers in this process, a load Dynamo's frontend pays twice (its
multimodal-routing probe loads its own copy). Writes results.md beside this file; under a minute here:

    uv run python benchmarks/startup_cpu/run.py
"""

from __future__ import annotations

import collections
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml
from tokenizers import Tokenizer

from dynamo_oss.assets import model_folder
from dynamo_oss.bench.ports import shipped_on_free_ports
from dynamo_oss.bench.served import served_graph
from dynamo_oss.catalog.models import GPT_OSS_120B

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/startup_cpu/run.py"
IDLE_S = 30.0


def readme_graph(folder: Path) -> Path:
    """graphs/disagg.yaml on free ports, written into `folder`."""
    graph = folder / "disagg.yaml"
    graph.write_text(yaml.safe_dump(shipped_on_free_ports(HERE.parent.parent / "graphs" / "disagg.yaml")))
    return graph


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="startup-cpu-") as tmp:
        folder = Path(tmp)
        started = time.monotonic()
        with served_graph(readme_graph(folder), folder / "run", engine="mocker", time_scale=1.0) as state:
            ready_s = time.monotonic() - started
            named = {"dynamo serve": state.supervisor_pid} | {p.name: p.pid for p in state.processes if p.pid}
            processes = {name: psutil.Process(pid) for name, pid in named.items()}
            rows = [_row(name, process) for name, process in processes.items()]
            time.sleep(IDLE_S)  # measuring idle use over a span, not waiting for anything
            idle = {
                name: (_cpu(process) - cpu) / IDLE_S
                for (name, cpu, _), process in zip(rows, processes.values(), strict=True)
            }
    before = time.process_time()
    Tokenizer.from_file(str(model_folder(GPT_OSS_120B) / "tokenizer.json"))
    tokenizer_s = time.process_time() - before
    lines = [
        "# CPU-seconds to start the README's graph on the mocker",
        "",
        f"Command: `{COMMAND}`. Run {datetime.now(timezone.utc):%Y-%m-%d} on {platform.machine()} with "
        f"{psutil.cpu_count()} cores; the graph was served {ready_s:.1f} s after `dynamo serve` started. CPU is "
        "user + system time from /proc when the model was first served; tokio is the part of it in the "
        f"threads of Dynamo's Rust runtime. Idle: the share of a core each process used over the {IDLE_S:g} s "
        "after that, with no request sent.",
        "",
        "| process | CPU-s to start | of it in tokio threads | idle, share of a core |",
        "|---|---:|---:|---:|",
        *[f"| `{name}` | {cpu:.2f} | {tokio:.2f} | {idle[name]:.1%} |" for name, cpu, tokio in rows],
        f"| all | {sum(cpu for _, cpu, _ in rows):.1f} | | {sum(idle.values()):.1%} |",
        "",
        f"Loading gpt-oss's `tokenizer.json` with HF tokenizers, once, in this process: {tokenizer_s:.2f} CPU-s.",
        "",
    ]
    (HERE / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _row(name: str, process: psutil.Process) -> tuple[str, float, float]:
    """(the process's name in the graph, its CPU-seconds, those of its tokio threads)."""
    tokio: collections.Counter[str] = collections.Counter()
    for thread in process.threads():
        comm = Path(f"/proc/{process.pid}/task/{thread.id}/comm")
        thread_name = comm.read_text().strip() if comm.exists() else ""
        tokio[thread_name.startswith("tokio")] += thread.user_time + thread.system_time
    return name, _cpu(process), tokio[True]


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


if __name__ == "__main__":
    main()
