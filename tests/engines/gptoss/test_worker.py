"""The gptoss worker process: it parses the command lines the plan renders (Dynamo's runtime options and
its own), and on a host that cannot run it, it refuses at once, saying why, before it creates a runtime.

What is not tested here, because it needs the GPU model runner, which needs a GPU, and the project's rule
allows no stand-in model runner: serving a request end to end (benchmarks/gpu/serving runs it on an H200)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dynamo.common.constants import DisaggregationMode
from dynamo_oss.cli.check import plan_graph
from dynamo_oss.engines.gptoss import engine
from dynamo_oss.engines.gptoss.engine import ENGINE
from dynamo_oss.engines.gptoss.worker import GptOssLlmEngine, parse_worker_args
from dynamo_oss.engines.host_gpus import visible_gpu_count
from tests.support.commands import REPO

STUDY = REPO / "graphs" / "gptoss"


@pytest.mark.parametrize("graph", ["agg-h200x2.yaml", "disagg-h200x2.yaml"])
def test_the_worker_parses_the_command_lines_the_plan_renders(graph: str, tmp_path: Path) -> None:
    deployment, plan = plan_graph(STUDY / graph, tmp_path)
    for worker in plan.workers():
        pool = next(pool for pool in deployment.pools if pool.role == worker.role)
        args = parse_worker_args(worker.argv[3:])
        assert (args.namespace, args.component, args.endpoint) == (deployment.namespace, pool.component, "generate")
        assert args.disaggregation_mode == DisaggregationMode(worker.role)
        assert Path(args.engine_args) == pool.engine_args and args.served_model_name == "openai/gpt-oss-120b"
        assert (Path(args.model_folder) / "config.json").is_file()
        assert args.custom_jinja_template == str(Path(args.model_folder) / "chat_template.jinja")
        assert (args.dyn_reasoning_parser, args.dyn_tool_call_parser) == ("gpt_oss", "harmony")
        assert args.checkpoint is None


def run_worker(graph: str, tmp_path: Path) -> subprocess.CompletedProcess:
    _, plan = plan_graph(STUDY / graph, tmp_path)
    worker = plan.workers()[0]
    env = {**os.environ, **worker.env}
    return subprocess.run([sys.executable, *worker.argv[1:]], capture_output=True, text=True, timeout=60, env=env)


def test_the_worker_refuses_at_once_on_a_host_without_gpus_and_says_why(tmp_path: Path) -> None:
    result = run_worker("agg-h200x2.yaml", tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("gptoss worker: cannot run on this host: ")
    assert "PyTorch is not installed (import torch fails)" in result.stderr
    if visible_gpu_count() == 0:
        assert "the graph needs 1 NVIDIA GPUs and this host has 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_prefill_worker_refuses_for_the_gpu_it_lacks_not_for_nixl_which_is_here(tmp_path: Path) -> None:
    result = run_worker("disagg-h200x2.yaml", tmp_path)  # its first worker: the prefill one
    assert result.returncode == 1
    assert result.stderr.startswith("gptoss worker: cannot run on this host: ")
    assert "PyTorch is not installed" in result.stderr and "NIXL" not in result.stderr
    assert "Traceback" not in result.stderr


def test_prefill_and_decode_workers_need_nixl_and_aggregated_ones_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "NIXL_MODULES", ("no_such_nixl._api",))
    both = ENGINE.unavailable_reason(0, frozenset({"prefill", "decode"}))
    assert both is not None
    assert "NIXL is not importable (no_such_nixl._api), and its decode and prefill workers hand KV over" in both
    assert "NIXL" not in (ENGINE.unavailable_reason(0, frozenset({"agg"})) or "")


def test_a_bad_engine_file_stops_the_worker_naming_the_key(tmp_path: Path) -> None:
    _, plan = plan_graph(STUDY / "agg-h200x2.yaml", tmp_path)
    argv = plan.workers()[0].argv[3:]
    bad = tmp_path / "engine.yaml"
    bad.write_text("max_batch_size: 0\n")
    argv[argv.index("--engine-args") + 1] = str(bad)
    with pytest.raises(SystemExit, match="engine.yaml: max_batch_size: Input should be greater than or equal to 1"):
        asyncio.run(GptOssLlmEngine.from_args(argv))
