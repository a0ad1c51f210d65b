"""The agentic trace and its replay: conversations whose prompts grow by the turn before them, in Dynamo's
agentic replay format, and a replay whose KV hit rate is measured by Dynamo's own router and caches."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.agentic.conversations import BLOCK, CONTEXT, Shape, conversations, shape, write
from dynamo_oss.deployment.model import Deployment, build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.perf.graphs import graph_files
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.replay import replay_served_trace, replay_trace

SMALL = Shape(conversations=12, longest_prompt=30_000, tool_tokens=2_000, tool_seconds=0.5, seed=7)


def test_each_turn_starts_with_the_whole_blocks_of_the_turn_before() -> None:
    system = None
    for turns in conversations(SMALL):
        assert turns, "every conversation has a turn"
        for before, turn in zip([None, *turns[:-1]], turns, strict=True):
            assert len(turn["hash_ids"]) == math.ceil(turn["input_length"] / BLOCK)
            assert turn["input_length"] + turn["output_length"] <= min(SMALL.longest_prompt, CONTEXT)
            if before is None:
                assert turn["dependencies"] == []
                continue
            kept = before["input_length"] // BLOCK
            assert turn["hash_ids"][:kept] == before["hash_ids"][:kept]
            assert turn["input_length"] > before["input_length"] + before["output_length"]
            (dependency,) = turn["dependencies"]
            assert dependency["request_id"] == before["request_id"] and dependency["trigger"] == "completion"
        shared = turns[0]["hash_ids"][: SMALL.system_tokens // BLOCK]
        system = system or shared
        assert shared == system  # one agent's system prompt: the same blocks in every conversation


def test_the_default_trace_has_the_published_agentic_shape() -> None:
    """About 64k input and 400 output tokens, about 90% of each prompt held by the turn before (Dynamo's
    gpt-oss recipe trace: 64k / 400, designed for 90% KV hits)."""
    rows = [row for turns in conversations(Shape()) for row in turns]
    measured = shape(rows)
    assert 50_000 <= measured["input_median"] <= 70_000
    assert 350 <= measured["output_median"] <= 450
    assert 0.85 <= measured["reusable_prefix_mean"] <= 0.92


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agentic") / "trace.jsonl"
    write(path, SMALL)
    return path


def test_kv_routing_finds_the_conversations_prefixes_round_robin_loses(trace: Path) -> None:
    layout = Layout(hardware="b200", precision=Precision(kv_cache="fp8"), pools={"agg": PoolLayout(workers=6)})
    typical = Workload(isl=2_400, osl=400, acceptance="agentic")
    kv, spread = (
        replay_trace(layout, trace, 6, typical, cached_tokens=16_000, router=r) for r in ("kv", "round_robin")
    )
    assert kv.serving.requests == spread.serving.requests == sum(len(turns) for turns in conversations(SMALL))
    assert kv.kv_hit_rate > 0.75 and spread.kv_hit_rate < 0.7  # round robin keeps little but the system prompt
    assert kv.serving.ttft_p50_ms < spread.serving.ttft_p50_ms


def served(layout: Layout, folder: Path) -> Deployment:
    """The deployment `dynamo serve --engine mocker` would run for `layout` (its graph and engine files)."""
    for name, text in graph_files(layout, "served").items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return build_deployment(load_graph(folder / "served.yaml"), engine_override="mocker")


def test_a_trace_replays_at_the_served_graph_s_speeds_and_caches(trace: Path, tmp_path: Path) -> None:
    """replay_served_trace runs the profiles and KV caches a served mocker graph runs: the same trace on
    caches capped to hold a conversation or two (kv_cache_config.max_gpu_total_bytes) finds fewer hits."""
    layout = Layout(hardware="b200", precision=Precision(kv_cache="fp8"), pools={"agg": PoolLayout(workers=2)})
    roomy = replay_served_trace(served(layout, tmp_path / "roomy"), trace, 6)
    small_pool = layout.pools["agg"].model_copy(update={"kv_memory_bytes": 5 * 2**28})  # 36k tokens a worker
    tight = replay_served_trace(
        served(layout.model_copy(update={"pools": {"agg": small_pool}}), tmp_path / "tight"), trace, 6
    )
    assert roomy.serving.requests == tight.serving.requests == sum(len(turns) for turns in conversations(SMALL))
    assert roomy.kv_hit_rate > 0.75 and tight.kv_hit_rate < roomy.kv_hit_rate - 0.05
