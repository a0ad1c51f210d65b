"""Time whole gpt-oss-120b forward steps on one GPU: decode steps under CUDA graphs and chunked prefill.

    python -m benchmarks.gpu.forward_step.run --out DIR [--quick]

(triton_kernels on PYTHONPATH: see benchmarks/gpu/mxfp4_experts/vendor.py). The model is the engine's (dynamo_oss/engines/gptoss/forward/model.py) over model.py's contiguous caches:
random weights at the real shapes, MXFP4 experts. Decode: one token for each of `batch` sequences at
`context` tokens, logits for all; prefill: one prompt in the chunks the H200 prefill engine config
takes (graphs/engines/gpt-oss-120b/h200-prefill.yaml: max_num_tokens 20000), logits for its last
token. Each step is timed as one CUDA graph (benchmarks/gpu/common/timing.py: replays timed with
CUDA events, median); the memory beside each row is what the process held (weights, the whole KV
pool, activations) and the case's own KV bytes. Every case is timed a second time with each layer's MoE block skipped (`*_no_experts` rows), so the
experts' share of the step is measured too. Writes DIR/results.json and DIR/results.csv.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.gpu.common.checks import all_pass, relative_error
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.common.results import Results, markdown_table
from benchmarks.gpu.common.timing import measure, measure_ceilings
from benchmarks.gpu.forward_step.model import Caches, chunk_steps, decode_steps, forward
from benchmarks.gpu.mixed_step.run import check_decode_attention, check_prefix_chunk
from benchmarks.gpu.mxfp4_experts.run import poison, run_checks
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.forward import experts as kernel
from dynamo_oss.engines.gptoss.forward.model import Model
from dynamo_oss.engines.gptoss.forward.mxfp4 import CheckpointExperts

DEVICE = "cuda"
BATCHES = [1, 8, 32, 128, 256]
CONTEXTS = [1024, 8192, 32768]
PROMPTS = [1024, 8192, 32768]
QUICK = {"decode": [(8, 1024)], "prompts": [1024]}
CHUNK = 20000  # graphs/engines/gpt-oss-120b/h200-prefill.yaml: max_num_tokens
KV_CAPACITY = 1 << 20  # token slots per full-attention layer: 128 x 8k or 32 x 32k; 36 GiB of bf16 KV over 18 layers
GIB = 2**30


def chunks(prompt: int) -> list[tuple[int, int]]:
    """(cached, chunk) of each chunk of a prompt, as a max_num_tokens engine cuts it."""
    return [(start, min(CHUNK, prompt - start)) for start in range(0, prompt, CHUNK)]


def memory(kv_bytes: float) -> dict[str, float]:
    """What the process holds now, its peak since the case began, and the case's own KV."""
    free, total = torch.cuda.mem_get_info()
    return {
        "case_kv_gib": kv_bytes / GIB,
        "allocated_gib": torch.cuda.memory_allocated() / GIB,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "device_used_gib": (total - free) / GIB,
    }


def check_model(m: ModelShape, model: Model, caches: Caches) -> dict[str, float]:
    """Every component against its float32 reference; the whole step's logits all written and finite."""
    checks = run_checks(m, *_one_layer(m))
    checks |= check_decode_attention(m)
    checks |= check_prefix_chunk(m) | check_prefix_chunk(m, m.sliding_window)
    tokens = torch.randint(0, m.vocab_size, (8,), device=DEVICE)
    poison()
    logits = forward(model, tokens, decode_steps(model, caches, tokens, 1024), slice(None))
    checks["whole decode step: logits not finite (count)"] = float((~logits.isfinite()).sum())
    again = forward(model, tokens, decode_steps(model, caches, tokens, 1024), slice(None))
    checks["whole decode step run twice (KV slot rewritten with the same values)"] = relative_error(again, logits)
    return checks


def _one_layer(m: ModelShape) -> tuple[kernel.Experts, CheckpointExperts]:
    ckpt = CheckpointExperts.random(m, DEVICE, torch.Generator(DEVICE).manual_seed(99))
    return kernel.Experts.from_checkpoint(ckpt), ckpt


def decode_case(
    m: ModelShape, model: Model, caches: Caches, results: Results, batch: int, context: int, with_experts: bool
) -> None:
    dims = {
        "kind": "decode" if with_experts else "decode_no_experts",
        "batch": batch,
        "context": context,
        "prompt": None,
    }
    if batch * context > KV_CAPACITY:
        if with_experts:
            kv = batch * m.kv_bytes(context) / GIB
            results.add(
                {
                    **dims,
                    "skipped": f"KV of {batch} x {context} tokens is {kv:.0f} GiB: past the ~70 GiB the "
                    f"{torch.cuda.get_device_name()} has beside the weights (pool: {KV_CAPACITY} tokens a layer)",
                }
            )
        return
    tokens = torch.randint(0, m.vocab_size, (batch,), device=DEVICE)
    steps = decode_steps(model, caches, tokens, context)
    torch.cuda.reset_peak_memory_stats()
    timing = results.attempt(
        json.dumps(dims),
        lambda: measure(lambda i: forward(model, tokens, steps, slice(None), with_experts)),
        torch.cuda.empty_cache,
    )
    if timing is None:
        return
    row = {
        **dims,
        "time_ms": timing.median_s * 1e3,
        "p10_ms": timing.p10_s * 1e3,
        "p90_ms": timing.p90_s * 1e3,
        "timing": timing.method,
        "tokens_per_s": batch / timing.median_s,
        **memory(batch * m.kv_bytes(context)),
    }
    results.add(row)
    print(
        f"{dims['kind']} batch {batch:4d} context {context:6d}: {row['time_ms']:8.2f} ms ({timing.method})", flush=True
    )


def prefill_case(
    m: ModelShape, model: Model, caches: Caches, results: Results, prompt: int, with_experts: bool
) -> None:
    dims = {
        "kind": "prefill" if with_experts else "prefill_no_experts",
        "batch": 1,
        "context": prompt,
        "prompt": prompt,
    }
    parts, times, methods = chunks(prompt), [], []
    torch.cuda.reset_peak_memory_stats()
    for cached, chunk in parts:
        tokens = torch.randint(0, m.vocab_size, (chunk,), device=DEVICE)
        steps = chunk_steps(model, caches, chunk, cached, DEVICE)
        label = json.dumps({**dims, "cached": cached, "chunk": chunk})
        timing = results.attempt(
            label,
            lambda: measure(lambda i: forward(model, tokens, steps, slice(chunk - 1, chunk), with_experts)),
            torch.cuda.empty_cache,
        )
        if timing is None:
            return
        times.append(timing.median_s * 1e3)
        methods.append(timing.method)
    row = {
        **dims,
        "chunks": [c for _, c in parts],
        "chunk_ms": times,
        "time_ms": sum(times),
        "timing": "+".join(methods),
        "tokens_per_s": prompt / (sum(times) / 1e3),
        **memory(m.kv_bytes(prompt)),
    }
    results.add(row)
    print(f"{dims['kind']} {prompt:6d} in chunks {row['chunks']}: {row['time_ms']:9.1f} ms", flush=True)


def table(rows: list[dict]) -> str:
    headers = ["step", "batch", "context / prompt", "time (ms)", "tok/s", "case KV (GiB)", "held (GiB)", "peak (GiB)"]
    cells = []
    for r in rows:
        if "skipped" in r:
            cells.append([r["kind"], r["batch"], r["context"], "skipped: does not fit", "-", "-", "-", "-"])
            continue
        cells.append(
            [
                r["kind"],
                r["batch"],
                r["context"],
                f"{r['time_ms']:.2f}",
                f"{r['tokens_per_s']:.0f}",
                f"{r['case_kv_gib']:.2f}",
                f"{r['allocated_gib']:.1f}",
                f"{r['peak_allocated_gib']:.1f}",
            ]
        )
    return markdown_table(headers, cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one decode and one prefill case: a smoke test")
    args = parser.parse_args()
    started = time.perf_counter()
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = 256
    m = GPT_OSS_120B
    kernel.pin_hopper_options()
    ceilings = measure_ceilings()
    torch.cuda.empty_cache()
    model = Model.random(m, DEVICE, positions=max(*CONTEXTS, *PROMPTS) + 1)
    weights_gib = torch.cuda.memory_allocated() / GIB
    caches = Caches.random(m, KV_CAPACITY, max(BATCHES), max(PROMPTS), DEVICE)
    pools_gib = torch.cuda.memory_allocated() / GIB - weights_gib
    checks = check_model(m, model, caches)
    torch.cuda.empty_cache()
    header = {
        "model": m.name,
        **device_header(),
        "kernels": {
            "experts": kernel.KERNEL,
            "decode_attention": "PyTorch flash (aten._scaled_dot_product_flash_attention), GQA packed, exact sinks",
            "prefill_attention": "FlexAttention (torch.compile) with sinks, causal / 128-window block masks",
            "dense": "cuBLAS bf16 via F.linear (QKV, output projection, router, output head)",
        },
        "kv_cache": f"contiguous, bf16; pool of {KV_CAPACITY} token slots per full-attention layer",
        "prefill_chunk": CHUNK,
        "weights_gib": weights_gib,
        "kv_pools_gib": pools_gib,
        "ceilings": ceilings.header(),
        "checks": checks,
        "checks_pass": all_pass({k: v for k, v in checks.items() if "not finite" not in k and "routing rows" not in k})
        and all(v == 0 for k, v in checks.items() if "not finite" in k or "routing rows" in k),
        "timing": "benchmarks/gpu/common/timing.py: measure: the whole step (36 layers, head) captured as one CUDA "
        "graph, replays timed with CUDA events, median (p10/p90 kept)",
    }
    print(json.dumps(header, indent=1), flush=True)
    results = Results(args.out, header, lead=("kind", "batch", "context", "prompt"))
    decode = QUICK["decode"] if args.quick else [(b, c) for c in CONTEXTS for b in BATCHES]
    for with_experts in (True, False):
        for batch, context in decode:
            decode_case(m, model, caches, results, batch, context, with_experts)
        print(f"decode done at {time.perf_counter() - started:.0f} s", flush=True)
        for prompt in QUICK["prompts"] if args.quick else PROMPTS:
            prefill_case(m, model, caches, results, prompt, with_experts)
    print(table(results.rows))
    if results.failures:
        print("FAILURES:\n" + "\n".join(results.failures))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
