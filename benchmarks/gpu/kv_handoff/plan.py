"""What both workers of a handoff agree on before they start: pools, requests, block tables, transport.

Why a shared plan: in a deployment the router and the two workers' block managers decide which
blocks a request occupies on each side; here one document decides it, so the prefill worker knows
what to write and the decode worker what to read and what it must find.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.gpu.kv_handoff.layout import BlockLayout

POOL_SLACK = 1.25  # free blocks beyond the requests', so scattered allocation has room to scatter


@dataclass(frozen=True)
class Request:
    tokens: int
    seed: int
    sources: list[int]  # block indices in the prefill pool
    targets: list[int]  # block indices in the decode pool


@dataclass(frozen=True)
class Plan:
    block_tokens: int
    block_bytes: int
    pool_blocks: int
    requests: list[Request]
    mode: str  # "per_block" or "coalesced"
    op: str = "READ"  # decode pulls ("READ") or prefill pushes ("WRITE")
    parts: int = 1  # transfer requests per request, posted together
    backend_params: dict[str, str] = field(default_factory=dict)
    repeats: int = 20  # timed transfers per request at most
    budget_s: float = 2.0  # and at most about this long, but at least 3
    dump: bool = False  # write each request's bytes as both sides hold them, for a test to compare

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Plan:
        document = json.loads(path.read_text())
        return cls(**{**document, "requests": [Request(**r) for r in document["requests"]]})


def make_plan(
    layout: BlockLayout, tokens: list[int], allocation: str, mode: str, seed: int = 1, **options: object
) -> Plan:
    """Requests of the given prompt lengths, their blocks handed out "contiguous" or "scattered".

    Scattered draws blocks at random from each pool, as a long-running block manager's free list
    does; contiguous gives each request consecutive blocks on both sides, the best case.
    """
    counts = [layout.blocks_for(t) for t in tokens]
    pool_blocks = int(sum(counts) * POOL_SLACK)
    shuffle = random.Random(seed)

    def hand_out() -> list[list[int]]:
        order = list(range(pool_blocks))
        if allocation == "scattered":
            shuffle.shuffle(order)
        elif allocation != "contiguous":
            raise ValueError(f"unknown allocation {allocation!r}")
        starts = [sum(counts[:i]) for i in range(len(counts))]
        return [order[start : start + count] for start, count in zip(starts, counts)]

    requests = [
        Request(tokens=t, seed=seed + i, sources=s, targets=d)
        for i, (t, s, d) in enumerate(zip(tokens, hand_out(), hand_out()))
    ]
    return Plan(layout.block_tokens, layout.block_bytes, pool_blocks, requests, mode, **options)
