"""The performance model's Hopper efficiencies, derived from the H200 measurements.

Reads kernels/results.json (gpt-oss-120b layer building blocks on one H200),
kv_handoff/results.json (NIXL KV handoff between two NVLinked H200s) and mxfp4_experts/factor.json
(the checkpoint's MXFP4 expert GEMMs on one H200, as factor.py derives them) and writes
dynamo_oss/perf/hopper_measured.json, which `dynamo_oss.perf.costs` loads for the H200 (the
H100 was not measured and keeps the priors). Datasheet rates come from `dynamo_oss.catalog.hardware` (H200). Run from
the repository root:

    uv run python benchmarks/gpu/hopper_factors.py           # write hopper_measured.json
    uv run python benchmarks/gpu/hopper_factors.py --check   # exit 1 if the committed file differs

benchmarks/gpu/CALIBRATION.md says which measured number feeds which factor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dynamo_oss.perf.costs import HOPPER_MEASURED_PATH
from dynamo_oss.catalog.hardware import H200

HERE = Path(__file__).parent
KERNELS = HERE / "kernels" / "results.json"
HANDOFF = HERE / "kv_handoff" / "results.json"
MXFP4 = HERE / "mxfp4_experts" / "factor.json"
DIGITS = 4

MOE_OPS = ("moe_gate_up_grouped_mm", "moe_down_grouped_mm")
MOE_MEMORY_TOKENS = (16, 64, 256, 1024)  # memory-bound; 1 token is launch-bound, 4096 sits where both limits meet
MOE_COMPUTE_TOKENS = (16384,)  # the one compute-bound size
ATTENTION_MIN_TOKENS = 8192  # full-attention prefill from 8k tokens, where it is compute-bound and settled
MXFP4_ROUTING = "uniform"  # the routing the model's experts-touched formula assumes


def _share(rows: list[dict[str, Any]]) -> float:
    """Roofline floor over measured time, summed over rows: the time-weighted share of the floor reached."""
    return sum(r["floor_us"] for r in rows) / sum(r["time_us"] for r in rows)


def _describe(rows: list[dict[str, Any]], *keys: str) -> list[str]:
    return [
        f"{r['op']} "
        + ", ".join(f"{k}={r[k]}" for k in keys)
        + f": {r['time_us']:.1f} us, floor {r['floor_us']:.1f} us"
        for r in rows
    ]


def _mxfp4_runs(mxfp4: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each MXFP4 run's shares under uniform routing, by results file (factor.json's `runs`)."""
    runs = {name: next(r for r in table if r["routing"] == MXFP4_ROUTING) for name, table in mxfp4["runs"].items()}
    assert runs and len({tuple(r["memory_dominated_tokens"]) for r in runs.values()}) == 1
    return runs


def derive(kernels: dict[str, Any], handoff: dict[str, Any], mxfp4: dict[str, Any]) -> dict[str, Any]:
    """The document hopper_measured.json holds: efficiencies and how each was derived."""
    peak_flops, hbm, nvlink = H200.tensor_flops["bf16"], H200.hbm_bandwidth, H200.nvlink_bandwidth
    ceilings = kernels["ceilings"]
    gemm, copy = ceilings["bf16_gemm_tflops"] * 1e12, ceilings["memory_gbps"] * 1e9
    rows = kernels["rows"]

    moe_memory = [r for r in rows if r["op"] in MOE_OPS and r["tokens"] in MOE_MEMORY_TOKENS]
    moe_compute = [r for r in rows if r["op"] in MOE_OPS and r["tokens"] in MOE_COMPUTE_TOKENS]
    attention = [
        r
        for r in rows
        if r["op"] == "prefill_flex_sinks" and r["window"] is None and r["tokens"] >= ATTENTION_MIN_TOKENS
    ]
    assert all(r["bound"] == "memory" for r in moe_memory) and all(r["bound"] == "compute" for r in moe_compute)
    assert all(r["bound"] == "compute" for r in attention) and moe_memory and moe_compute and attention

    mxfp4_runs = _mxfp4_runs(mxfp4)
    mxfp4_tokens = ", ".join(str(t) for t in next(iter(mxfp4_runs.values()))["memory_dominated_tokens"])

    top = max(r["tokens"] for r in handoff["rows"])
    contiguous = [r for r in handoff["rows"] if r["allocation"] == "contiguous" and r["tokens"] == top]
    peer = contiguous[0]["peer_copy_gbps"]  # torch copy_ of the same bytes as one range, cuda:0 -> cuda:1
    assert all(r["peer_copy_gbps"] == peer for r in contiguous)
    scattered = [
        r
        for r in handoff["rows"]
        if r["allocation"] == "scattered"
        and r["tokens"] == top
        and r["block_tokens"] == 32
        and r["element_bytes"] == 2
        and r["parts"] == 1
    ]
    nixl = float(np.mean([r["gbps"] for r in contiguous])) * 1e9
    nixl_scattered = float(np.mean([r["gbps"] for r in scattered])) * 1e9
    # The scattered model RESULTS.md fits: time = descriptors x a + bytes / b, over UCX defaults' scattered READs.
    fit_rows = [
        r
        for r in handoff["rows"]
        if r["name"] == "UCX defaults" and r["op"] == "READ" and r["allocation"] == "scattered" and r["parts"] == 1
    ]
    (per_descriptor_s, per_byte_s), *_ = np.linalg.lstsq(
        np.array([[r["blocks"], r["bytes"]] for r in fit_rows], dtype=float),
        np.array([r["median_s"] for r in fit_rows]),
        rcond=None,
    )

    def r4(x: float) -> float:
        return round(float(x), DIGITS)

    efficiencies = {
        "compute": r4(gemm / peak_flops),
        "memory": r4(copy / hbm),
        "link": r4(peer * 1e9 / nvlink),
        "kv_handoff": r4(nixl / nvlink),
        "expert_compute": r4(_share(moe_compute)),
        "expert_memory": r4(_share(moe_memory)),
        # Memory-dominated rows only: at 1024 tokens MXFP4's four-times-smaller weights put the GEMM at its
        # ridge, where neither floor is approached and max(compute, memory) says nothing about either share.
        "expert_memory_mxfp4": r4(np.mean([r["expert_memory_memory_dominated"] for r in mxfp4_runs.values()])),
        "attention_compute": r4(_share(attention)),
    }
    derivation = {
        "compute": f"bf16 GEMM 8192^3 ceiling {gemm / 1e12:.1f} TFLOP/s / {peak_flops / 1e12:.0f} TFLOP/s datasheet "
        "(kernels: ceilings.bf16_gemm_tflops); dense projections from 1024 tokens run at 95-98% of it",
        "memory": f"copy kernel {copy / 1e9:.0f} GB/s read + written / {hbm / 1e9:.0f} GB/s datasheet "
        "(kernels: ceilings.memory_gbps); SDPA decode attention reads at 89-108% of it from batch 16 at 8k+ context",
        "link": f"torch peer copy {peer:.0f} GB/s, {contiguous[0]['bytes'] / 2**30:.3f} GiB as one range, "
        f"cuda:0 -> cuda:1 / {nvlink / 1e9:.0f} GB/s NVLink per direction (kv_handoff: peer_copy); "
        "collectives were not measured",
        "kv_handoff": f"NIXL, blocks consecutive on both sides, {top:,}-token prompts: mean of "
        + ", ".join(f"{r['gbps']:.0f}" for r in contiguous)
        + f" GB/s ({len(contiguous)} settings: {'; '.join(r['setting'] for r in contiguous)})"
        + f" / {nvlink / 1e9:.0f} GB/s. "
        "TensorRT-LLM gathers a request's blocks into one buffer before sending (TRTLLM_TRY_ZCOPY_FOR_KVCACHE_TRANSFER "
        "defaults to 0), so its transfer is the contiguous case",
        "expert_compute": "MoE grouped GEMMs (torch._grouped_mm, BF16 weights), compute-bound rows, floor over time "
        "against the GEMM ceiling: " + "; ".join(_describe(moe_compute, "tokens", "experts_touched")),
        "expert_memory": "MoE grouped GEMMs (torch._grouped_mm, BF16 weights), memory-bound rows 16-1024 tokens, floor "
        "(weights read once) over time against the copy ceiling: "
        + "; ".join(_describe(moe_memory, "tokens", "experts_touched")),
        "expert_memory_mxfp4": "MoE grouped GEMMs with the checkpoint's MXFP4 weights (triton_kernels matmul_ogs, "
        f"vLLM 0.33.0's copy, Hopper layouts), {MXFP4_ROUTING} routing, gate-up and down rows at {mxfp4_tokens} "
        "tokens (memory floor at least twice the compute floor; 1024 tokens sits at MXFP4's ridge), floor (touched "
        "experts' MXFP4 weights at 4.25 bits + bf16 activations) over time against the copy ceiling, time-weighted; "
        f"mean of {len(mxfp4_runs)} runs: "
        + ", ".join(
            f"{r['expert_memory_memory_dominated']:.4f} (mxfp4_experts/{name}.json)" for name, r in mxfp4_runs.items()
        )
        + " (factor.py, written to mxfp4_experts/factor.json). Charged for MXFP4 experts only; BF16 and FP8 experts "
        "keep expert_memory. expert_memory's own rows (16-1024 tokens) would give "
        + " / ".join(f"{r['expert_memory_same_rows']:.4f}" for r in mxfp4_runs.values())
        + ", which whole gpt-oss-120b decode steps on one H200 do not support (forward_step/RESULTS.md)",
        "attention_compute": f"prefill attention of full layers with sinks (FlexAttention), rows from "
        f"{ATTENTION_MIN_TOKENS} tokens, floor (causal FLOPs) over time against the GEMM ceiling: "
        + "; ".join(_describe(attention, "tokens")),
    }
    return {
        "about": "Efficiencies of the H200 measured on H200s (H100 keeps the priors); dynamo_oss.perf.costs.Efficiencies "
        "says what each means. Written by `uv run python benchmarks/gpu/hopper_factors.py` from "
        "benchmarks/gpu/kernels/results.json, benchmarks/gpu/kv_handoff/results.json and "
        "benchmarks/gpu/mxfp4_experts/factor.json; do not edit by hand.",
        "measured_on": f"{kernels['device']}, PyTorch {kernels['torch']} (kernels); two NVLinked H200s (kv_handoff); "
        "one H200, MXFP4 experts through triton_kernels (mxfp4_experts)",
        "efficiencies": efficiencies,
        "derivation": derivation,
        "not_used": {
            "kv_handoff_scattered": r4(nixl_scattered / nvlink),
            "kv_handoff_scattered_note": f"NIXL with one descriptor per 32-token BF16 block scattered through both "
            f"pools, {top:,}-token prompts, mean of {len(scattered)} settings ({nixl_scattered / 1e9:.0f} GB/s); "
            f"fit over UCX defaults' scattered READs: {per_descriptor_s * 1e6:.2f} us per descriptor + bytes at "
            f"{1 / per_byte_s / 1e9:.0f} GB/s. What vLLM's NixlConnector (per-block descriptors) or a zero-copy "
            "TensorRT-LLM would see; the model's TensorRT-LLM handoff uses the contiguous rate.",
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args(argv)
    document = derive(*(json.loads(path.read_text()) for path in (KERNELS, HANDOFF, MXFP4)))
    text = json.dumps(document, indent=2) + "\n"
    if args.check:
        same = HOPPER_MEASURED_PATH.exists() and json.loads(HOPPER_MEASURED_PATH.read_text()) == document
        print(f"{HOPPER_MEASURED_PATH}: {'up to date' if same else 'DIFFERS from the measurements'}")
        return 0 if same else 1
    HOPPER_MEASURED_PATH.write_text(text)
    print(f"wrote {HOPPER_MEASURED_PATH}")
    print(json.dumps(document["efficiencies"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
