"""`dynamo check`: shipped graphs validate; each broken graph gets an error naming its field.

Validation runs in-process through the command's own entry point; only the refusal to serve
trtllm without GPUs goes through a subprocess, as a user would meet it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.support.commands import dynamo, run_dynamo
from tests.support.graphs import write_graph

SHIPPED = ["disagg.yaml", "disagg-1p1d.yaml", "agg.yaml", "disagg-h200.yaml", "agg-h200.yaml"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_graphs_are_valid(name: str) -> None:
    code, out, err = dynamo("check", f"graphs/{name}")
    assert code == 0, out + err
    assert "valid" in out


def test_check_prints_placement_and_command_lines() -> None:
    code, out, err = dynamo("check", "graphs/disagg.yaml", "--json")
    assert code == 0, out + err
    plan = json.loads(out)
    by_name = {p["name"]: p for p in plan["processes"]}
    assert set(by_name) == {
        "etcd",
        "nats",
        "prometheus",
        "frontend",
        "gateway",
        "prefill-0",
        "decode-0",
        "planner",
        "actuator",
    }
    assert by_name["prefill-0"]["env"]["CUDA_VISIBLE_DEVICES"] == "0"  # each pool starts at its minimum
    assert by_name["decode-0"]["env"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert [p["name"] for p in plan["spare_workers"]] == [
        *(f"prefill-{i}" for i in (1, 2, 3)),
        *(f"decode-{i}" for i in (1, 2, 3, 4, 5)),
    ]
    prefill_argv = by_name["prefill-0"]["argv"]
    assert prefill_argv[prefill_argv.index("--disaggregation-mode") + 1] == "prefill"
    assert "dynamo.trtllm" in prefill_argv
    assert by_name["gateway"]["ports"][0]["port"] == 8000  # clients meet the gateway
    # The gateway renders harmony with the o200k ranks Dynamo's processes read, never a download.
    assert by_name["gateway"]["env"]["TIKTOKEN_ENCODINGS_BASE"] == by_name["frontend"]["env"]["TIKTOKEN_ENCODINGS_BASE"]
    assert by_name["frontend"]["ports"][0] == {"field": "frontend.dynamo_port", "host": "127.0.0.1", "port": 8001}


def test_check_with_mocker_swaps_engines_only() -> None:
    code, out, err = dynamo("check", "graphs/disagg-1p1d.yaml", "--engine", "mocker", "--json")
    assert code == 0, out + err
    plan = json.loads(out)
    workers = [p for p in plan["processes"] if p["kind"] == "worker"]
    assert {p["engine"] for p in workers} == {"mocker"}
    assert all("dynamo_oss.engines.mocker_worker" in p["argv"] for p in workers)
    decode = next(p for p in workers if p["role"] == "decode")["argv"]
    assert decode[decode.index("--data-parallel-size") + 1] == "4"  # the engine file's attention DP, kept


def test_every_path_check_prints_exists_or_is_written_when_served(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, out, err = dynamo("check", "graphs/disagg.yaml", "--engine", "mocker", "--run-dir", str(run_dir), "--json")
    assert code == 0, out + err
    plan = json.loads(out)
    planned = {Path(file["path"]) for file in plan["files"]}
    profiles = {run_dir / "profiles" / "prefill.npz", run_dir / "profiles" / "decode.npz"}
    written = (
        "conformance-responses.jsonl",
        "prometheus.yml",
        "prometheus-workers.json",
        "planner.json",
        "alert-rules.yml",
        "nats-url",
        "gateway.json",
    )
    assert planned == profiles | {run_dir / name for name in written}
    assert not run_dir.exists()  # check wrote nothing into the run folder
    paths = [
        Path(arg.split("=", 1)[-1]) for p in plan["processes"] for arg in p["argv"] if "/" in arg.split("=", 1)[-1][:1]
    ]
    made_by_serve = {run_dir, run_dir / "etcd", run_dir / "nats", run_dir / "prometheus", run_dir / "planner-look.json"}
    missing = [path for path in paths if not path.exists() and path not in planned | made_by_serve]
    assert paths and not missing
    code, out, _ = dynamo("check", "graphs/disagg.yaml", "--engine", "mocker")
    assert "files written when the graph is served:" in out
    assert "<run-dir>/profiles/decode.npz" in out


@pytest.fixture
def broken(tmp_path: Path):
    """Check a test graph changed by `mutate`; it must fail with status 2, naming the problem on stderr."""

    def check(mutate) -> str:
        path = write_graph(tmp_path)
        graph = yaml.safe_load(path.read_text())
        mutate(graph)
        path.write_text(yaml.safe_dump(graph))
        code, out, err = dynamo("check", str(path))
        assert code == 2, out + err
        assert "nothing was started" in err and not out
        return err

    return check


def test_unknown_key_is_named_with_suggestion(broken) -> None:
    out = broken(lambda g: g["frontend"].update(prot=9000))
    assert "frontend.prot: unknown key" in out
    assert 'did you mean "port"' in out


def test_wrong_type_is_named(broken) -> None:
    out = broken(lambda g: g["pools"]["decode"].update(workers="two"))
    assert "pools.decode.workers:" in out
    assert "'two'" in out


def test_more_gpus_than_the_host_has(broken) -> None:
    out = broken(lambda g: g["pools"]["prefill"].update(workers=3))
    assert "hardware.gpus: the pools need 4 GPUs" in out


def test_unknown_engine_is_named(broken) -> None:
    out = broken(lambda g: g["pools"]["prefill"].update(engine="vllm"))
    assert "pools.prefill.engine:" in out
    assert "'trtllm', 'mocker' or 'gptoss'" in out


def test_missing_engine_args_file_is_named(broken, tmp_path: Path) -> None:
    out = broken(lambda g: g["pools"]["decode"].update(engine_args="engines/nope.yaml"))
    assert "pools.decode.engine_args: file not found" in out
    assert str(tmp_path / "engines" / "nope.yaml") in out


def test_trtllm_pool_needs_engine_args(broken) -> None:
    out = broken(lambda g: g["pools"]["decode"].update(engine="trtllm"))
    assert "pools.decode: engine trtllm needs engine_args" in out


def test_port_clash_inside_a_graph_names_both_fields(broken) -> None:
    def clash(graph: dict) -> None:
        graph["frontend"]["port"] = graph["infrastructure"]["nats"]["port"]

    out = broken(clash)
    assert "frontend.port: port" in out
    assert "also used by infrastructure.nats.port" in out


def test_worker_system_ports_clash_across_pools(broken) -> None:
    def clash(graph: dict) -> None:
        graph["hardware"]["gpus"] = 4
        graph["pools"]["prefill"]["workers"] = 2
        graph["pools"]["decode"]["system_port"] = graph["pools"]["prefill"]["system_port"] + 1

    out = broken(clash)
    assert "pools.decode.system_port (worker 0): port" in out
    assert "also used by pools.prefill.system_port (worker 1)" in out


def test_a_second_frontend_s_port_clashing_with_a_worker_s_is_named(broken) -> None:
    def clash(graph: dict) -> None:
        graph["frontend"]["replicas"] = 2
        graph["pools"]["decode"]["system_port"] = graph["frontend"]["dynamo_port"] + 1

    out = broken(clash)
    assert "pools.decode.system_port (worker 0): port" in out and "is also used by frontend.dynamo_port + 1" in out


def test_more_gateway_processes_or_frontends_than_this_host_s_cores_are_refused(broken) -> None:
    cores = os.cpu_count() or 1
    out = broken(lambda g: (g["gateway"].update(processes=cores + 1), g["frontend"].update(replicas=cores + 1)))
    assert f"gateway.processes: is {cores + 1}, more than this host's {cores} cores: give it at most {cores}" in out
    assert f"frontend.replicas: is {cores + 1}, more than this host's {cores} cores" in out


def test_frontends_on_a_node_the_graph_does_not_have_are_refused(broken) -> None:
    def elsewhere(graph: dict) -> None:
        graph["hardware"] = {"gpu": "h200", "nodes": [{"name": "a", "address": "127.0.0.1", "gpus": 2}]}
        graph["frontend"]["nodes"] = ["b"]

    assert "frontend.nodes names b, which hardware.nodes does not have (it has a)" in broken(elsewhere)


def test_tensor_parallel_must_match_gpus_per_worker(broken, tmp_path: Path) -> None:
    (tmp_path / "engine.yaml").write_text("tensor_parallel_size: 4\n")
    out = broken(lambda g: g["pools"]["decode"].update(engine_args="engine.yaml"))
    assert "pools.decode.gpus_per_worker: is 1 but engine.yaml gives each worker 4 GPUs (tensor parallel 4" in out


def test_agg_beside_disagg_pools_is_refused(broken) -> None:
    out = broken(lambda g: g["pools"].update(agg={"workers": 1, "engine": "mocker"}))
    assert "pools: Got agg beside prefill/decode" in out


def test_external_etcd_needs_endpoints(broken) -> None:
    out = broken(lambda g: g["infrastructure"].update(etcd={"mode": "external"}))
    assert "infrastructure.etcd.endpoints: Field required" in out


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "graph.yaml"
    path.write_text("- just\n- a list\n")
    code, _, err = dynamo("check", str(path))
    assert code == 2
    assert "file: expected a mapping" in err


def test_every_problem_is_reported_at_once(broken) -> None:
    def two_problems(graph: dict) -> None:
        graph["frontend"]["port"] = 0
        graph["hardware"]["gpus"] = "eight"

    out = broken(two_problems)
    assert "2 problem(s)" in out
    assert "frontend.port:" in out and "hardware.gpus:" in out


def test_trtllm_without_gpus_is_refused_at_once_with_the_alternative() -> None:
    result = run_dynamo("serve", "graphs/disagg.yaml", timeout_s=60)
    assert result.returncode == 2
    assert "cannot serve with engine trtllm on this host" in result.stderr
    assert "dynamo serve graphs/disagg.yaml --engine mocker" in result.stderr
    assert "serving" not in result.stdout  # nothing was started
    assert "Traceback" not in result.stderr


def test_model_path_must_be_a_checkout(broken, tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    out = broken(lambda g: g.update(model={"name": "my-gpt-oss", "path": "weights"}))
    assert f"model.path: {tmp_path / 'weights'} has no tokenizer.json" in out


def test_unknown_model_without_a_path(broken) -> None:
    out = broken(lambda g: g.update(model="gpt-oss-7b"))
    assert 'model: Got name "gpt-oss-7b" with no path' in out


def test_system_port_above_dynamos_limit(broken) -> None:
    out = broken(lambda g: g["pools"]["decode"].update(system_port=32767, workers=2))
    assert "pools.decode: system ports 32767..32768 go past 32767" in out


def test_pool_with_both_workers_and_autoscale(broken) -> None:
    err = broken(lambda g: g["pools"]["decode"].update(autoscale={"min": 1, "max": 2}))
    assert "pools.decode: Got both of workers and autoscale" in err


def test_pool_with_neither_workers_nor_autoscale(broken) -> None:
    err = broken(lambda g: g["pools"]["decode"].pop("workers"))
    assert "pools.decode: Got neither of workers and autoscale" in err


def test_autoscale_needs_planner_targets(broken) -> None:
    def autoscale(graph: dict) -> None:
        graph["pools"]["decode"].pop("workers")
        graph["pools"]["decode"]["autoscale"] = {"min": 1, "max": 1}

    err = broken(autoscale)
    assert "pools decode autoscale, so the graph needs planner targets" in err


def test_autoscale_range_is_ordered(broken) -> None:
    def backwards(graph: dict) -> None:
        graph["pools"]["decode"].pop("workers")
        graph["pools"]["decode"]["autoscale"] = {"min": 2, "max": 1}
        graph["planner"] = {"ttft_ms": 1000, "itl_ms": 25}

    err = broken(backwards)
    assert "pools.decode.autoscale: Got min 2 and max 1" in err


def test_autoscaled_pool_starts_at_its_minimum(tmp_path: Path) -> None:
    path = write_graph(tmp_path)
    graph = yaml.safe_load(path.read_text())
    graph["hardware"]["gpus"] = 4
    graph["pools"]["decode"].pop("workers")
    graph["pools"]["decode"]["autoscale"] = {"min": 2, "max": 3}
    graph["planner"] = {"mode": "load", "ttft_ms": 1000, "itl_ms": 25}
    path.write_text(yaml.safe_dump(graph))
    code, out, err = dynamo("check", str(path))
    assert code == 0, out + err
    assert "decode-1  " in out and "decode-2  " not in out
    assert "worker slots a pool grows into, on free GPUs: decode-2 (port " in out
    assert (
        "pool decode autoscales between 2 and 3 workers: it starts at 2, then Dynamo's planner sizes it on load thresholds (load)"
        in out
    )
    assert "planner " in out and "actuator " in out


def test_engine_args_of_the_wrong_type_name_the_key(broken, tmp_path: Path) -> None:
    (tmp_path / "engine.yaml").write_text("tensor_parallel_size: four\n")
    err = broken(lambda g: g["pools"]["decode"].update(engine_args="engine.yaml"))
    assert "pools.decode.engine_args: engine.yaml: tensor_parallel_size:" in err
    assert "'four'" in err


def test_external_infrastructure_starts_nothing_and_is_passed_on(tmp_path: Path) -> None:
    path = write_graph(tmp_path)
    graph = yaml.safe_load(path.read_text())
    graph["infrastructure"] = {
        "etcd": {"mode": "external", "endpoints": ["http://etcd.example:2379"]},
        "nats": {"mode": "external", "url": "nats://nats.example:4222"},
    }
    graph["gateway"] = {"enabled": False}
    path.write_text(yaml.safe_dump(graph))
    code, out, err = dynamo("check", str(path), "--json")
    assert code == 0, out + err
    plan = json.loads(out)
    assert {p["name"] for p in plan["processes"]} == {"frontend", "prefill-0", "decode-0"}
    worker = next(p for p in plan["processes"] if p["name"] == "decode-0")
    assert worker["env"]["ETCD_ENDPOINTS"] == "http://etcd.example:2379"
    assert worker["env"]["NATS_SERVER"] == "nats://nats.example:4222"
    # Reached over the network in clear: said, not refused.
    assert "warning: infrastructure.etcd is reached at http://etcd.example:2379 in clear" in err
    assert "warning: infrastructure.nats is reached at nats://nats.example:4222 in clear" in err


def test_mocker_time_scale_slows_steps_and_kv_handoff_alike() -> None:
    def prefill_argv(*extra: str) -> list[str]:
        code, out, err = dynamo("check", "graphs/disagg.yaml", "--engine", "mocker", "--json", *extra)
        assert code == 0, err
        return next(p["argv"] for p in json.loads(out)["processes"] if p["name"] == "prefill-0")

    def flag(argv: list[str], name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    modelled, slowed = prefill_argv(), prefill_argv("--mocker-time-scale", "4")
    assert flag(modelled, "--speedup-ratio") is None
    assert flag(slowed, "--speedup-ratio") == "0.25"
    assert float(flag(slowed, "--kv-transfer-bandwidth")) == pytest.approx(
        float(flag(modelled, "--kv-transfer-bandwidth")) / 4
    )


def test_mocker_time_scale_needs_a_mocker_pool() -> None:
    done = run_dynamo("check", "graphs/disagg.yaml", "--mocker-time-scale", "4")
    assert done.returncode == 2 and "--mocker-time-scale: no pool runs the mocker" in done.stderr
