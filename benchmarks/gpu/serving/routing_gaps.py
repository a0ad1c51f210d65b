"""Each token's gap between its 4th and 5th router logit in every layer of a forward pass: where a random-
weight model's routing is near a tie, so that rounding elsewhere can flip one of its four experts (the
checks in RESULTS.md judge a row against its reference only away from such ties)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F

from dynamo_oss.engines.gptoss.forward import experts as mxfp4_experts

Result = TypeVar("Result")


def with_routing_gaps(run: Callable[[], Result]) -> tuple[Result, torch.Tensor]:
    """`run()`'s result, and the gaps of the tokens its MoE blocks routed: [layers, tokens]."""
    gaps, moe_block = [], mxfp4_experts.moe_block

    def recording(x, weight, bias, experts, k):  # noqa: ANN001, ANN202 - moe_block's signature
        top = torch.topk(F.linear(x, weight, bias).float(), k + 1, dim=-1).values
        gaps.append(top[:, k - 1] - top[:, k])
        return moe_block(x, weight, bias, experts, k)

    mxfp4_experts.moe_block = recording
    try:
        result = run()
    finally:
        mxfp4_experts.moe_block = moe_block
    return result, torch.stack(gaps)
