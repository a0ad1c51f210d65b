"""The handoff's bytes through real NIXL agents (UCX) over pools in host memory: a decode worker's READ
of a prefill worker's scattered blocks, pool by pool, its notification freeing the prefill's hold, and a
READ from a peer that is gone or lies failing by its deadline instead of hanging."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dynamo_oss.engines.gptoss.handoff import TransferSource
from dynamo_oss.engines.gptoss.kv_transfer import KvTransfer, PoolMemory, Run, runs
from dynamo_oss.engines.gptoss.model_runner import TransferProgress

BLOCK_BYTES = {"full": 4096, "window": 1024}
BLOCKS = 16
DEADLINE_S = 30.0


def host_pools(fill: int | None) -> tuple[dict[str, np.ndarray], dict[str, PoolMemory]]:
    """A pool per name in host memory: every byte of block b of pool p is (b * 7 + len(p)) % 251, or `fill`."""
    arrays, memory = {}, {}
    for name, block_bytes in BLOCK_BYTES.items():
        if fill is None:
            values = (np.arange(BLOCKS, dtype=np.uint16)[:, None] * 7 + len(name)) % 251
            array = np.ascontiguousarray(np.broadcast_to(values, (BLOCKS, block_bytes)).astype(np.uint8))
        else:
            array = np.full((BLOCKS, block_bytes), fill, dtype=np.uint8)
        arrays[name] = array
        memory[name] = PoolMemory(array.ctypes.data, BLOCKS, block_bytes, 0, "DRAM")
    return arrays, memory


def until(
    poll: Callable[[], TransferProgress], done: Callable[[list[TransferProgress]], bool]
) -> list[TransferProgress]:
    seen: list[TransferProgress] = []
    deadline = time.monotonic() + DEADLINE_S
    while not done(seen):
        assert time.monotonic() < deadline, f"not done within {DEADLINE_S:.0f} s: {seen[-3:]}"
        seen.append(poll())
    return seen


@pytest.fixture
def transfers() -> Iterator[Callable[..., KvTransfer]]:
    opened: list[KvTransfer] = []

    def open_one(
        pools: dict[str, PoolMemory], timeout_s: float = DEADLINE_S, timing_log: Path | None = None
    ) -> KvTransfer:
        opened.append(KvTransfer(pools, timeout_s, timing_log=timing_log))
        return opened[-1]

    yield open_one
    for transfer in opened:
        transfer.close()


def test_runs_merge_blocks_consecutive_on_both_sides_only() -> None:
    assert runs([4, 5, 6, 9, 10], [0, 1, 7, 8, 9]) == [Run(4, 0, 2), Run(6, 7, 1), Run(9, 8, 2)]
    assert runs([1, 2], [1, 2], coalesce=False) == [Run(1, 1, 1), Run(2, 2, 1)]
    with pytest.raises(ValueError, match="3 source blocks for 2 target blocks"):
        runs([1, 2, 3], [1, 2])


def test_a_decode_worker_reads_scattered_blocks_of_both_pools_and_the_prefill_worker_hears_it(transfers) -> None:
    sent, prefill_pools = host_pools(fill=None)
    got, decode_pools = host_pools(fill=0)
    prefill, decode = transfers(prefill_pools), transfers(decode_pools)
    source = TransferSource.model_validate(json.loads(prefill.source().model_dump_json()))  # as it travels
    pairs = {"full": [(3, 9), (4, 10), (5, 2), (12, 3)], "window": [(7, 0), (8, 15)]}
    handoff_id = uuid.uuid4().hex
    decode.receive("req-1", handoff_id, source, pairs)
    progress = until(decode.poll, lambda seen: any(p.received or p.failed for p in seen))
    assert [p.received for p in progress if p.received] == [["req-1"]] and not any(p.failed for p in progress)
    for name, pool_pairs in pairs.items():
        for theirs, ours in pool_pairs:
            assert (got[name][ours] == sent[name][theirs]).all(), f"{name} block {theirs} -> {ours}"
    untouched = set(range(BLOCKS)) - {ours for _, ours in pairs["full"]}
    assert all((got["full"][block] == 0).all() for block in untouched)
    notified = until(prefill.poll, lambda seen: any(p.read for p in seen))
    assert [p.read for p in notified if p.read] == [[handoff_id]]
    assert decode.reading == 0


def test_a_decode_worker_can_log_each_read_s_bytes_descriptors_and_time(transfers, tmp_path: Path) -> None:
    _, prefill_pools = host_pools(fill=None)
    _, decode_pools = host_pools(fill=0)
    log = tmp_path / "handoffs.jsonl"
    prefill, decode = transfers(prefill_pools), transfers(decode_pools, timing_log=log)
    pairs = {"full": [(3, 9), (4, 10), (5, 2)], "window": [(7, 0)]}  # runs: 3-4 -> 9-10, 5 -> 2, 7 -> 0
    decode.receive("req-timed", uuid.uuid4().hex, prefill.source(), pairs)
    until(decode.poll, lambda seen: any(p.received for p in seen))
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["request_id"] == "req-timed" and line["descriptors"] == 3
    assert line["bytes"] == 3 * BLOCK_BYTES["full"] + BLOCK_BYTES["window"] and line["ms"] >= 0


def test_metadata_that_is_not_the_named_agent_s_fails_the_request_not_the_worker(transfers) -> None:
    _, prefill_pools = host_pools(fill=None)
    _, other_pools = host_pools(fill=None)
    _, decode_pools = host_pools(fill=0)
    prefill, other, decode = transfers(prefill_pools), transfers(other_pools), transfers(decode_pools)
    forged = prefill.source().model_copy(update={"metadata": other.source().metadata})
    decode.receive("req-forged", uuid.uuid4().hex, forged, {"full": [(1, 1)]})
    assert decode.poll().failed == ["req-forged"]
    decode.receive("req-ok", uuid.uuid4().hex, prefill.source(), {"full": [(1, 1)]})  # the worker still reads
    assert until(decode.poll, lambda seen: any(p.received for p in seen))[-1].received == ["req-ok"]


PEER = """
import base64, json, sys
import numpy as np
from dynamo_oss.engines.gptoss.kv_transfer import KvTransfer, PoolMemory
pool = np.ones((16, 4096), dtype=np.uint8)
transfer = KvTransfer({"full": PoolMemory(pool.ctypes.data, 16, 4096, 0, "DRAM")}, 30.0)
print(transfer.source().model_dump_json(), flush=True)
sys.stdin.read()
"""


def test_a_read_from_a_prefill_worker_that_is_gone_fails_by_its_deadline(transfers) -> None:
    peer = subprocess.Popen([sys.executable, "-c", PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        source = TransferSource.model_validate_json(peer.stdout.readline())
        base64.b64decode(source.metadata, validate=True)
    finally:
        peer.kill()
        peer.wait(30)
    _, decode_pools = host_pools(fill=0)
    decode = transfers({"full": decode_pools["full"]}, timeout_s=2.0)
    decode.receive("req-orphan", uuid.uuid4().hex, source, {"full": [(0, 0), (1, 1)]})
    progress = until(decode.poll, lambda seen: any(p.received or p.failed for p in seen))
    assert [p.failed for p in progress if p.failed] == [["req-orphan"]]
    assert not any(p.received for p in progress) and decode.reading == 0
