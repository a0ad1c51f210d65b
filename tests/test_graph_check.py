"""`dynamo check`: shipped graphs validate; each broken graph gets an error naming its field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import run_dynamo, write_graph

SHIPPED = ["disagg.yaml", "agg.yaml", "disagg-h200.yaml", "agg-h200.yaml"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_graphs_are_valid(name: str) -> None:
    result = run_dynamo("check", f"graphs/{name}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid" in result.stdout


def test_check_prints_placement_and_command_lines() -> None:
    result = run_dynamo("check", "graphs/disagg.yaml", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    plan = __import__("json").loads(result.stdout)
    by_name = {p["name"]: p for p in plan["processes"]}
    assert set(by_name) == {"etcd", "nats", "frontend", "gateway", "prefill-0", "decode-0"}
    assert by_name["prefill-0"]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert by_name["decode-0"]["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    prefill_argv = by_name["prefill-0"]["argv"]
    assert prefill_argv[prefill_argv.index("--disaggregation-mode") + 1] == "prefill"
    assert "dynamo.trtllm" in prefill_argv
    assert by_name["gateway"]["ports"][0]["port"] == 8000  # clients meet the gateway
    assert by_name["frontend"]["ports"][0] == {"field": "frontend.dynamo_port", "host": "127.0.0.1", "port": 8001}


def test_check_with_mocker_swaps_engines_only() -> None:
    result = run_dynamo("check", "graphs/disagg.yaml", "--engine", "mocker", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    plan = __import__("json").loads(result.stdout)
    workers = [p for p in plan["processes"] if p["kind"] == "worker"]
    assert {p["engine"] for p in workers} == {"mocker"}
    assert all("dynamo_oss.launch.mocker_worker" in p["argv"] for p in workers)


def _broken(folder: Path, mutate) -> str:
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    mutate(graph)
    path.write_text(yaml.safe_dump(graph))
    result = run_dynamo("check", str(path))
    assert result.returncode == 1, result.stdout
    assert "nothing was started" in result.stdout
    return result.stdout


def test_unknown_key_is_named_with_suggestion(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["frontend"].update(prot=9000))
    assert "frontend.prot: unknown key" in out
    assert 'did you mean "port"' in out


def test_wrong_type_is_named(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["decode"].update(workers="two"))
    assert "pools.decode.workers:" in out
    assert "'two'" in out


def test_more_gpus_than_the_host_has(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["prefill"].update(workers=3))
    assert "hardware.gpus: the pools need 4 GPUs" in out


def test_unknown_engine_is_named(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["prefill"].update(engine="vllm"))
    assert "pools.prefill.engine:" in out
    assert "'trtllm' or 'mocker'" in out


def test_missing_engine_args_file_is_named(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["decode"].update(engine_args="engines/nope.yaml"))
    assert "pools.decode.engine_args: file not found" in out
    assert str(tmp_path / "engines" / "nope.yaml") in out


def test_trtllm_pool_needs_engine_args(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["decode"].update(engine="trtllm"))
    assert "pools.decode: engine trtllm needs engine_args" in out


def test_port_clash_inside_a_graph_names_both_fields(tmp_path: Path) -> None:
    def clash(graph: dict) -> None:
        graph["frontend"]["port"] = graph["infrastructure"]["nats"]["port"]

    out = _broken(tmp_path, clash)
    assert "frontend.port: port" in out
    assert "also used by infrastructure.nats.port" in out


def test_worker_system_ports_clash_across_pools(tmp_path: Path) -> None:
    def clash(graph: dict) -> None:
        graph["hardware"]["gpus"] = 4
        graph["pools"]["prefill"]["workers"] = 2
        graph["pools"]["decode"]["system_port"] = graph["pools"]["prefill"]["system_port"] + 1

    out = _broken(tmp_path, clash)
    assert "pools.decode.system_port (worker 0): port" in out
    assert "also used by pools.prefill.system_port (worker 1)" in out


def test_tensor_parallel_must_match_gpus_per_worker(tmp_path: Path) -> None:
    (tmp_path / "engine.yaml").write_text("tensor_parallel_size: 4\n")
    out = _broken(tmp_path, lambda g: g["pools"]["decode"].update(engine_args="engine.yaml"))
    assert "pools.decode.gpus_per_worker: is 1 but engine.yaml sets tensor_parallel_size 4" in out


def test_agg_beside_disagg_pools_is_refused(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"].update(agg={"engine": "mocker"}))
    assert "pools: Got agg beside prefill/decode" in out


def test_external_etcd_needs_endpoints(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["infrastructure"].update(etcd={"mode": "external"}))
    assert "infrastructure.etcd.endpoints: Field required" in out


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "graph.yaml"
    path.write_text("- just\n- a list\n")
    result = run_dynamo("check", str(path))
    assert result.returncode == 1
    assert "file: expected a mapping" in result.stdout


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    def two_problems(graph: dict) -> None:
        graph["frontend"]["port"] = 0
        graph["hardware"]["gpus"] = "eight"

    out = _broken(tmp_path, two_problems)
    assert "2 problem(s)" in out
    assert "frontend.port:" in out and "hardware.gpus:" in out


def test_trtllm_without_gpus_is_refused_at_once_with_the_alternative() -> None:
    result = run_dynamo("serve", "graphs/disagg.yaml", timeout_s=60)
    assert result.returncode == 1
    assert "cannot serve with engine trtllm on this host" in result.stdout
    assert "dynamo serve graphs/disagg.yaml --engine mocker" in result.stdout
    assert "serving" not in result.stdout  # nothing was started



def test_model_path_must_be_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    out = _broken(tmp_path, lambda g: g.update(model={"name": "my-gpt-oss", "path": "weights"}))
    assert f"model.path: {tmp_path / 'weights'} has no tokenizer.json" in out


def test_unknown_model_without_a_path(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g.update(model="gpt-oss-7b"))
    assert 'model: Got name "gpt-oss-7b" with no path' in out


def test_system_port_above_dynamos_limit(tmp_path: Path) -> None:
    out = _broken(tmp_path, lambda g: g["pools"]["decode"].update(system_port=32767, workers=2))
    assert "pools.decode: system ports 32767..32768 go past 32767" in out
