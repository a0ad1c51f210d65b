"""The paged decode kernel of the runner's CUDA graphs (forward/paged_decode.py) against the float32 reference.

    python -m benchmarks.gpu.serving.decode_kernel_check [--interpret] [--out DIR]

On gpt-oss's attention shape (64 query heads over 8 KV heads of 64 dims, 32-token blocks), for each pool's
kind (the full-attention pool's tables from block 0; the window pool's from the window's first block, 128
keys) and each number of splits: one batch of a row per context (1, 31, 32, 33, 127, 128, 129, 300, 1000;
on a GPU also 8192 and 32768) and two padding rows (context 0), the rows' blocks scattered over a pool
whose unwritten slots and the window's earlier keys hold NaN. Prints each case's largest relative error
against attention.masked_paged_attention (float32) and exits 1 if one is past 2e-2, or if a padding row's
output is not exactly 0. --interpret runs Triton's interpreter on the CPU (no GPU: torch's CPU build,
triton, numpy < 2.4, whose 1-element arrays the interpreter's loop bounds still convert to ints).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

TOLERANCE = 2e-2  # as runner_check's kernel checks
CONTEXTS = [1, 31, 32, 33, 127, 128, 129, 300, 1000]
GPU_CONTEXTS = [8192, 32768]  # too slow for the interpreter
SPLITS = [1, 3, 16]  # one; not a power of two; more than most rows' key tiles (empty splits)
GPU_SPLITS = [128]  # what graph_inputs gives a batch of 1 over a 131,072-token table
KINDS = {"full": None, "window": 128}


def _interpreter_bf16_dot() -> None:
    """Triton's interpreter multiplies bf16 operands of tl.dot as their raw uint16 bits (3.6 and 3.9 alike):
    upcast them to float32 first, as the GPU's MMA reads them. Only the interpreter is patched; the kernel
    is the one the GPU runs."""
    import triton.language as tl
    from triton.runtime import interpreter

    create_dot = interpreter.InterpreterBuilder.create_dot

    def as_float(handle: interpreter.TensorHandle) -> interpreter.TensorHandle:
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        data = interpreter._convert_float(handle.data, tl.bfloat16, tl.float32, None).view(np.float32)
        return interpreter.TensorHandle(data.reshape(handle.data.shape), tl.float32)

    def dot(self, a, b, d, *rest):  # noqa: ANN001, ANN202 - the interpreter's own signature
        return create_dot(self, as_float(a), as_float(b), d, *rest)

    interpreter.InterpreterBuilder.create_dot = dot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpret", action="store_true", help="Triton's interpreter on the CPU")
    parser.add_argument("--out", type=Path, help="write DIR/decode_kernel_check.json")
    args = parser.parse_args()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated, so before the import
        _interpreter_bf16_dot()
    from dynamo_oss.catalog.models import GPT_OSS_120B
    from dynamo_oss.engines.gptoss.config import DEFAULT_TOKENS_PER_BLOCK
    from dynamo_oss.engines.gptoss.forward.paged_decode import check_against_reference

    m = GPT_OSS_120B
    device = "cpu" if args.interpret else "cuda"
    contexts = CONTEXTS if args.interpret else CONTEXTS + GPU_CONTEXTS
    report: dict = {"device": device, "tolerance": TOLERANCE, "cases": {}}
    failed = []
    for kind, window in KINDS.items():
        for splits in SPLITS if args.interpret else SPLITS + GPU_SPLITS:
            started = time.perf_counter()
            errors = check_against_reference(
                m.num_attention_heads,
                m.num_key_value_heads,
                m.head_dim,
                DEFAULT_TOKENS_PER_BLOCK,
                window,
                contexts,
                splits,
                device,
            )
            padding = errors.pop("padding rows: largest |out|")
            worst = max(errors.values())
            case = f"{kind} pool, {splits} splits"
            ok = worst < TOLERANCE and padding == 0
            report["cases"][case] = {"relative_error": errors, "padding_largest_abs": padding, "pass": ok}
            if not ok:
                failed.append(case)
            each = " ".join(f"{name.split()[-1]}:{error:.1e}" for name, error in errors.items())
            print(
                f"{case:24s} max relative error {worst:.2e}  padding |out| {padding:g}  "
                f"{'pass' if ok else 'FAIL'}  ({time.perf_counter() - started:.1f} s)  by context {each}",
                flush=True,
            )
    report["pass"] = not failed
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "decode_kernel_check.json").write_text(json.dumps(report, indent=1))
    print("pass" if not failed else f"FAIL: {', '.join(failed)}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
