"""Run a prefill and a decode worker as two processes and collect what decode measured.

Why separate processes: that is how prefill and decode workers are deployed, and transports can
behave differently inside one process (the project's facts measured NIXL at 0.4 GB/s between two
GPUs with both agents in one process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu.kv_handoff import rendezvous
from benchmarks.gpu.kv_handoff.plan import Plan
from benchmarks.gpu.kv_handoff.rendezvous import DECODE, PREFILL, TIMINGS, VERIFIED

REPO = Path(__file__).resolve().parents[3]


class WorkerFailed(RuntimeError):
    """A worker exited with an error or outlived the deadline; the message holds both logs."""


def run_pair(plan: Plan, folder: Path, devices: tuple[str, str], env: dict[str, str], timeout_s: float) -> list[dict]:
    """Per request: the initiator's timings and whether decode found every byte intact.
    Both workers are ended whatever happens."""
    folder.mkdir(parents=True, exist_ok=True)
    plan.save(folder / "plan.json")
    workers: dict[str, subprocess.Popen] = {}
    try:
        for role, device in zip((PREFILL, DECODE), devices):
            with (folder / f"{role}.log").open("w") as log:
                workers[role] = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.gpu.kv_handoff.worker",
                        role,
                        "--folder",
                        str(folder),
                        "--device",
                        device,
                    ],
                    cwd=REPO,
                    env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        deadline = time.monotonic() + timeout_s
        while any(worker.poll() is None for worker in workers.values()):
            failed = [role for role, worker in workers.items() if worker.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise WorkerFailed(_report(folder, failed or ["deadline passed"]))
            time.sleep(0.05)
        if any(worker.returncode != 0 for worker in workers.values()):
            raise WorkerFailed(_report(folder, [role for role, w in workers.items() if w.returncode != 0]))
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    timings = rendezvous.wait_for(folder, TIMINGS, 0)["results"]
    intact = rendezvous.wait_for(folder, VERIFIED, 0)["intact"]
    return [{**timing, "intact": ok} for timing, ok in zip(timings, intact)]


def _report(folder: Path, reasons: list[str]) -> str:
    logs = "\n".join(
        f"--- {role}.log ---\n{(folder / f'{role}.log').read_text()[-3000:]}" for role in (PREFILL, DECODE)
    )
    return f"worker failure ({', '.join(reasons)})\n{logs}"
