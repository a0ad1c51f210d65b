"""The KV handoff benchmark's own code, run in host memory: two worker processes, one NIXL READ or
WRITE each way it can be described, and every byte compared with what was sent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.gpu.kv_handoff.layout import BlockLayout
from benchmarks.gpu.kv_handoff.pair import run_pair
from benchmarks.gpu.kv_handoff.plan import make_plan
from benchmarks.gpu.kv_handoff.pool import POISON
from dynamo_oss.catalog.models import GPT_OSS_120B

pytest.importorskip(
    "nixl_cu13",
    reason="nixl-cu13 is not installed in this environment (it is not a project dependency: its wheel "
    "requires torch); install it to run the host-memory KV handoff",
)


@pytest.mark.parametrize(
    ("op", "mode", "allocation"),
    [("READ", "per_block", "scattered"), ("WRITE", "coalesced", "contiguous")],
)
def test_paged_kv_arrives_intact_between_two_processes(tmp_path: Path, op: str, mode: str, allocation: str) -> None:
    layout = BlockLayout.for_model(GPT_OSS_120B)
    plan = make_plan(layout, [300, 100], allocation, mode, op=op, dump=True, repeats=3, budget_s=0.0)

    results = run_pair(plan, tmp_path, ("cpu", "cpu"), env={}, timeout_s=120)

    for request in plan.requests:
        sent = np.load(tmp_path / f"sent-{request.seed}.npy")
        received = np.load(tmp_path / f"received-{request.seed}.npy")
        assert sent.shape == (len(request.targets), layout.block_bytes)
        assert not (sent == POISON).all(axis=1).any(), "prefill wrote no content"
        assert np.array_equal(received, sent)
    assert [r["intact"] for r in results] == [True, True]
    assert [r["bytes"] for r in results] == [10 * layout.block_bytes, 4 * layout.block_bytes]
