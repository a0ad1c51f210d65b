"""Time the building blocks of one gpt-oss-120b layer on one GPU, each against its roofline.

    python -m benchmarks.gpu.kernels.run --out DIR

Writes DIR/results.json (device, ceilings, correctness checks, one row per case, failures),
DIR/results.csv (the rows) after every case, so a run cut short still leaves what it measured,
and prints the markdown table RESULTS.md holds. Shapes come from dynamo_oss.catalog.models.GPT_OSS_120B.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.gpu.common.checks import all_pass
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.common.results import Results, markdown_table
from benchmarks.gpu.common.roofline import Ceilings, Cost
from benchmarks.gpu.common.timing import measure, measure_ceilings, rotation_sets
from benchmarks.gpu.kernels import attention, moe, roofline
from benchmarks.gpu.kernels.checks import run_checks
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.forward import dense
from dynamo_oss.engines.gptoss.forward import attention as sink_attention

TOKENS = [1, 16, 64, 256, 1024, 4096, 16384]
PREFILL_TOKENS = [1024, 2048, 4096, 8192, 16384, 32768]
DECODE_BATCHES = [1, 16, 64, 256]
DECODE_CONTEXTS = [1024, 8192, 32768]
DEVICE = "cuda"
DIMS = ("tokens", "window", "batch", "context", "experts_touched")


def case(
    results: Results, op: str, dims: dict, cost: Cost, ceilings: Ceilings, step: Callable[[int], object], sets: int
) -> None:
    """Time one case against its floor; a failure is recorded and the run goes on."""
    timing = results.attempt(f"{op} {dims}", lambda: measure(step, sets=sets), torch.cuda.empty_cache)
    if timing is None:
        return
    floor = ceilings.floor_s(cost)
    results.add(
        {
            "op": op,
            **dims,
            "time_us": timing.median_s * 1e6,
            "p10_us": timing.p10_s * 1e6,
            "p90_us": timing.p90_s * 1e6,
            "flops": cost.flops,
            "bytes": cost.bytes,
            "tflops": cost.flops / timing.median_s / 1e12,
            "gbps": cost.bytes / timing.median_s / 1e9,
            "floor_us": floor * 1e6,
            "bound": ceilings.bound(cost),
            "fraction": floor / timing.median_s,
            "timing": timing.method,
            "rotation_sets": sets,
        }
    )
    print(
        f"{op:28s} {json.dumps(dims):42s} {timing.median_s * 1e6:10.1f} us  {floor / timing.median_s:6.1%}",
        flush=True,
    )


def bench_dense(m: ModelShape, ceilings: Ceilings, results: Results) -> None:
    layers = {
        "qkv_projection": (dense.qkv_projection, roofline.qkv_projection, m.hidden_size),
        "output_projection": (dense.output_projection, roofline.output_projection, m.num_attention_heads * m.head_dim),
        "router_topk": (dense.router, roofline.router, m.hidden_size),
    }
    for op, (make, cost_of, d_in) in layers.items():
        for tokens in TOKENS:
            cost = cost_of(m, tokens)
            sets = rotation_sets(cost.bytes)
            weights = [make(m, DEVICE) for _ in range(sets)]
            xs = [torch.randn(tokens, d_in, device=DEVICE, dtype=torch.bfloat16) for _ in range(sets)]
            if op == "router_topk":
                step = lambda i: dense.pick_experts(weights[i % sets], xs[i % sets], m.experts_per_token)  # noqa: E731
            else:
                step = lambda i: weights[i % sets](xs[i % sets])  # noqa: E731
            case(results, op, {"tokens": tokens}, cost, ceilings, step, sets)


def bench_moe(m: ModelShape, ceilings: Ceilings, results: Results) -> None:
    experts = moe.Experts.random(m, DEVICE)
    gate = dense.router(m, DEVICE)
    k = m.experts_per_token
    for tokens in TOKENS:
        probe = roofline.expert_gate_up(m, tokens * k, min(m.num_experts, tokens * k))
        sets = rotation_sets(probe.bytes)
        xs = [torch.randn(tokens, m.hidden_size, device=DEVICE, dtype=torch.bfloat16) for _ in range(sets)]
        routings = [moe.route(gate(x), k) for x in xs]
        rows = [x[r.token_of_row] for x, r in zip(xs, routings)]
        hidden = [moe.swiglu(moe.gate_up(experts, a, r)) for a, r in zip(rows, routings)]
        touched = sum(moe.experts_touched(r) for r in routings) / sets
        dims = {"tokens": tokens, "experts_touched": round(touched, 1)}
        up_cost = roofline.expert_gate_up(m, tokens * k, touched)
        down_cost = roofline.expert_down(m, tokens * k, touched)
        case(
            results,
            "moe_gate_up_grouped_mm",
            dims,
            up_cost,
            ceilings,
            lambda i: moe.gate_up(experts, rows[i % sets], routings[i % sets]),
            sets,
        )
        case(
            results,
            "moe_down_grouped_mm",
            dims,
            down_cost,
            ceilings,
            lambda i: moe.down(experts, hidden[i % sets], routings[i % sets]),
            sets,
        )
        block_cost = up_cost + down_cost + roofline.router(m, tokens)
        step = lambda i: moe.moe_block(xs[i % sets], gate.weight, gate.bias, experts, k)  # noqa: E731
        case(results, "moe_block_eager", dims, block_cost, ceilings, step, sets)


def bench_prefill(m: ModelShape, ceilings: Ceilings, results: Results) -> None:
    sinks = torch.randn(m.num_attention_heads, device=DEVICE)
    for tokens in PREFILL_TOKENS:
        for window in (None, m.sliding_window):
            cost = roofline.attention_prefill(m, tokens, window)
            sets = rotation_sets(cost.bytes)
            qkvs = [attention.random_qkv(m, 1, tokens, tokens, DEVICE) for _ in range(sets)]
            mask = sink_attention.prefill_mask(tokens, window, DEVICE)
            step = lambda i: sink_attention.compiled_sink_attention(*qkvs[i % sets], sinks, mask)  # noqa: E731
            dims = {"tokens": tokens, "window": window}
            case(results, "prefill_flex_sinks", dims, cost, ceilings, step, sets)
            if window is None:
                step = lambda i: attention.sdpa(*qkvs[i % sets], causal=True)  # noqa: E731
                case(results, "prefill_sdpa_nosinks", dims, cost, ceilings, step, sets)


def bench_decode(m: ModelShape, ceilings: Ceilings, results: Results) -> None:
    sinks = torch.randn(m.num_attention_heads, device=DEVICE)
    grid = [(b, c) for b in DECODE_BATCHES for c in DECODE_CONTEXTS] + [(b, m.sliding_window) for b in DECODE_BATCHES]
    for batch, context in grid:
        cost = roofline.attention_decode(m, batch, context)
        sets = rotation_sets(cost.bytes)
        qkvs = [attention.random_qkv(m, batch, 1, context, DEVICE) for _ in range(sets)]
        dims = {"batch": batch, "context": context}
        step = lambda i: sink_attention.compiled_sink_attention(*qkvs[i % sets], sinks, None)  # noqa: E731
        case(results, "decode_flex_sinks", dims, cost, ceilings, step, sets)
        step = lambda i: attention.sdpa(*qkvs[i % sets], causal=False)  # noqa: E731
        case(results, "decode_sdpa_nosinks", dims, cost, ceilings, step, sets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = 256  # one static-shape compile per attention shape
    m = GPT_OSS_120B
    ceilings = measure_ceilings()
    checks = run_checks(m, DEVICE)
    header = {
        "model": m.name,
        **device_header(),
        "ceilings": ceilings.header(),
        "checks": checks,
        "checks_pass": all_pass(checks),
    }
    print(json.dumps(header, indent=1), flush=True)
    results = Results(args.out, header, lead=("op", *DIMS))
    for family in (bench_dense, bench_moe, bench_prefill, bench_decode):
        started = time.perf_counter()
        family(m, ceilings, results)
        print(f"{family.__name__}: {time.perf_counter() - started:.0f} s", flush=True)
    torch.cuda.synchronize()
    print(table(results.rows))
    if results.failures:
        print("FAILURES:\n" + "\n".join(results.failures))


def table(rows: list[dict]) -> str:
    """One line per case: what RESULTS.md shows."""
    headers = ["op", "shape", "time (us)", "TFLOP/s", "GB/s", "floor (us)", "bound", "of roofline"]
    cells = [
        [
            row["op"],
            ", ".join(f"{key}={row[key]}" for key in DIMS if key in row),
            f"{row['time_us']:.1f}",
            f"{row['tflops']:.1f}",
            f"{row['gbps']:.0f}",
            f"{row['floor_us']:.1f}",
            row["bound"],
            f"{row['fraction']:.0%}",
        ]
        for row in rows
    ]
    return markdown_table(headers, cells, left=2)


if __name__ == "__main__":
    main()
