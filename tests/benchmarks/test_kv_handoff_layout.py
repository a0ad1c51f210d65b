"""The KV handoff benchmark's block arithmetic: block sizes from the model and allocation plans (runs are
the engine's, kv_transfer.py, tested beside it)."""

from __future__ import annotations

from benchmarks.gpu.kv_handoff.layout import FP8, BlockLayout
from benchmarks.gpu.kv_handoff.plan import make_plan
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.kv_transfer import Run, runs

MIB = 2**20


def test_a_block_holds_32_tokens_of_every_full_attention_layer() -> None:
    layout = BlockLayout.for_model(GPT_OSS_120B)
    assert layout.block_bytes == 18 * 2 * 32 * 8 * 64 * 2 == 1.125 * MIB
    assert BlockLayout.for_model(GPT_OSS_120B, element_bytes=FP8).block_bytes == layout.block_bytes // 2
    assert layout.blocks_for(32 * 1024) == 1024
    assert layout.blocks_for(33) == 2


def test_scattered_plans_give_each_request_its_own_blocks() -> None:
    layout = BlockLayout.for_model(GPT_OSS_120B)
    plan = make_plan(layout, [1000, 300, 64], "scattered", "per_block")
    assert [len(r.sources) for r in plan.requests] == [32, 10, 2]
    for side in ("sources", "targets"):
        blocks = [b for r in plan.requests for b in getattr(r, side)]
        assert len(set(blocks)) == len(blocks)
        assert all(0 <= b < plan.pool_blocks for b in blocks)
    assert len({r.seed for r in plan.requests}) == len(plan.requests)
    assert runs(plan.requests[0].sources, plan.requests[0].targets, coalesce=True) != [
        Run(plan.requests[0].sources[0], plan.requests[0].targets[0], 32)
    ]


def test_contiguous_plans_coalesce_each_request_into_one_run() -> None:
    layout = BlockLayout.for_model(GPT_OSS_120B)
    plan = make_plan(layout, [1000, 300], "contiguous", "coalesced")
    assert [len(runs(r.sources, r.targets, coalesce=True)) for r in plan.requests] == [1, 1]
