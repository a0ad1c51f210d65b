"""Snapshots of the overview and disaggregation dashboards under load, for the README.

Serves graphs/disagg.yaml on the mocker (on free ports, as every benchmark serves a graph:
dynamo_oss.bench), streams chat completions from 8 concurrent users for LOAD_S seconds through the official
openai client, draws both dashboards with `dynamo dashboard snapshot`, and stops the graph.

    uv run python benchmarks/dashboards/snapshot_under_load.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

import yaml

from dynamo_oss.bench.ports import shipped_on_free_ports
from dynamo_oss.bench.served import served_graph

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "deploy" / "grafana" / "snapshots"
LOAD_S, USERS = 120, 8


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="dashboard-load-"))
    dynamo = [sys.executable, "-m", "dynamo_oss.cli"]
    graph = folder / "graph.yaml"
    graph.write_text(yaml.safe_dump(shipped_on_free_ports(REPO / "graphs" / "disagg.yaml"), sort_keys=False))
    run_dir = folder / "run"
    with served_graph(graph, run_dir, engine="mocker", time_scale=1.0) as state:
        stop_at = time.monotonic() + LOAD_S

        def user(seed: int) -> None:
            client = openai.OpenAI(base_url=state.endpoint, api_key="-", max_retries=0, timeout=120)
            while time.monotonic() < stop_at:
                stream = client.chat.completions.create(
                    model=state.served_name,
                    messages=[{"role": "user", "content": f"Question {seed}: why?"}],
                    max_tokens=200,
                    stream=True,
                )
                for _ in stream:
                    pass

        threads = [threading.Thread(target=user, args=(i,)) for i in range(USERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        subprocess.run(
            [
                *dynamo,
                "dashboard",
                "snapshot",
                str(run_dir),
                "--out",
                str(OUT),
                "--minutes",
                "3",
                "--only",
                "overview",
                "--only",
                "disaggregation",
            ],
            cwd=REPO,
            check=True,
        )


if __name__ == "__main__":
    main()
