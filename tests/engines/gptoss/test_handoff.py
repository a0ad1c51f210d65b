"""The disaggregated handoff's bookkeeping between a prefill and a decode worker of the gptoss engine: the
full-attention pool's every block and the window pool's last ones, a descriptor the decode worker checks
against its own request, and the prefill worker's hold on the blocks until they are read or time out."""

from __future__ import annotations

import json
import uuid

import pytest

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.handoff import (
    HandoffError,
    HandoffLedger,
    RemotePool,
    TransferSource,
    describe,
    handoff_spans,
    read_handoff,
    transfer_pairs,
)
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from tests.support.gptoss import SMALL, kv_cache, sequence

PROMPT = list(range(1, 23))  # 22 tokens: six 4-token blocks, the last one partial
SOURCE = TransferSource(
    agent="prefill-0",
    metadata="bWV0YWRhdGE=",
    pools={
        name: RemotePool(address=4096, blocks=32, block_bytes=pool.block_bytes(SMALL), device_id=0, kind="DRAM")
        for name, pool in kv_pools(SMALL, 4).items()
    },
)


@pytest.mark.parametrize(
    ("prompt", "full", "window"),
    [
        (1, range(0, 1), range(0, 1)),
        (128, range(0, 4), range(0, 4)),
        (129, range(0, 5), range(0, 5)),
        (10_000, range(0, 313), range(308, 313)),
        (32_768, range(0, 1024), range(1020, 1024)),
    ],
)
def test_a_handoff_carries_every_full_attention_block_and_the_window_s_last_ones(
    prompt: int, full: range, window: range
) -> None:
    spans = handoff_spans(kv_pools(GPT_OSS_120B, 32), prompt)
    assert spans == {"full": full, "window": window}


def test_a_32k_handoff_moves_what_tensorrt_llm_s_cache_formatter_does() -> None:
    """18 layers x 2 KiB a token (BF16) x the prompt, plus the window layers' 128 tokens: within a block."""
    pools = kv_pools(GPT_OSS_120B, 32)
    spans = handoff_spans(pools, 32_768)
    sent = sum(len(spans[name]) * pool.block_bytes(GPT_OSS_120B) for name, pool in pools.items())
    assert sent == GPT_OSS_120B.kv_bytes(32_768)  # 32k is a multiple of the block: the window's 4 blocks exactly


def prefill() -> tuple[Scheduler, object, object]:
    """A prefill worker's scheduler that has run PROMPT to its first token: (scheduler, sequence, output)."""
    sched = Scheduler(Limits(max_batch_size=4, max_num_tokens=64), kv_cache(32, 32), keep_finished_kv=True)
    seq = sequence("p", list(PROMPT), max_tokens=1)
    sched.add(seq)
    step = sched.schedule()
    (output,) = sched.postprocess(step, [99])
    return sched, seq, output


def test_the_decode_worker_takes_blocks_for_the_spans_the_prefill_worker_describes() -> None:
    sched, seq, output = prefill()
    pools = sched.kv.pools
    handoff = describe(seq, output.hold, pools, SMALL, uuid.uuid4().hex, SOURCE)
    travelled = json.loads(handoff.model_dump_json())  # as disaggregated_params cross the request plane
    decode = Scheduler(Limits(max_batch_size=4, max_num_tokens=64), kv_cache(32, 32))
    received = sequence("d", list(PROMPT))
    read, spans = read_handoff(travelled, received, pools, SMALL)
    assert read == handoff and read.first_token == 99 and read.source == SOURCE
    assert spans == {"full": range(0, 6), "window": range(3, 6)}  # the first token (position 22) reads keys 15..22
    received.append(read.first_token)
    decode.add_received(received, spans)
    assert decode.schedule().receiving == [received]
    pairs = transfer_pairs(read, received)
    assert [source for source, _ in pairs["full"]] == output.hold.tables["full"].blocks
    assert [target for _, target in pairs["window"]] == received.tables["window"].blocks
    assert len(pairs["window"]) == 3 and len(set(target for _, target in pairs["full"])) == 6


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"prompt_digest": "0" * 64}, "prompt_digest: the prefill was of another prompt"),
        ({"prompt_tokens": 23}, "prompt_tokens: 23, but this worker's is 22"),
        ({"block_tokens": 32}, "block_tokens: 32, but this worker's is 4"),
        ({"model": "gpt-oss-120b"}, "model: 'gpt-oss-120b', but this worker's is 'gpt-oss-20b'"),
        ({"engine": "trtllm"}, "engine: Input should be 'gptoss'"),
        ({"version": 2}, "version: Input should be 1"),
        ({"first_token": 201_088}, "first_token: 201088 is not a token id"),
        ({"pools": {"full": {"first": 0, "blocks": [1, 2, 3, 4, 5, 6]}}}, "pools.window: blocks 3..5 expected"),
        (
            {"pools": {"full": {"first": 0, "blocks": [1, 2]}, "window": {"first": 3, "blocks": [1, 2, 3]}}},
            "pools.full: blocks 0..5 expected for a 22-token prompt",
        ),
        ({"handoff_id": "../x"}, "handoff_id: String should match pattern"),
        (
            {"source": {**SOURCE.model_dump(), "pools": {"full": SOURCE.pools["full"].model_dump()}}},
            "source.pools: the prefill worker offers pools ['full'], this worker needs ['full', 'window']",
        ),
        (
            {
                "source": {
                    **SOURCE.model_dump(),
                    "pools": {n: {**p.model_dump(), "block_bytes": 32} for n, p in SOURCE.pools.items()},
                }
            },
            "source.pools.full.block_bytes: 32, but this worker's blocks are 98304 bytes",
        ),
        (
            {
                "source": {
                    **SOURCE.model_dump(),
                    "pools": {n: {**p.model_dump(), "blocks": 4} for n, p in SOURCE.pools.items()},
                }
            },
            "pools.full.blocks: block 5 is past the prefill worker's 4",
        ),
        ({"source": {**SOURCE.model_dump(), "agent": "a b"}}, "source.agent: String should match pattern"),
        ({"extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_a_descriptor_that_does_not_fit_the_request_or_the_worker_is_refused_naming_the_field(
    change: dict, refused: str
) -> None:
    sched, seq, output = prefill()
    handoff = describe(seq, output.hold, sched.kv.pools, SMALL, uuid.uuid4().hex, SOURCE)
    forged = {**json.loads(handoff.model_dump_json()), **change}
    with pytest.raises(HandoffError) as error:
        read_handoff(forged, sequence("d", list(PROMPT)), sched.kv.pools, SMALL)
    assert f"prefill_result.disaggregated_params.{refused}" in str(error.value)


def test_the_prefill_worker_keeps_handed_over_blocks_until_read_or_timed_out() -> None:
    sched, seq, output = prefill()
    ledger = HandoffLedger(hold_timeout_s=30)
    ledger.keep("read", output.hold, now=100.0)
    held = sched.kv.held_blocks("full")
    assert held == 6 and ledger.pending == 1
    assert ledger.expired(now=129.9) == []
    hold = ledger.read("read")
    sched.kv.release(hold)
    assert sched.kv.held_blocks("full") == 0 and ledger.read("read") is None  # read once
    _, _, late = prefill()
    ledger.keep("never read", late.hold, now=200.0)
    assert ledger.expired(now=230.0) == [late.hold] and ledger.pending == 0
