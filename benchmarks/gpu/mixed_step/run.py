"""Does one gpt-oss-120b step that carries a prefill chunk beside a decode batch cost the sum of the two?

    python -m benchmarks.gpu.mixed_step.run --out DIR [--quick]

Times one decoder layer (dynamo_oss/engines/gptoss/forward/layer.py) at gpt-oss-120b's shapes, for a
full-attention layer and a 128-token window layer, three ways: the decode batch alone, the prefill
chunk alone, and both in one forward pass over one packed token tensor. Timing is
benchmarks/gpu/common/timing.measure: CUDA-graph replays timed with CUDA events, median.
Writes DIR/results.json (device, ceilings, checks, rows, comparison, failures) and
DIR/results.csv / DIR/comparison.csv after every case, and prints the markdown tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.gpu.common.checks import all_pass, relative_error
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.common.results import Results, markdown_table
from benchmarks.gpu.common.timing import measure, measure_ceilings
from benchmarks.gpu.kernels import attention, moe
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.forward import attention as sink_attention
from dynamo_oss.engines.gptoss.forward import layer

DEVICE = "cuda"
CHUNKS = [2048, 4096, 8192, 16384]
BATCHES = [8, 32, 64, 128, 256]
CONTEXTS = [8192, 16384, 32768]
QUICK = {"chunks": [2048], "batches": [8], "contexts": [8192]}
# Bonus: an 8k chunk that is not its prompt's first (the 2nd and 4th chunk of a 32k prompt), full layers.
PREFIX_CHUNK, PREFIXES, PREFIX_BATCHES, PREFIX_CONTEXTS = 8192, [8192, 24576], [8, 64, 256], [8192, 32768]


def check_decode_attention(m: ModelShape) -> dict[str, float]:
    """Decode attention with sinks (the flash kernel with packed GQA) against the float32 reference."""
    errors = {}
    sinks = torch.randn(m.num_attention_heads, device=DEVICE)
    for keys in (640, m.sliding_window):
        q, k, v = attention.random_qkv(m, 3, 1, keys, DEVICE)
        out = sink_attention.decode_sink_attention(q[:, :, 0], k, v, sinks)
        ref = attention.reference(q, k, v, sinks, None)[:, :, 0].reshape(3, -1)
        errors[f"decode {sink_attention.DECODE_KERNEL['name']}+sinks keys={keys}"] = relative_error(out, ref)
    return errors


def check_prefix_chunk(m: ModelShape, window: int | None = None) -> dict[str, float]:
    """A chunk after a prefix (FlexAttention, offset causal or windowed mask, sinks) against the float32 reference."""
    sinks = torch.randn(m.num_attention_heads, device=DEVICE)
    cached, chunk = 384, 256
    q, _, _ = attention.random_qkv(m, 1, chunk, chunk, DEVICE)
    _, k, v = attention.random_qkv(m, 1, 1, cached + chunk, DEVICE)
    mask = sink_attention.chunk_mask(chunk, cached, window, DEVICE)
    out = sink_attention.compiled_sink_attention(q, k, v, sinks, mask)
    name = "chunk after prefix flex+sinks" + ("" if window is None else f" window={window}")
    return {name: relative_error(out, attention.reference(q, k, v, sinks, window))}


def check_mixed_equals_parts(
    m: ModelShape, w: layer.LayerWeights, local: layer.MoeFn, caches: dict, cos, sin
) -> dict[str, float]:
    """The packed pass computes what the two separate passes compute, row for row."""
    errors = {}
    chunk, batch, context = 1024, 8, 2048
    x = torch.randn(chunk + batch, m.hidden_size, device=DEVICE, dtype=torch.bfloat16)
    for name, window in (("full", None), ("window", m.sliding_window)):
        kc, vc = caches[name]
        mixed = layer.layer_forward(
            m, w, layer.make_step(x, chunk, batch, context, window, kc, vc, DEVICE), cos, sin, local
        )
        alone_c = layer.layer_forward(
            m, w, layer.make_step(x[:chunk], chunk, 0, context, window, kc, vc, DEVICE), cos, sin, local
        )
        alone_d = layer.layer_forward(
            m, w, layer.make_step(x[chunk:], 0, batch, context, window, kc, vc, DEVICE), cos, sin, local
        )
        errors[f"mixed vs parts, {name} layer, chunk rows"] = relative_error(
            mixed[:chunk] - x[:chunk], alone_c - x[:chunk]
        )
        errors[f"mixed vs parts, {name} layer, decode rows"] = relative_error(
            mixed[chunk:] - x[chunk:], alone_d - x[chunk:]
        )
    return errors


def time_case(
    results: Results, kind: str, dims: dict, fn: Callable[[], object], touched: float | None, rep: int = 0
) -> None:
    """Time one step shape; a failure is recorded and the run goes on."""
    t = results.attempt(f"{kind} {dims}", lambda: measure(lambda i: fn(), sets=1), torch.cuda.empty_cache)
    if t is None:
        return
    row = {
        "kind": kind,
        **dims,
        "rep": rep,
        "time_us": t.median_s * 1e6,
        "p10_us": t.p10_s * 1e6,
        "p90_us": t.p90_s * 1e6,
        "timing": t.method,
        "experts_touched": touched,
    }
    results.add(row)
    print(f"{kind:7s} {json.dumps(dims):70s} {row['time_us']:10.1f} us ({t.method}) touched={touched}", flush=True)


def times_of(
    rows: list[dict], kind: str, layer_name: str, chunk: int, cached: int, batch: int, context: int
) -> list[float]:
    """Every repetition's time of one case."""
    key = (kind, layer_name, chunk, cached, batch, context)
    return [
        r["time_us"] for r in rows if (r["kind"], r["layer"], r["chunk"], r["cached"], r["batch"], r["context"]) == key
    ]


def touched_of(m: ModelShape, w: layer.LayerWeights, local: layer.MoeFn, step: layer.Step, cos, sin) -> float:
    """Experts the step's MoE reads, from one eager pass that records the routing."""
    seen = {}

    def probe(h, weights, k):
        seen["routing"] = moe.route(weights.router(h), k)
        return local(h, weights, k)

    layer.layer_forward(m, w, step, cos, sin, probe)
    return float(moe.experts_touched(seen["routing"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one point of each kind: a smoke test")
    parser.add_argument("--no-ceilings", action="store_true")
    parser.add_argument("--reps", type=int, default=2, help="times the whole grid is run; medians are compared")
    args = parser.parse_args()
    chunks, batches, contexts = (
        (QUICK["chunks"], QUICK["batches"], QUICK["contexts"]) if args.quick else (CHUNKS, BATCHES, CONTEXTS)
    )
    started = time.perf_counter()
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = 256
    m = GPT_OSS_120B

    ceilings = None if args.no_ceilings else measure_ceilings()
    try:
        checks = check_decode_attention(m)
        if not all_pass(checks):
            raise RuntimeError(f"flash decode check failed: {checks}")
    except Exception:  # noqa: BLE001 - fall back to FlexAttention's decode kernel
        print("flash decode attention unusable, falling back to flex:", traceback.format_exc(limit=3), flush=True)
        sink_attention.DECODE_KERNEL["name"] = "flex"
        checks = check_decode_attention(m)

    w = layer.LayerWeights.random(m, DEVICE)
    local = moe.local_moe(moe.Experts.random(m, DEVICE))  # drawn where LayerWeights.random drew them before
    kv_shape_full = (max(batches), m.num_key_value_heads, max(contexts), m.head_dim)
    kv_shape_win = (max(batches), m.num_key_value_heads, m.sliding_window, m.head_dim)
    caches = {
        "full": tuple(torch.randn(kv_shape_full, device=DEVICE, dtype=torch.bfloat16) for _ in range(2)),
        "window": tuple(torch.randn(kv_shape_win, device=DEVICE, dtype=torch.bfloat16) for _ in range(2)),
    }
    cos, sin = layer.rope_table(m, max(max(contexts), max(chunks)) + 1, DEVICE)
    checks.update(check_prefix_chunk(m))
    checks.update(check_mixed_equals_parts(m, w, local, caches, cos, sin))
    header = {
        "model": m.name,
        **device_header(),
        "decode_kernel": sink_attention.DECODE_KERNEL["name"],
        "ceilings": None if ceilings is None else ceilings.header(),
        "checks": checks,
        "checks_pass": all_pass(checks),
        "timing": "benchmarks.gpu.common.timing.measure: CUDA graph of the whole layer, replays timed with "
        "CUDA events, median (p10/p90 kept); one input set (each step reads >= 1.4 GB of expert weights, "
        "over 20x the 60 MB L2, so nothing is timed out of L2)",
        "grid": {"chunks": chunks, "batches": batches, "contexts": contexts},
    }
    print(json.dumps(header, indent=1), flush=True)
    rec = Results(args.out, header, tables=("comparison",))
    xc_pool = torch.randn(max(chunks), m.hidden_size, device=DEVICE, dtype=torch.bfloat16)
    xd_pool = torch.randn(max(batches), m.hidden_size, device=DEVICE, dtype=torch.bfloat16)
    layers = (("full", None, contexts), ("window", m.sliding_window, [contexts[0]]))

    chunk_cache = tuple(
        torch.randn(
            1, m.num_key_value_heads, max(PREFIXES) + PREFIX_CHUNK, m.head_dim, device=DEVICE, dtype=torch.bfloat16
        )
        for _ in range(2)
    )

    def case(kind: str, name: str, window, chunk: int, batch: int, context: int, rep: int, cached: int = 0) -> None:
        kc, vc = caches[name]
        x = torch.cat([xc_pool[:chunk], xd_pool[:batch]])
        step = layer.make_step(x, chunk, batch, context, window, kc, vc, DEVICE, cached, *chunk_cache)
        touched = touched_of(m, w, local, step, cos, sin)
        dims = {"layer": name, "chunk": chunk, "cached": cached, "batch": batch, "context": context if batch else 0}
        time_case(rec, kind, dims, lambda: layer.layer_forward(m, w, step, cos, sin, local), touched, rep)

    for rep in range(args.reps):
        for name, window, ctxs in layers:
            for chunk in chunks:
                case("chunk", name, window, chunk, 0, 0, rep)
            for context in ctxs:
                for batch in batches:
                    case("decode", name, window, 0, batch, context, rep)
            for context in ctxs:
                for chunk in chunks:
                    for batch in batches:
                        case("mixed", name, window, chunk, batch, context, rep)
            print(f"rep {rep}: {name} layers done at {time.perf_counter() - started:.0f} s", flush=True)
        if not args.quick:
            for cached in PREFIXES:
                case("chunk", "full", None, PREFIX_CHUNK, 0, 0, rep, cached)
                for context in PREFIX_CONTEXTS:
                    for batch in PREFIX_BATCHES:
                        if not times_of(rec.rows, "decode", "full", 0, 0, batch, context):
                            case("decode", "full", None, 0, batch, context, rep)
                        case("mixed", "full", None, PREFIX_CHUNK, batch, context, rep, cached)
            print(f"rep {rep}: prefixed chunks done at {time.perf_counter() - started:.0f} s", flush=True)

    # Medians over the repetitions. Window layers: decode reads 128 keys whatever the context.
    seen = set()
    for r in rec.rows:
        key = (r["layer"], r["chunk"], r["cached"], r["batch"], r["context"])
        if r["kind"] != "mixed" or key in seen:
            continue
        seen.add(key)
        c = times_of(rec.rows, "chunk", r["layer"], r["chunk"], r["cached"], 0, 0)
        d = times_of(rec.rows, "decode", r["layer"], 0, 0, r["batch"], r["context"])
        mixed = times_of(rec.rows, "mixed", *key)
        if not c or not d:
            continue
        c_us, d_us, m_us = statistics.median(c), statistics.median(d), statistics.median(mixed)
        total = c_us + d_us
        rec.tables["comparison"].append(
            {
                "layer": r["layer"],
                "chunk": r["chunk"],
                "cached": r["cached"],
                "batch": r["batch"],
                "context": r["context"] if r["layer"] == "full" else "any",
                "chunk_us": c_us,
                "decode_us": d_us,
                "sum_us": total,
                "mixed_us": m_us,
                "ratio": m_us / total,
                "saved_us": total - m_us,
                "decode_marginal_us": m_us - c_us,
                "reps": len(mixed),
                "mixed_spread": (max(mixed) - min(mixed)) / m_us,
                "sum_spread": (max(c) - min(c) + max(d) - min(d)) / total,
            }
        )
    rec.save()
    print(markdown(rec))
    print(f"total {time.perf_counter() - started:.0f} s")


def markdown(rec: Results) -> str:
    comparison = rec.tables["comparison"]
    headers = [
        "layer",
        "chunk",
        "after",
        "batch",
        "context",
        "chunk alone (us)",
        "decode alone (us)",
        "sum (us)",
        "mixed (us)",
        "mixed / sum",
    ]
    cells = [
        [
            c["layer"],
            c["chunk"],
            c["cached"],
            c["batch"],
            c["context"],
            f"{c['chunk_us']:.0f}",
            f"{c['decode_us']:.0f}",
            f"{c['sum_us']:.0f}",
            f"{c['mixed_us']:.0f}",
            f"{c['ratio']:.3f}",
        ]
        for c in comparison
    ]
    lines = [markdown_table(headers, cells)]
    ratios = [c["ratio"] for c in comparison]
    if ratios:
        lines.append(
            f"\nmixed/sum: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, max {max(ratios):.3f}"
            f" over {len(ratios)} cases"
        )
    if rec.failures:
        lines.append("FAILURES:\n" + "\n".join(rec.failures))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
