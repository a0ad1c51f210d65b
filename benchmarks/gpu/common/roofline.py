"""Work of one call (FLOPs, bytes) and the card's measured ceilings, and the floor they imply.

Why: a measured time means little alone; over the time the card's measured ceilings allow for the
same work (METHOD.md's "two numbers") it says how much is left on the table. Model-specific costs
live beside each benchmark (kernels/roofline.py); this is the arithmetic they share.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cost:
    """Work of one call: floating-point operations and the fewest device-memory bytes."""

    flops: float
    bytes: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


@dataclass(frozen=True)
class Ceilings:
    """The card's rates, measured in the same call: a large bf16 GEMM and streaming memory bandwidth."""

    tflops: float
    gbps: float
    detail: dict[str, float] = field(default_factory=dict)  # each measurement the two rates were taken from

    def compute_s(self, cost: Cost) -> float:
        return cost.flops / (self.tflops * 1e12)

    def memory_s(self, cost: Cost) -> float:
        return cost.bytes / (self.gbps * 1e9)

    def floor_s(self, cost: Cost) -> float:
        """The least time the work can take: the larger of its compute time and its memory time."""
        return max(self.compute_s(cost), self.memory_s(cost))

    def bound(self, cost: Cost) -> str:
        return "compute" if self.compute_s(cost) >= self.memory_s(cost) else "memory"

    def header(self) -> dict[str, float]:
        """How results.json names them (hopper_factors.py reads these keys)."""
        return {"bf16_gemm_tflops": self.tflops, "memory_gbps": self.gbps, **self.detail}
