"""`dynamo simulate`, `dynamo plan` and the graph-file boundary."""

from __future__ import annotations

import argparse
import json

import pytest

from dynamo_oss.cli import arguments
from dynamo_oss.cli import main as dynamo
from dynamo_oss.perf.graphs import graph_files, layout_from_file
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision


def test_simulate_json_has_the_figures(capsys):
    argv = [
        "simulate",
        "--model",
        "gpt-oss-20b",
        "--hardware",
        "h100",
        "--mode",
        "disagg",
        "--prefill-tp",
        "1",
        "--decode-tp",
        "2",
        "--decode-attention-dp",
        "--isl",
        "2048",
        "--osl",
        "64",
        "--concurrency",
        "1,8",
        "--json",
    ]
    assert dynamo(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 3 and [p["concurrency"] for p in out["points"]] == [1, 8]
    fields = {"tok_s_user", "tok_s_gpu", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"}
    for point in out["points"]:
        assert fields <= point.keys() and all(point[f] > 0 for f in fields)
    assert out["points"][1]["tok_s_gpu"] > out["points"][0]["tok_s_gpu"]


def test_simulate_agg_flags_and_table(capsys):
    argv = [
        "simulate",
        "--model",
        "gpt-oss-120b",
        "--hardware",
        "b200",
        "--mode",
        "agg",
        "--tp",
        "1",
        "--gpus",
        "8",
        "--isl",
        "1024",
        "--osl",
        "32",
        "--concurrency",
        "4",
    ]
    assert dynamo(argv) == 0
    out = capsys.readouterr().out
    assert "8 x B200" in out and "agg 8xTP1" in out and "tok/s/GPU" in out


def test_graph_files_round_trip(tmp_path):
    layout = Layout(
        model="gpt-oss-120b",
        hardware="gb200",
        precision=Precision(kv_cache="fp8"),
        pools={
            "prefill": PoolLayout(workers=3, tp=1, max_num_tokens=16384),
            "decode": PoolLayout(tp=4, ep=2, attention_dp=True),
        },
    )
    files = graph_files(layout, "planned")
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert layout_from_file(tmp_path / "planned.yaml") == layout


def test_plan_returns_a_feasible_layout_within_targets(capsys, tmp_path):
    argv = "plan --model gpt-oss-20b --hardware h100 --gpus 2 --isl 2048 --osl 128 --concurrency 1,4,16".split()
    argv += "--ttft-ms 500 --itl-ms 20 --keep 2 --json".split()
    assert dynamo(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best
    for point in best:
        layout = Layout.model_validate(point["layout"])
        assert layout.gpus == 2
        assert point["serving"]["ttft_p50_ms"] <= 500 and point["serving"]["itl_p50_ms"] <= 20
    gpu_rates = [p["serving"]["tok_s_gpu"] for p in best]
    assert gpu_rates == sorted(gpu_rates, reverse=True)


def test_plan_says_when_nothing_meets_the_targets(capsys):
    argv = "plan --model gpt-oss-120b --hardware h100 --gpus 2 --isl 4096 --osl 64 --concurrency 1".split()
    argv += "--itl-ms 0.5 --keep 1".split()
    assert dynamo(argv) == 1
    assert "No replayed layout meets the targets" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0,4", "a,b"])
def test_concurrency_list_is_validated(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.concurrencies(bad)


def test_simulate_of_a_model_it_has_no_shape_for_is_a_user_error(capsys, tmp_path):
    (tmp_path / "weights").mkdir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / "weights" / name).write_text("{}")
    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "name: custom\nmodel: {name: my-model, path: weights}\nhardware: {gpu: h200, gpus: 1}\n"
        "pools: {agg: {workers: 1, engine: mocker}}\n"
    )
    assert dynamo(["simulate", str(graph), "--isl", "128", "--osl", "8"]) == 2
    err = capsys.readouterr().err
    assert 'model: "my-model" is not a built-in gpt-oss model' in err and "Traceback" not in err


def test_simulate_flags_that_make_no_layout_are_a_user_error(capsys):
    assert dynamo(["simulate", "--tp", "4", "--ep", "3", "--isl", "128", "--osl", "8"]) == 2
    assert "ep must divide tp" in capsys.readouterr().err
