"""A graph served for a benchmark: `dynamo serve` in a subprocess of its own, ready before the
first request, drained and stopped afterwards whatever happened (Ctrl-C or SIGTERM included).

A benchmark measures the deployment, not its API keys, and its clients present none: it serves a
copy of the graph (`measured_copy`) whose endpoint is on loopback and asks no key (a key costs the
gateway one digest a request)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.catalog.names import EngineName
from dynamo_oss.deployment.model import Deployment
from dynamo_oss.deployment.processes import LOOPBACK
from dynamo_oss.launch.prepare import model_files
from dynamo_oss.launch.state import STATE_FILE, RunState

# `dynamo serve` gives up by itself after the engine's ready timeout (up to 1800 s for trtllm) and exits.
READY_TIMEOUT_S = 2000.0
STOP_TIMEOUT_S = 60.0
SERVE_LOG = "serve.log"


def sweep_fields(deployment: Deployment) -> dict[str, str | int]:
    """What a graph fixes in a sweep's parameters: the model name requests carry, aiperf's tokenizer
    (the model's own folder) and the GPUs tok/s/GPU divides by (every pool's workers at start)."""
    return {
        "model": deployment.model.served_name,
        "tokenizer": str(model_files(deployment)),
        "gpus": sum(pool.workers * pool.gpus_per_worker for pool in deployment.pools),
    }


def measured_copy(graph_file: Path, keyed: bool = False) -> dict[str, Any]:
    """A graph file's contents as a benchmark serves them: the endpoint on loopback, without API keys
    unless `keyed` (a benchmark of tenants), the engine files named by absolute path, so the copy
    serves from anywhere as the original would."""
    graph = yaml.safe_load(graph_file.read_text())
    if not keyed:
        (graph.get("gateway") or {}).pop("auth", None)
    graph["frontend"] = {**(graph.get("frontend") or {}), "host": LOOPBACK}
    here = graph_file.parent
    for pool in graph["pools"].values():
        if "engine_args" in pool:
            pool["engine_args"] = str((here / pool["engine_args"]).resolve())
    model = graph.get("model")
    if isinstance(model, dict) and model.get("path"):
        model["path"] = str((here / model["path"]).resolve())
    auth = (graph.get("gateway") or {}).get("auth")
    if isinstance(auth, dict) and auth.get("keys_file"):
        auth["keys_file"] = str((here / auth["keys_file"]).resolve())
    return graph


@contextmanager
def served_graph(
    graph: Path, run_dir: Path, *, engine: EngineName | None, time_scale: float, keyed: bool = False
) -> Iterator[RunState]:
    """Serve `graph` (its measured_copy) with its logs and state in `run_dir`; yields the state once the
    model is served."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    copy = run_dir.parent / f"{run_dir.name}-graph.yaml"
    copy.write_text(yaml.safe_dump(measured_copy(graph, keyed), sort_keys=False))
    argv = [sys.executable, "-m", "dynamo_oss.cli", "serve", str(copy), "--run-dir", str(run_dir)]
    if engine:
        argv += ["--engine", engine]
    if time_scale != 1.0:
        argv += ["--mocker-time-scale", f"{time_scale:g}"]
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / SERVE_LOG
    with log.open("w") as output:
        # A session of its own: Ctrl-C reaches the benchmark, which then stops the graph in order.
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    # SIGTERM (a `kill`, a CI timeout) stops the benchmark as Ctrl-C does, so the graph is stopped too.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if on_main_thread else None
    try:
        yield _wait_ready(process, run_dir, log)
    finally:
        _stop(process)
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait_ready(process: subprocess.Popen, run_dir: Path, log: Path) -> RunState:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log.read_text().splitlines()[-15:])
            raise UserError(f"`dynamo serve` exited ({process.returncode}) before the graph was ready:\n{tail}")
        if (run_dir / STATE_FILE).exists():
            state = RunState.read(run_dir)
            if state.ready:
                return state
        time.sleep(0.2)
    raise UserError(f"the graph was not ready within {READY_TIMEOUT_S:.0f} s; see {log} and {run_dir / 'logs'}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM, which `dynamo serve` answers by draining and stopping every process it started;
    the whole session is killed if that takes longer than STOP_TIMEOUT_S."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
