"""Correct first: the error measure every benchmark here checks a kernel with before timing it.

Why: a fast wrong kernel would make every timing meaningless. Errors are ||out - ref|| / ||ref||
against a higher-precision reference on fresh random inputs; bf16 operands land between 1e-3 and
1e-2 (METHOD.md), NaN never passes.
"""

from __future__ import annotations

import torch

TOLERANCE = 2e-2


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    error = float((out.float() - ref.float()).norm() / ref.float().norm())
    return error if error == error else float("inf")  # NaN never passes


def all_pass(errors: dict[str, float], tolerance: float = TOLERANCE) -> bool:
    return all(error < tolerance for error in errors.values())
