"""The launcher's small decisions, in-process: which log lines reach the terminal, where runs live."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from dynamo_oss.deployment.processes import ProcessPlan
from dynamo_oss.launch.process import ManagedProcess
from dynamo_oss.launch.run_dirs import new_run_dir, runs_root
from dynamo_oss.launch.terminal import for_terminal


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("2026-11-22T23:29:14.540970Z  INFO dynamo_llm::http::service: request served", False),
        ("2026-11-22T23:29:14.540970Z DEBUG dynamo_runtime: lease renewed", False),
        ("[16361] 2026/11/22 23:29:10.152179 [INF] Starting JetStream", False),
        ("2026-11-22 23:29:14,540 INFO dynamo_oss.gateway: listening", False),
        (
            "2026-11-22T23:29:14.541008Z  WARN dynamo_kv_router::sequences::multi_worker: Adding worker WorkerWithDpRank",
            False,
        ),
        ("2026-11-22T23:29:16.378029Z  WARN mm_routing: /models/x is not supported for MM-aware KV routing", False),
        (
            "2026-11-26T02:15:12.623160Z  WARN http-request: dynamo_llm::migration: Guided-decoding request: migration "
            "disabled — FSM state is not transferable (applies to all backends) method=POST uri=/v1/chat/completions",
            False,
        ),
        (
            "2026-11-26T02:18:59.844608Z  WARN http-request:completions:completions_single: dynamo_llm::migration: "
            "Guided-decoding request: migration disabled — FSM state is not transferable (applies to all backends)",
            False,
        ),
        (
            "2026-11-26T08:51:28.315262Z  WARN traffic_metrics.get_avg_request_count: No prometheus metric data "
            "available for dynamo_frontend_requests_started_total with model openai/gpt-oss-120b",
            False,
        ),
        ("2026-11-22T23:29:14.540970Z  WARN dynamo_llm::discovery: worker lease lost", True),
        ("2026-11-22T23:29:14.540970Z ERROR dynamo_llm::engine: stream failed", True),
        ("[16361] 2026/11/22 23:29:10.152179 [ERR] JetStream store failed", True),
        ("Traceback (most recent call last):", True),
        ("[dynamo-oss] exited with status 1; restarting in 1 s (restart 1)", True),
    ],
)
def test_the_terminal_gets_warnings_errors_and_the_unknown(line: str, shown: bool) -> None:
    assert for_terminal(line) is shown


def _finish(run: Path, stopped: bool, pid: int) -> None:
    state = {
        "graph": "g",
        "endpoint": "http://x/v1",
        "served_name": "m",
        "supervisor_pid": pid,
        "ready": True,
        "stopped": stopped,
        "pools": [],
        "processes": [],
    }
    (run / "state.json").write_text(json.dumps(state))


def test_runs_are_kept_in_the_cache_and_the_oldest_finished_ones_pruned(tmp_path: Path) -> None:
    first = new_run_dir("graph", cache_root=tmp_path, keep=2)
    assert first.parent == runs_root(tmp_path) and first.name.startswith("graph-") and first.is_dir()
    _finish(first, stopped=True, pid=os.getpid())
    live = new_run_dir("graph", cache_root=tmp_path, keep=2)
    _finish(live, stopped=False, pid=os.getpid())  # this process is its supervisor: alive
    os.utime(first, (1, 1))
    os.utime(live, (2, 2))
    third = new_run_dir("graph", cache_root=tmp_path, keep=2)
    assert not (first / "state.json").exists()  # finished, oldest: pruned (its name may be reused)
    assert (live / "state.json").exists() and third != live  # a live run is never touched
    assert sorted(runs_root(tmp_path).iterdir()) == sorted({live, third})


def test_etcds_auth_token_warning_is_routine() -> None:
    line = '{"level":"warn","ts":"2026-11-23T00:21:30.407Z","msg":"simple token is not cryptographically signed"}'
    assert not for_terminal(line)
    assert for_terminal('{"level":"warn","msg":"slow fdatasync"}')


def test_a_restart_waits_out_a_secret_file_that_cannot_be_read(tmp_path: Path) -> None:
    """A TLS file mid-rotation when a process restarts: the launcher says why and tries again,
    instead of leaving the process down for good."""
    secret = tmp_path / "client.key"
    plan = ProcessPlan(
        name="worker-0",
        kind="worker",
        env={},
        env_from_files={"SECRET": secret},
        argv=[sys.executable, "-c", "import os; print('has', len(os.environ['SECRET']))"],
    )
    process = ManagedProcess(plan, tmp_path, name_width=8)

    async def restart() -> bool:
        stopping = asyncio.Event()
        restarted = asyncio.create_task(process.restart_after(0.05, 0.2, stopping))
        deadline = time.monotonic() + 30
        while "cannot start" not in (process.log_path.read_text() if process.log_path.exists() else ""):
            assert time.monotonic() < deadline and not restarted.done(), "no word of the unreadable file"
            await asyncio.sleep(0.05)  # polling the log, with the deadline above
        secret.write_text("PEM")
        started = await asyncio.wait_for(restarted, 30)
        assert await process.wait() == 0
        return started

    assert asyncio.run(restart())
    log = process.log_path.read_text()
    assert f"cannot start: [Errno 2] No such file or directory: '{secret}'" in log and "has 3" in log


def test_a_restart_gives_up_when_the_graph_stops(tmp_path: Path) -> None:
    plan = ProcessPlan(name="worker-0", kind="worker", env={}, argv=[sys.executable, "-c", "pass"])
    process = ManagedProcess(plan, tmp_path, name_width=8)

    async def restart() -> bool:
        stopping = asyncio.Event()
        stopping.set()
        return await process.restart_after(30, 60, stopping)

    assert asyncio.run(restart()) is False and process.process is None
