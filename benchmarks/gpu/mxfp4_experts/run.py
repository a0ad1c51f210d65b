"""Time gpt-oss-120b's MXFP4 expert GEMMs on one Hopper GPU, against their floors and beside the BF16 rows.

    python -m benchmarks.gpu.mxfp4_experts.run --out DIR

(with triton_kernels on PYTHONPATH: see vendor.py and RESULTS.md). One layer's 128 experts, random
in checkpoint storage (dynamo_oss/engines/gptoss/forward/mxfp4.py), swizzled for Hopper (forward/experts.py), are checked against the
float32 dequantised reference (reference.py), then timed at 1 to 16,384 tokens under uniform and
skewed routing: gate-up alone, down with the weighted combine, and the whole MoE block as the
engine runs it. Each row is a share of the MXFP4 weight-read floor (4.25 bits a weight of the
experts touched), of the memory floor (weights + bf16 activations) and of the bf16 GEMM ceiling,
all measured in the same call; the BF16 `torch._grouped_mm` rows of benchmarks/gpu/kernels at the
same token counts stand beside them. Writes DIR/results.json and DIR/results.csv.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.gpu.common.checks import all_pass, relative_error
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.common.results import Results, markdown_table
from benchmarks.gpu.common.roofline import Ceilings, Cost
from benchmarks.gpu.common.timing import measure, measure_ceilings, rotation_sets
from benchmarks.gpu.kernels import roofline
from benchmarks.gpu.mxfp4_experts import reference
from benchmarks.gpu.mxfp4_experts.factor import shares
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.forward import dense
from dynamo_oss.engines.gptoss.forward import experts as kernel
from dynamo_oss.engines.gptoss.forward.layer import BIAS_STD
from dynamo_oss.engines.gptoss.forward.mxfp4 import BYTES_PER_WEIGHT, CheckpointExperts

DEVICE = "cuda"
TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384]
ROUTINGS = ("uniform", "skewed")
BF16_RESULTS = Path(__file__).parent.parent / "kernels" / "results.json"
BF16_OPS = {
    "mxfp4_gate_up": "moe_gate_up_grouped_mm",
    "mxfp4_down": "moe_down_grouped_mm",
    "mxfp4_moe_block": "moe_block_eager",
}


def router(m: ModelShape, routing: str) -> dense.Linear:
    """benchmarks/gpu/mixed_step's two routers: unit-variance bias skews top-4 onto ~50 experts, a small one does not."""
    linear = dense.router(m, DEVICE)
    return linear if routing == "skewed" else dense.Linear(linear.weight, linear.bias.mul_(BIAS_STD))


def poison(nbytes: int = 4 << 30) -> None:
    """Fill free cached memory with NaN, so an output the kernel allocates but does not write shows up."""
    torch.full((nbytes // 2,), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    torch.cuda.synchronize()


def run_checks(m: ModelShape, hopper: kernel.Experts, ckpt: CheckpointExperts) -> dict[str, float]:
    """Each timed call against the float32 reference on fresh random inputs, both routings, unwritten output = NaN."""
    errors, k = {}, m.experts_per_token
    for routing in ROUTINGS:
        gate = router(m, routing)
        for tokens in (7, 333):
            x = torch.randn(tokens, m.hidden_size, device=DEVICE, dtype=torch.bfloat16)
            logits = gate(x)
            r = kernel.route(logits, k)
            h = torch.randn(tokens * k, m.intermediate_size, device=DEVICE, dtype=torch.bfloat16)
            cases: dict[str, tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]] = {
                "gate_up": (lambda: kernel.gate_up(x, hopper, r), lambda: reference.gate_up(x, ckpt, r, k)),
                "down": (lambda: kernel.down(h, hopper, r), lambda: reference.down(h, ckpt, r, k, tokens)),
                "moe_block": (
                    lambda: kernel.moe_block(x, gate.weight, gate.bias, hopper, k),
                    lambda: reference.moe_block(x, logits, ckpt, k),
                ),
            }
            for name, (fast, slow) in cases.items():
                poison()
                out = fast()
                errors[f"{name} {routing} tokens={tokens}"] = relative_error(out, slow())
            errors[f"routing rows {routing} tokens={tokens}"] = abs(int(r.data.expt_hist.sum()) - tokens * k)
    return errors


def bf16_rows() -> dict[tuple[str, int], dict]:
    """benchmarks/gpu/kernels' BF16 expert rows (H200, torch._grouped_mm; its router is the skewed one)."""
    document = json.loads(BF16_RESULTS.read_text())
    return {(r["op"], r["tokens"]): r for r in document["rows"] if r["op"] in BF16_OPS.values()}


def case(
    results: Results,
    ceilings: Ceilings,
    op: str,
    dims: dict,
    cost: Cost,
    weight_bytes: float,
    step: Callable[[int], object],
    sets: int,
    bf16: dict | None,
) -> None:
    timing = results.attempt(f"{op} {dims}", lambda: measure(step, sets=sets), torch.cuda.empty_cache)
    if timing is None:
        return
    t = timing.median_s
    weight_floor = weight_bytes / (ceilings.gbps * 1e9)
    row = {
        "op": op,
        **dims,
        "kernel": kernel.KERNEL,
        "dtype": "MXFP4 weights (E2M1 + E8M0 per 32), bf16 activations, float32 bias",
        "time_us": t * 1e6,
        "p10_us": timing.p10_s * 1e6,
        "p90_us": timing.p90_s * 1e6,
        "timing": timing.method,
        "rotation_sets": sets,
        "flops": cost.flops,
        "bytes": cost.bytes,
        "weight_bytes": weight_bytes,
        "weight_floor_us": weight_floor * 1e6,
        "memory_floor_us": ceilings.memory_s(cost) * 1e6,
        "compute_floor_us": ceilings.compute_s(cost) * 1e6,
        "floor_us": ceilings.floor_s(cost) * 1e6,
        "bound": ceilings.bound(cost),
        "of_weight_floor": weight_floor / t,
        "of_memory_floor": ceilings.memory_s(cost) / t,
        "of_gemm_ceiling": ceilings.compute_s(cost) / t,
        "fraction": ceilings.floor_s(cost) / t,
        "tflops": cost.flops / t / 1e12,
        "gbps": cost.bytes / t / 1e9,
        "bf16_time_us": bf16["time_us"] if bf16 else None,
        "bf16_experts_touched": bf16["experts_touched"] if bf16 else None,
        "bf16_over_mxfp4": bf16["time_us"] / (t * 1e6) if bf16 else None,
    }
    results.add(row)
    print(f"{op:16s} {json.dumps(dims):60s} {t * 1e6:9.1f} us  weight floor {row['of_weight_floor']:6.1%}", flush=True)


def bench(m: ModelShape, hopper: kernel.Experts, ceilings: Ceilings, results: Results) -> None:
    k, bf16 = m.experts_per_token, bf16_rows()
    expert_weights = {"gate_up": 2 * m.intermediate_size * m.hidden_size, "down": m.hidden_size * m.intermediate_size}
    for routing in ROUTINGS:
        gate = router(m, routing)
        for tokens in TOKENS:
            probe = roofline.expert_gate_up(m, tokens * k, min(m.num_experts, tokens * k), BYTES_PER_WEIGHT)
            sets = rotation_sets(probe.bytes)
            xs = [torch.randn(tokens, m.hidden_size, device=DEVICE, dtype=torch.bfloat16) for _ in range(sets)]
            routes = [kernel.route(gate(x), k) for x in xs]
            hs = [
                torch.randn(tokens * k, m.intermediate_size, device=DEVICE, dtype=torch.bfloat16) for _ in range(sets)
            ]
            touched = statistics.mean(int((r.data.expt_hist > 0).sum()) for r in routes)
            dims = {"routing": routing, "tokens": tokens, "experts_touched": touched}
            up = roofline.expert_gate_up(m, tokens * k, touched, BYTES_PER_WEIGHT)
            down = roofline.expert_down(m, tokens * k, touched, BYTES_PER_WEIGHT)
            block = up + down + roofline.router(m, tokens)
            weights = {name: touched * n * BYTES_PER_WEIGHT for name, n in expert_weights.items()}
            steps = {
                "mxfp4_gate_up": (
                    up,
                    weights["gate_up"],
                    lambda i: kernel.gate_up(xs[i % sets], hopper, routes[i % sets]),
                ),
                "mxfp4_down": (down, weights["down"], lambda i: kernel.down(hs[i % sets], hopper, routes[i % sets])),
                "mxfp4_moe_block": (
                    block,
                    weights["gate_up"] + weights["down"],
                    lambda i: kernel.moe_block(xs[i % sets], gate.weight, gate.bias, hopper, k),
                ),
            }
            for op, (cost, weight_bytes, step) in steps.items():
                case(results, ceilings, op, dims, cost, weight_bytes, step, sets, bf16.get((BF16_OPS[op], tokens)))


def table(rows: list[dict]) -> str:
    headers = [
        "op",
        "routing",
        "tokens",
        "experts touched",
        "time (us)",
        "of MXFP4 weight floor",
        "of memory floor",
        "of bf16 GEMM ceiling",
        "BF16 grouped_mm (us), same tokens",
        "BF16 / MXFP4",
    ]
    cells = [
        [
            r["op"],
            r["routing"],
            r["tokens"],
            f"{r['experts_touched']:.1f}",
            f"{r['time_us']:.1f}",
            f"{r['of_weight_floor']:.0%}",
            f"{r['of_memory_floor']:.0%}",
            f"{r['of_gemm_ceiling']:.0%}",
            "-" if r["bf16_time_us"] is None else f"{r['bf16_time_us']:.1f}",
            "-" if r["bf16_over_mxfp4"] is None else f"{r['bf16_over_mxfp4']:.2f}x",
        ]
        for r in rows
    ]
    return markdown_table(headers, cells, left=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    m = GPT_OSS_120B
    kernel.pin_hopper_options()
    ceilings = measure_ceilings()
    ckpt = CheckpointExperts.random(m, DEVICE, torch.Generator(DEVICE).manual_seed(1))
    hopper = kernel.Experts.from_checkpoint(ckpt)
    checks = run_checks(m, hopper, ckpt)
    del ckpt
    torch.cuda.empty_cache()
    errors = {name: e for name, e in checks.items() if not name.startswith("routing rows")}
    header = {
        "model": m.name,
        **device_header(),
        "kernel": kernel.KERNEL,
        "ceilings": ceilings.header(),
        "checks": checks,
        "checks_pass": all_pass(errors) and all(v == 0 for n, v in checks.items() if n.startswith("routing rows")),
        "timing": "benchmarks/gpu/common/timing.py: measure (CUDA graph replays, CUDA events, median; inputs and "
        "routings rotate among sets that together exceed 4 L2s)",
    }
    print(json.dumps(header, indent=1), flush=True)
    results = Results(args.out, header, tables=("shares",), lead=("op", "routing", "tokens", "experts_touched"))
    bench(m, hopper, ceilings, results)
    results.tables["shares"] = shares(results.rows)
    results.save()
    print(table(results.rows))
    print(json.dumps(results.tables["shares"], indent=1))
    if results.failures:
        print("FAILURES:\n" + "\n".join(results.failures))


if __name__ == "__main__":
    main()
