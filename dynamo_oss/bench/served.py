"""A graph served for a benchmark or a test: `dynamo serve` in a subprocess of its own, ready before
the first request, drained and stopped afterwards whatever happened (Ctrl-C or SIGTERM included).
The one way the project serves a graph it then measures: tests/support/served.py builds on it.

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
from collections.abc import Iterator, Mapping, Sequence
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


def measured_copy(graph_file: Path, keyed: bool = False, contents: dict[str, Any] | None = None) -> dict[str, Any]:
    """A graph file's contents (or `contents`, read from it and changed) as a benchmark serves them: the
    endpoint on loopback, without API keys unless `keyed` (a benchmark of tenants), the engine files
    named by absolute path, so the copy serves from anywhere as the original would."""
    graph = yaml.safe_load(graph_file.read_text()) if contents is None else contents
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


def start_serving(
    graph: Path, run_dir: Path, arguments: Sequence[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    """`dynamo serve GRAPH --run-dir RUN_DIR ARGUMENTS` in a session of its own (Ctrl-C reaches the caller,
    which then stops the graph in order), its output in `log`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "dynamo_oss.cli", "serve", str(graph), "--run-dir", str(run_dir), *arguments]
    with log.open("w") as output:
        return subprocess.Popen(
            argv, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=None if env is None else {**env}
        )


def wait_ready(process: subprocess.Popen, run_dir: Path, log: Path, timeout_s: float = READY_TIMEOUT_S) -> RunState:
    """The graph's state once its model is served; UserError, with the end of `log`, if serve exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log.read_text().splitlines()[-15:])
            raise UserError(f"`dynamo serve` exited ({process.returncode}) before the graph was ready:\n{tail}")
        if (run_dir / STATE_FILE).exists():
            state = RunState.read(run_dir)
            if state.ready:
                return state
        time.sleep(0.2)  # polling the state file against the deadline above
    raise UserError(f"the graph was not ready within {timeout_s:.0f} s; see {log} and {run_dir / 'logs'}")


def stop_serving(process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM, which `dynamo serve` answers by draining and stopping every process it started; the
    whole session is killed if that takes longer than `timeout_s`. Its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


@contextmanager
def served_graph(
    graph: Path, run_dir: Path, *, engine: EngineName | None, time_scale: float, keyed: bool = False
) -> Iterator[RunState]:
    """Serve `graph` (its measured_copy) with its logs and state in `run_dir`; yields the state once the
    model is served."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    copy = run_dir.parent / f"{run_dir.name}-graph.yaml"
    copy.write_text(yaml.safe_dump(measured_copy(graph, keyed), sort_keys=False))
    arguments = ["--engine", engine] if engine else []
    if time_scale != 1.0:
        arguments += ["--mocker-time-scale", f"{time_scale:g}"]
    log = run_dir.parent / SERVE_LOG
    process = start_serving(copy, run_dir, arguments, log)
    # SIGTERM (a `kill`, a CI timeout) stops the benchmark as Ctrl-C does, so the graph is stopped too.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if on_main_thread else None
    try:
        yield wait_ready(process, run_dir, log)
    finally:
        stop_serving(process)
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
