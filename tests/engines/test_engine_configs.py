"""Every TensorRT-LLM engine file the graphs ship, and every one `dynamo plan` writes, is one TensorRT-LLM
would accept: checked against the LLM API arguments of the version ai-dynamo 1.6.0's trtllm extra pins
(deploy/schemas/, see its README), where unknown keys are errors as they are in TensorRT-LLM
(extra="forbid")."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from dynamo_oss.engines import EngineArgsError
from dynamo_oss.engines.trtllm import GUIDED_DECODING_BACKEND, read_llm_args
from dynamo_oss.perf.graphs import graph_files, layout_from_file
from tests.support.commands import REPO

SCHEMA = json.loads((REPO / "deploy" / "schemas" / "trtllm-llm-args-1.3.0rc29.json").read_text())
LLM_ARGS = jsonschema.Draft202012Validator(SCHEMA)
ENGINE_FILES = sorted((REPO / "graphs" / "engines").rglob("*.yaml"))


def errors(document: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in LLM_ARGS.iter_errors(document)]


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda path: path.name)
def test_engine_file_validates_against_tensorrt_llm_llm_args(path: Path) -> None:
    assert errors(yaml.safe_load(path.read_text())) == []


def test_every_graph_names_a_checked_engine_file() -> None:
    named = set()
    for graph in (REPO / "graphs").glob("*.yaml"):
        for pool in yaml.safe_load(graph.read_text())["pools"].values():
            named.add((graph.parent / pool["engine_args"]).resolve())
    assert named and named <= {path.resolve() for path in ENGINE_FILES}


def test_the_schema_refuses_what_tensorrt_llm_refuses() -> None:
    engine = yaml.safe_load((REPO / "graphs" / "engines" / "gpt-oss-120b" / "b200-decode.yaml").read_text())
    for change, where in [
        ({"max_num_token": 8192}, "max_num_token"),  # a misspelt key
        ({"kv_cache_config": {**engine["kv_cache_config"], "dtype": "fp4"}}, "kv_cache_config.dtype"),
        ({"moe_config": {"backend": "cutlass"}}, "moe_config.backend"),  # the values are case-sensitive
        ({"cache_transceiver_config": {"backend": "NIXL", "buffer_tokens": 1}}, "cache_transceiver_config"),
        ({"tensor_parallel_size": "4"}, "tensor_parallel_size"),
    ]:
        found = errors({**engine, **change})
        assert found and any(where in error for error in found), (change, found)


@pytest.mark.parametrize("graph", ["disagg.yaml", "agg.yaml", "disagg-h200.yaml"])
def test_the_engine_files_dynamo_plan_writes_validate_too(graph: str) -> None:
    files = graph_files(layout_from_file(REPO / "graphs" / graph), "planned")
    engine_files = {name: text for name, text in files.items() if name.startswith("engines/")}
    assert engine_files
    for name, text in engine_files.items():
        assert errors(yaml.safe_load(text)) == [], name


def test_every_engine_file_turns_on_the_guided_decoding_the_gateway_s_grammars_need() -> None:
    planned = [
        yaml.safe_load(text)
        for graph in ("disagg.yaml", "agg.yaml")
        for name, text in graph_files(layout_from_file(REPO / "graphs" / graph), "planned").items()
        if name.startswith("engines/")
    ]
    for document in [*(yaml.safe_load(path.read_text()) for path in ENGINE_FILES), *planned]:
        assert document["guided_decoding_backend"] == GUIDED_DECODING_BACKEND == "llguidance"


def test_an_engine_file_naming_another_guided_decoding_backend_is_refused(tmp_path: Path) -> None:
    engine = yaml.safe_load((REPO / "graphs" / "engines" / "gpt-oss-120b" / "b200-decode.yaml").read_text())
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump({**engine, "guided_decoding_backend": "xgrammar"}))
    assert errors(yaml.safe_load(path.read_text())) == []  # TensorRT-LLM would take it ...
    with pytest.raises(EngineArgsError, match="guided_decoding_backend"):
        read_llm_args(path)  # ... and fail every structured output, whose grammar is llguidance's


def test_the_speculative_engine_files_dynamo_plan_writes_validate_and_name_eagle3() -> None:
    layout = layout_from_file(REPO / "graphs" / "disagg.yaml")
    drafting = layout.model_copy(
        update={"pools": {role: pool.model_copy(update={"draft_tokens": 3}) for role, pool in layout.pools.items()}}
    )
    engine_files = {
        name: yaml.safe_load(text)
        for name, text in graph_files(drafting, "planned").items()
        if name.startswith("engines/")
    }
    assert len(engine_files) == 2
    for name, document in engine_files.items():
        assert errors(document) == [], name
        assert document["speculative_config"] == {
            "decoding_type": "Eagle3",
            "max_draft_len": 3,
            "speculative_model": "nvidia/gpt-oss-120b-Eagle3-v3",
        }


def test_the_schema_refuses_a_speculative_config_tensorrt_llm_refuses() -> None:
    engine = yaml.safe_load((REPO / "graphs" / "engines" / "gpt-oss-120b" / "b200-agg-eagle3.yaml").read_text())
    spec = engine["speculative_config"]
    for change in ({"draft_len": 3}, {"decoding_type": "eagle3"}, {"max_draft_len": -1}):
        assert errors({**engine, "speculative_config": {**spec, **change}}), change


def test_a_kv_memory_cap_dynamo_plan_writes_validates(tmp_path: Path) -> None:
    layout = layout_from_file(REPO / "graphs" / "disagg.yaml")
    pools = {role: pool.model_copy(update={"kv_memory_bytes": 12 * 2**30}) for role, pool in layout.pools.items()}
    files = graph_files(layout.model_copy(update={"pools": pools}), "capped")
    for name, text in files.items():
        if name.startswith("engines/"):
            document = yaml.safe_load(text)
            assert errors(document) == [], name
            assert document["kv_cache_config"]["max_gpu_total_bytes"] == 12 * 2**30
            (tmp_path / "engine.yaml").write_text(text)
            assert read_llm_args(tmp_path / "engine.yaml").kv_memory_bytes == 12 * 2**30
