"""Snapshots of the overview and disaggregation dashboards under load, for the README.

Serves graphs/disagg.yaml on the mocker (on its shipped ports: run it where nothing else uses
them), streams chat completions from 8 concurrent users for LOAD_S seconds through the official
openai client, draws both dashboards with `dynamo dashboard snapshot`, and stops the graph.

    uv run python benchmarks/dashboards/snapshot_under_load.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

from dynamo_oss.launch.state import RunState

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "deploy" / "grafana" / "snapshots"
LOAD_S, USERS, READY_TIMEOUT_S = 120, 8, 120


def main() -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="dashboard-load-"))
    dynamo = [sys.executable, "-m", "dynamo_oss.cli"]
    serve = subprocess.Popen([*dynamo, "serve", "graphs/disagg.yaml", "--engine", "mocker", "--run-dir", str(run_dir)],
                             cwd=REPO, stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (run_dir / "state.json").exists() or not RunState.read(run_dir).ready:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the graph did not come up; see {run_dir / 'logs'}")
            time.sleep(0.5)  # polling the state file against the deadline above
        state = RunState.read(run_dir)
        stop_at = time.monotonic() + LOAD_S

        def user(seed: int) -> None:
            client = openai.OpenAI(base_url=state.endpoint, api_key="-", max_retries=0, timeout=120)
            while time.monotonic() < stop_at:
                stream = client.chat.completions.create(
                    model=state.served_name, messages=[{"role": "user", "content": f"Question {seed}: why?"}],
                    max_tokens=200, stream=True,
                )  # fmt: skip
                for _ in stream:
                    pass

        threads = [threading.Thread(target=user, args=(i,)) for i in range(USERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        subprocess.run([*dynamo, "dashboard", "snapshot", str(run_dir), "--out", str(OUT), "--minutes", "3",
                        "--only", "overview", "--only", "disaggregation"], cwd=REPO, check=True)  # fmt: skip
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(120)


if __name__ == "__main__":
    main()
