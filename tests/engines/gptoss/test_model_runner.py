"""The seat of the GPU model runner: the batch the engine hands it for a step, and its refusal to open
where torch is missing (this install has none: the runner itself runs on the device, benchmarks/gpu/serving)."""

from __future__ import annotations

import pytest

from dynamo_oss.catalog.models import GPT_OSS_20B
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import RunnerSetup, RunnerUnavailable, open_runner, step_batch
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from tests.support.gptoss import kv_cache, sequence


def test_a_step_s_batch_has_each_row_s_tokens_positions_block_tables_and_sampling() -> None:
    sched = Scheduler(Limits(max_batch_size=4, max_num_tokens=12), kv_cache(32, 32))
    sched.add(sequence("decoding", [1, 2, 3], max_tokens=5))
    first = sched.schedule()
    sched.postprocess(first, [50])
    sched.add(sequence("chunked", list(range(100, 130))))
    batch = step_batch(sched.schedule())
    decoding, chunked = batch.rows
    assert (decoding.token_ids, decoding.start, decoding.sampling is not None) == ([50], 3, True)
    assert (chunked.token_ids, chunked.start, chunked.sampling) == (list(range(100, 111)), 0, None)
    assert chunked.tables["full"][0] == 0 and len(chunked.tables["full"][1]) == 3  # positions 0..10: blocks 0..2
    assert chunked.tables["window"] == (0, chunked.tables["window"][1]) and len(chunked.tables["window"][1]) == 3
    assert not batch.decode_only and not step_batch(first).decode_only
    alone = Scheduler(Limits(max_batch_size=4, max_num_tokens=12), kv_cache(32, 32))
    alone.add(sequence("a", [1, 2, 3]))
    alone.postprocess(alone.schedule(), [7])
    assert step_batch(alone.schedule()).decode_only  # one token a row: a CUDA graph's step


def test_the_runner_is_refused_where_torch_is_missing() -> None:
    setup = RunnerSetup(GPT_OSS_20B, GptOssArgs(), kv_pools(GPT_OSS_20B, 32), checkpoint=None)
    with pytest.raises(RunnerUnavailable, match="^the gptoss engine cannot start: torch is missing$"):
        open_runner(setup)
