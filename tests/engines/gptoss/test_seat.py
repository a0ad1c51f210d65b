"""The gptoss engine as a graph names it: `dynamo check` reads its engine file into the pool's shape and
refuses a bad one naming the key; the plan renders its workers' command lines; `dynamo serve` refuses it
at once on a host without GPUs, starting nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynamo_oss.cli.check import plan_graph
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.planner.settings import planner_config
from tests.support.commands import REPO, dynamo, run_dynamo

STUDY = REPO / "graphs" / "gptoss"
AGG_FILE = STUDY / "engines" / "gpt-oss-120b-h200-agg.yaml"


def one_pool_graph(folder: Path, engine_args: dict | None, **pool: object) -> Path:
    """An aggregated gptoss graph of one worker whose engine file holds `engine_args` (None: no file)."""
    section: dict = {"workers": 1, "engine": "gptoss", **pool}
    if engine_args is not None:
        (folder / "engine.yaml").write_text(yaml.safe_dump(engine_args))
        section["engine_args"] = "engine.yaml"
    graph = {
        "name": "gptoss-test",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": 2},
        "pools": {"agg": section},
    }
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


@pytest.mark.parametrize(
    ("graph", "roles"), [("agg-h200x2.yaml", ["agg", "agg"]), ("disagg-h200x2.yaml", ["prefill", "decode"])]
)
def test_the_study_graphs_plan_gptoss_workers_from_their_engine_files(
    graph: str, roles: list[str], tmp_path: Path
) -> None:
    deployment, plan = plan_graph(STUDY / graph, tmp_path)
    workers = plan.workers()
    assert [worker.role for worker in workers] == roles
    assert [worker.gpus for worker in workers] == [[0], [1]]
    for worker in workers:
        pool = next(pool for pool in deployment.pools if pool.role == worker.role)
        argv = worker.argv
        assert worker.engine == "gptoss" and argv[1:3] == ["-m", "dynamo_oss.engines.gptoss.worker"]
        assert Path(argv[argv.index("--engine-args") + 1]) == pool.engine_args
        assert argv[argv.index("--disaggregation-mode") + 1] == worker.role
        assert argv[argv.index("--endpoint") + 1] == f"dyn://{deployment.namespace}.{pool.component}.generate"
        assert "--checkpoint" not in argv  # a built-in model without model.path: random weights of its shapes
        written = yaml.safe_load(pool.engine_args.read_text())
        assert pool.shape.max_batch_size == written["max_batch_size"]
        assert pool.shape.max_num_tokens == written["max_num_tokens"]
        assert pool.shape.kv_block_size == written["kv_cache_config"]["tokens_per_block"]


def test_a_local_checkout_is_the_workers_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "checkout").mkdir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / "checkout" / name).write_text("{}")
    path = one_pool_graph(tmp_path, yaml.safe_load(AGG_FILE.read_text()))
    graph = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**graph, "model": {"name": "gpt-oss-20b", "path": "checkout"}}))
    _, plan = plan_graph(path, tmp_path)
    (worker,) = plan.workers()
    assert worker.argv[worker.argv.index("--checkpoint") + 1] == str(tmp_path / "checkout")


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"max_batch_sizes": 8}, "max_batch_sizes: Extra inputs are not permitted"),
        (
            {"tensor_parallel_size": 2},
            "tensor_parallel_size: Value error, the gptoss engine runs each worker on one GPU",
        ),
        ({"max_num_tokens": 0}, "max_num_tokens: Input should be greater than or equal to 1"),
        ({"kv_cache_config": {"dtype": "fp8"}}, "kv_cache_config.dtype: Input should be 'bf16'"),
        ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}}, "kv_cache_config.free_gpu_memory_fraction"),
        ({"cuda_graph_config": {"batch_sizes": [8, 4]}}, "cuda_graph_config.batch_sizes: Value error, must be"),
        ({"max_batch_size": 64}, "Value error, cuda_graph_config.batch_sizes goes up to 256, past max_batch_size 64"),
        ({"handoff_config": {"hold_timeout_s": "60"}}, "handoff_config.hold_timeout_s: Input should be a valid number"),
    ],
)
def test_a_bad_engine_file_is_refused_naming_the_key(change: dict, names: str, tmp_path: Path) -> None:
    path = one_pool_graph(tmp_path, {**yaml.safe_load(AGG_FILE.read_text()), **change})
    code, out, err = dynamo("check", str(path))
    assert code == 2, out
    assert f"pools.agg.engine_args: engine.yaml: {names}" in err


def test_a_gptoss_pool_needs_an_engine_file_and_one_gpu_a_worker(tmp_path: Path) -> None:
    code, _, err = dynamo("check", str(one_pool_graph(tmp_path, None)))
    assert code == 2 and "pools.agg.engine_args: engine gptoss needs engine_args" in err
    code, _, err = dynamo("check", str(one_pool_graph(tmp_path, {}, gpus_per_worker=2)))
    assert code == 2 and "pools.agg.gpus_per_worker: is 2 but engine.yaml gives each worker 1 GPUs" in err


def test_serve_refuses_gptoss_at_once_on_a_host_without_gpus() -> None:
    result = run_dynamo("serve", "graphs/gptoss/disagg-h200x2.yaml", timeout_s=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot serve with engine gptoss on this host: the graph needs 2 NVIDIA GPUs and this host has 0" in (
        result.stderr
    )
    assert "PyTorch is not installed (import torch fails)" in result.stderr
    assert "dynamo serve graphs/gptoss/disagg-h200x2.yaml --engine mocker" in result.stderr
    assert "serving" not in result.stdout  # nothing was started
    assert "Traceback" not in result.stderr


def test_the_mocker_stands_in_for_gptoss_with_its_engine_file_s_shape(tmp_path: Path) -> None:
    _, plan = plan_graph(STUDY / "disagg-h200x2.yaml", tmp_path, engine_override="mocker")
    prefill, decode = plan.workers()
    assert prefill.engine == decode.engine == "mocker"
    for worker, batch, budget in [(prefill, "32", "20000"), (decode, "256", "8192")]:
        argv = worker.argv
        assert argv[argv.index("--max-num-seqs") + 1] == batch
        assert argv[argv.index("--max-num-batched-tokens") + 1] == budget
        assert argv[argv.index("--block-size") + 1] == "32"


def test_dynamo_s_planner_takes_the_configuration_of_autoscaled_gptoss_pools(
    tmp_path: Path, dynamo_planner_config: type
) -> None:
    graph = yaml.safe_load((STUDY / "disagg-h200x2.yaml").read_text())
    for pool in graph["pools"].values():
        del pool["workers"]
        pool["autoscale"] = {"min": 1, "max": 1}
        pool["engine_args"] = str(STUDY / pool["engine_args"])
    graph["planner"] = {"mode": "load", "ttft_ms": 2000, "itl_ms": 30}
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    config = planner_config(build_deployment(load_graph(path)))
    assert config is not None and config["backend"] == "trtllm"  # the component names it knows gptoss's by
    dynamo_planner_config.model_validate(config)
