"""Speculative decoding in a pool's engine file: read into the shape, refused where a worker could not
run it (the error names the key), and run by Dynamo's mocker through its own flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynamo_oss.deployment.kubernetes import ClusterTarget, render_manifests
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.engines import Speculation, WorkerContext
from dynamo_oss.engines.mocker import ENGINE as MOCKER
from dynamo_oss.engines.mocker import replay_engine_args
from dynamo_oss.engines.trtllm import read_llm_args
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.perf.graphs import simulated_timings
from tests.support.commands import REPO, run_dynamo

GRAPH = REPO / "graphs" / "agg-eagle3.yaml"
ENGINE_FILE = REPO / "graphs" / "engines" / "gpt-oss-120b" / "b200-agg-eagle3.yaml"


def graph_with(tmp_path: Path, **speculative: object) -> Path:
    """The shipped speculative graph, its engine file's speculative_config changed by `speculative`."""
    engine = yaml.safe_load(ENGINE_FILE.read_text())
    engine["speculative_config"] = {
        k: v for k, v in {**engine["speculative_config"], **speculative}.items() if v is not None
    }
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(engine))
    graph = yaml.safe_load(GRAPH.read_text())
    graph["pools"]["agg"]["engine_args"] = "engine.yaml"
    (tmp_path / "graph.yaml").write_text(yaml.safe_dump(graph))
    return tmp_path / "graph.yaml"


def test_the_engine_file_is_the_one_source_of_the_speculation() -> None:
    shape = read_llm_args(ENGINE_FILE)
    assert shape.speculative == Speculation(
        method="eagle3", draft_tokens=3, draft_model="nvidia/gpt-oss-120b-Eagle3-v3"
    )
    assert read_llm_args(REPO / "graphs" / "engines" / "gpt-oss-120b" / "b200-agg.yaml").speculative is None


@pytest.mark.parametrize(
    ("change", "named", "says"),
    [
        ({"max_draft_len": 6}, "speculative_config.max_draft_len", "must be 1 to 5"),
        ({"max_draft_len": 0}, "speculative_config.max_draft_len", "must be 1 to 5"),
        ({"max_draft_len": None}, "speculative_config.max_draft_len", "must be 1 to 5"),
        ({"decoding_type": "MTP"}, "speculative_config.decoding_type", "MTP is not supported"),
        ({"speculative_model": None}, "speculative_config.speculative_model", "missing"),
        ({"speculative_model": "/nowhere/eagle3"}, "speculative_config.speculative_model", "folder not found"),
        ({"speculative_model": "eagle3"}, "speculative_config.speculative_model", "neither a Hugging Face name"),
        ({"speculative_model": "./eagle3"}, "speculative_config.speculative_model", "neither a Hugging Face name"),
    ],
)
def test_dynamo_check_names_the_speculative_key_a_worker_could_not_run(
    tmp_path: Path, change: dict, named: str, says: str
) -> None:
    checked = run_dynamo("check", str(graph_with(tmp_path, **change)))
    assert checked.returncode == 2, checked.stdout
    assert f"pools.agg.engine_args: engine.yaml: {named}: " in checked.stderr and says in checked.stderr


def test_a_local_draft_head_must_hold_a_checkpoint(tmp_path: Path) -> None:
    head = tmp_path / "eagle3"
    head.mkdir()
    with pytest.raises(GraphError, match="has no config.json"):
        build_deployment(load_graph(graph_with(tmp_path, speculative_model=str(head))))
    (head / "config.json").write_text("{}")
    deployment = build_deployment(load_graph(graph_with(tmp_path, speculative_model=str(head))))
    assert deployment.pools[0].shape.speculative.draft_model == str(head)
    # On a cluster the workers cannot read this host's folder: deploy says to name the hub's head.
    with pytest.raises(GraphError, match=r"pools\.agg\.engine_args: speculative_config\.speculative_model names"):
        render_manifests(deployment, ClusterTarget(image="registry.example/dynamo-oss:test"))


def test_the_mocker_drafts_through_dynamos_flags_at_the_models_acceptance(tmp_path: Path) -> None:
    deployment = build_deployment(load_graph(GRAPH), engine_override="mocker")
    timing = simulated_timings(deployment, tmp_path)["agg"]
    assert timing.accept_rates is not None and len(timing.accept_rates) == 3
    context = WorkerContext(
        role="agg",
        served_name="m",
        model_path="m",
        model_folder=tmp_path,
        max_context=None,
        engine_args_file=ENGINE_FILE,
        shape=deployment.pools[0].shape,
        endpoint="dyn://n.c.generate",
        timing=timing,
    )
    argv = MOCKER.worker_argv(context)
    assert argv[argv.index("--aic-nextn") + 1] == "3"
    rates = argv[argv.index("--aic-nextn-accept-rates") + 1]
    assert [float(rate) for rate in rates.split(",")] == pytest.approx(timing.accept_rates, abs=1e-4)
    engine = replay_engine_args(timing, "agg", 4)["engine"]
    assert engine["aic_nextn"] == 3 and engine["aic_nextn_accept_rates"] == rates
