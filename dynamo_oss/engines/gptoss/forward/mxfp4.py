"""The checkpoint's MXFP4 expert storage, random at the real shapes, and its exact dequantisation.

gpt-oss stores each expert projection [experts, out, in] as `blocks` uint8 [experts, out, in / 32, 16]
(two FP4 E2M1 values a byte, the even element in the low nibble) and `scales` uint8
[experts, out, in / 32] (E8M0: the exponent of a power of two, bias 127), one scale per 32 weights
along the input dimension: 4.25 bits a weight. Random blocks (every FP4 code, never all zeros) and
scales from a narrow exponent range give weights of the trained model's magnitude; the dequantised
float32 copy is what every kernel here is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.checkpoint import FP4_E2M1, MXFP4_GROUP

GROUP = MXFP4_GROUP  # weights per E8M0 scale
BITS_PER_WEIGHT = 4 + 8 / GROUP  # 4.25
BYTES_PER_WEIGHT = BITS_PER_WEIGHT / 8
SCALE_EXPONENTS = (118, 123)  # 2^-9 .. 2^-5 (E8M0 bias 127): the range a trained layer's scales sit in
FP4_VALUES = tuple(FP4_E2M1.tolist())


@dataclass(frozen=True)
class Mxfp4Weight:
    """One projection of all experts in checkpoint storage: blocks [E, out, in/32, 16], scales [E, out, in/32]."""

    blocks: torch.Tensor
    scales: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        experts, out, groups, _ = self.blocks.shape
        return experts, out, groups * GROUP

    @classmethod
    def random(cls, experts: int, d_out: int, d_in: int, device: str, generator: torch.Generator) -> Mxfp4Weight:
        blocks = torch.randint(
            0, 256, (experts, d_out, d_in // GROUP, GROUP // 2), dtype=torch.uint8, device=device, generator=generator
        )
        scales = torch.randint(
            *SCALE_EXPONENTS, (experts, d_out, d_in // GROUP), dtype=torch.uint8, device=device, generator=generator
        )
        return cls(blocks, scales)

    def dequantise(self, expert: int) -> torch.Tensor:
        """Expert `expert`'s weight [out, in] in float32, exactly."""
        lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=self.blocks.device)
        packed = self.blocks[expert].long()
        values = torch.stack([lut[packed & 0x0F], lut[packed >> 4]], dim=-1).flatten(-2)  # [out, groups, 32]
        scale = torch.exp2(self.scales[expert].float() - 127.0)[..., None]
        return (values * scale).flatten(-2)


@dataclass(frozen=True)
class CheckpointExperts:
    """One layer's experts as the checkpoint holds them: gate-up (gate and up interleaved) and down, with biases."""

    gate_up: Mxfp4Weight  # [experts, 2 x intermediate, hidden]
    gate_up_bias: torch.Tensor  # [experts, 2 x intermediate] float32
    down: Mxfp4Weight  # [experts, hidden, intermediate]
    down_bias: torch.Tensor  # [experts, hidden] float32

    @classmethod
    def random(cls, m: ModelShape, device: str, generator: torch.Generator) -> CheckpointExperts:
        """Random at the real shapes; biases small and random, never zero."""
        e, h, i = m.num_experts, m.hidden_size, m.intermediate_size
        return cls(
            Mxfp4Weight.random(e, 2 * i, h, device, generator),
            0.02 * torch.randn(e, 2 * i, device=device, generator=generator),
            Mxfp4Weight.random(e, h, i, device, generator),
            0.02 * torch.randn(e, h, device=device, generator=generator),
        )
