"""What dynamo_oss.perf predicts for the measured mixed steps and attention-DP lockstep, like for like.

    uv run python benchmarks/gpu/mixed_step/model_compare.py

Reads benchmarks/gpu/mixed_step/results.json and benchmarks/gpu/adp_lockstep/results.json (the
H200 measurements) and writes model_compare.json beside this file; prints markdown tables.

Like for like: the measurements time one full-attention and one window layer; gpt-oss-120b
alternates them (18 of each), so a measured "layer pair" (full + window) is 1/18 of the layers of a
step. The model's step terms are for all 36 layers; the per-pair model time is
(attention_projections + attention + experts + collectives + layer_overhead) / 18, without the
output head and the host's per-sequence overhead, which the measured layers do not have. Same
precision as measured: BF16 experts and BF16 KV on an H200, TensorRT-LLM's fitted factors.

Two model rules for a step with a prefill chunk of C tokens beside B decodes at context X:
- `one_pass`: CostModel.step_ms / mixed_ms with both in one call (weights read once; what
  search.steady_state and replay.check_step_times use);
- `mocker`: what `simulate` charges through the mocker (profiles.profile_tables, role agg): the
  chunk's marginal cost beside one decode, step(C, 1) - step(0, 1), plus the decode step(0, B),
  because Dynamo's mocker adds a step's prefill time to its decode time.
Attention DP (tp 2, EP 2): the mocker steps ranks together and a step lasts as long as its slowest
rank (tests/test_perf_lockstep.py); each rank's time comes from the per-rank profile, which
assumes every rank carries the same tokens (moe_tokens = tokens x ranks).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.perf.costs import CostModel, attention_spans, fitted_factors
from dynamo_oss.perf.layout import PoolLayout, Precision

HERE = Path(__file__).parent
LOCKSTEP = HERE.parent / "adp_lockstep"
LAYER_TERMS = ("attention_projections", "attention", "experts", "collectives", "layer_overhead")
PAIRS = GPT_OSS_120B.num_layers // 2


def model(pool: PoolLayout, experts: str = "bf16") -> CostModel:
    precision = Precision(experts=experts, kv_cache="bf16")
    return CostModel(GPT_OSS_120B, HARDWARE["h200"], pool, precision, "trtllm", fitted_factors())


def pair_us(cost: CostModel, chunk: float, cached: float, batch: float, context: float) -> float:
    """Model time of one layer pair (full + window), in us, for one step's tokens."""
    full, window = attention_spans(cached, max(chunk, 1e-9), GPT_OSS_120B.sliding_window)
    terms = cost.step_terms(
        prefill_tokens=chunk,
        prefill_full_span=full if chunk else 0.0,
        prefill_window_span=window if chunk else 0.0,
        prefill_seqs=0.0,
        decode_seqs=batch,
        decode_context=context,
    )
    return float(sum(np.asarray(terms[k]) for k in LAYER_TERMS)) * 1e6 / PAIRS


def split_pair_us(cost: CostModel, chunk: float, cached: float, batch: float, context: float) -> float:
    """`pair_us` with the attention of the chunk and of the decode batch as two kernels one after the
    other (TensorRT-LLM's context and generation attention), not one roofline over their sum: in that
    one max(), the decode batch's KV reads hide behind the chunk's attention FLOPs."""
    joint = pair_us(cost, chunk, cached, batch, context)
    if not (chunk and batch):
        return joint
    attention = lambda c, b: _attention_us(cost, c, cached, b, context)  # noqa: E731
    return joint - attention(chunk, batch) + attention(chunk, 0) + attention(0, batch)


def _attention_us(cost: CostModel, chunk: float, cached: float, batch: float, context: float) -> float:
    full, window = attention_spans(cached, max(chunk, 1e-9), GPT_OSS_120B.sliding_window)
    terms = cost.step_terms(
        prefill_tokens=chunk,
        prefill_full_span=full if chunk else 0.0,
        prefill_window_span=window if chunk else 0.0,
        decode_seqs=batch,
        decode_context=context,
    )
    return float(terms["attention"]) * 1e6 / PAIRS


REFERENCE_BATCH = 64  # rule d: the chunk's marginal cost taken beside this many decodes


def rules(cost: CostModel, chunk: int, cached: int, batch: int, context: int) -> dict[str, float]:
    alone_c = pair_us(cost, chunk, cached, 0, 0)
    alone_d = pair_us(cost, 0, 0, batch, context)
    one_pass = pair_us(cost, chunk, cached, batch, context)
    mocker = pair_us(cost, chunk, cached, 1, context) - pair_us(cost, 0, 0, 1, context) + alone_d
    split = split_pair_us(cost, chunk, cached, batch, context)
    ref = REFERENCE_BATCH
    mocker_ref = split_pair_us(cost, chunk, cached, ref, context) - split_pair_us(cost, 0, 0, ref, context) + alone_d
    return {
        "chunk_us": alone_c,
        "decode_us": alone_d,
        "one_pass_us": one_pass,
        "mocker_us": mocker,
        "split_us": split,
        "mocker_ref_us": mocker_ref,
    }


def mixed_step() -> tuple[list[dict], dict]:
    measured = json.loads((HERE / "results.json").read_text())["comparison"]
    by_key = {(c["layer"], c["chunk"], c["cached"], c["batch"], c["context"]): c for c in measured}
    tp1 = model(PoolLayout(tp=1))
    tp1_fp4 = model(PoolLayout(tp=1), "mxfp4")
    rows = []
    for (layer, chunk, cached, batch, context), full in by_key.items():
        if layer != "full":
            continue
        window = by_key.get(("window", chunk, 0, batch, "any"))
        if window is None:
            continue
        m_sum = full["sum_us"] + window["sum_us"]
        m_mixed = full["mixed_us"] + window["mixed_us"]
        r = rules(tp1, chunk, cached, batch, context)
        f = rules(tp1_fp4, chunk, cached, batch, context)
        model_sum = r["chunk_us"] + r["decode_us"]
        rows.append(
            {
                "chunk": chunk,
                "cached": cached,
                "batch": batch,
                "context": context,
                "measured_chunk_us": full["chunk_us"] + window["chunk_us"],
                "measured_decode_us": full["decode_us"] + window["decode_us"],
                "measured_sum_us": m_sum,
                "measured_mixed_us": m_mixed,
                "measured_ratio": m_mixed / m_sum,
                "model_chunk_us": r["chunk_us"],
                "model_decode_us": r["decode_us"],
                "model_one_pass_us": r["one_pass_us"],
                "model_mocker_us": r["mocker_us"],
                "model_one_pass_ratio": r["one_pass_us"] / model_sum,
                "model_mocker_ratio": r["mocker_us"] / model_sum,
                "mocker_vs_measured": r["mocker_us"] / m_mixed,
                "one_pass_vs_measured": r["one_pass_us"] / m_mixed,
                "mocker_ratio_vs_measured_ratio": (r["mocker_us"] / model_sum) / (m_mixed / m_sum),
                "one_pass_ratio_vs_measured_ratio": (r["one_pass_us"] / model_sum) / (m_mixed / m_sum),
                "model_split_us": r["split_us"],
                "model_split_ratio": r["split_us"] / model_sum,
                "split_ratio_vs_measured_ratio": (r["split_us"] / model_sum) / (m_mixed / m_sum),
                "model_mocker_ref_ratio": r["mocker_ref_us"] / model_sum,
                "mocker_ref_ratio_vs_measured_ratio": (r["mocker_ref_us"] / model_sum) / (m_mixed / m_sum),
                "mxfp4_split_ratio": f["split_us"] / (f["chunk_us"] + f["decode_us"]),
                "mxfp4_one_pass_ratio": f["one_pass_us"] / (f["chunk_us"] + f["decode_us"]),
                "mxfp4_mocker_ratio": f["mocker_us"] / (f["chunk_us"] + f["decode_us"]),
            }
        )

    def spread(key: str, subset=None) -> dict[str, float]:
        values = [row[key] for row in (subset or rows)]
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    first = [r for r in rows if r["cached"] == 0]
    summary = {
        key: spread(key, first)
        for key in (
            "measured_ratio",
            "model_mocker_ratio",
            "model_one_pass_ratio",
            "mocker_vs_measured",
            "one_pass_vs_measured",
            "mocker_ratio_vs_measured_ratio",
            "one_pass_ratio_vs_measured_ratio",
            "model_split_ratio",
            "split_ratio_vs_measured_ratio",
            "model_mocker_ref_ratio",
            "mocker_ref_ratio_vs_measured_ratio",
            "mxfp4_split_ratio",
            "mxfp4_one_pass_ratio",
            "mxfp4_mocker_ratio",
        )
    }
    summary["cases"] = len(first)
    summary["mocker_within_15pct_of_measured_mixed"] = sum(abs(r["mocker_vs_measured"] - 1) <= 0.15 for r in first)
    summary["one_pass_within_15pct_of_measured_mixed"] = sum(abs(r["one_pass_vs_measured"] - 1) <= 0.15 for r in first)
    summary["mocker_ratio_within_15pct"] = sum(abs(r["mocker_ratio_vs_measured_ratio"] - 1) <= 0.15 for r in first)
    summary["one_pass_ratio_within_15pct"] = sum(abs(r["one_pass_ratio_vs_measured_ratio"] - 1) <= 0.15 for r in first)
    summary["split_ratio_within_15pct"] = sum(abs(r["split_ratio_vs_measured_ratio"] - 1) <= 0.15 for r in first)
    summary["mocker_ref_ratio_within_15pct"] = sum(
        abs(r["mocker_ref_ratio_vs_measured_ratio"] - 1) <= 0.15 for r in first
    )
    return rows, summary


def lockstep() -> list[dict]:
    path = LOCKSTEP / "results.json"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    measured = {(r["layer"], r["scenario"], r["chunk"], r["batch"]): r for r in doc["rows"]}
    context = doc["context"]
    adp = model(PoolLayout(tp=2, attention_dp=True))
    rows = []
    for (layer, scenario, chunk, batch), full in measured.items():
        if layer != "full" or scenario != "chunk0":
            continue
        window = measured[("window", scenario, chunk, batch)]
        base = [measured[(name, "decode", 0, batch)] for name in ("full", "window")]
        both = [measured[(name, "chunk_all", chunk, batch)] for name in ("full", "window")]
        m_base = sum(b["rank1_step_us"] for b in base)
        m_rank1 = full["rank1_step_us"] + window["rank1_step_us"]
        m_both = sum(b["rank1_step_us"] for b in both)
        r = rules(adp, chunk, 0, batch, context)
        rows.append(
            {
                "chunk": chunk,
                "batch": batch,
                "context": context,
                "measured_rank1_no_chunk_us": m_base,
                "measured_rank1_rank0_chunk_us": m_rank1,
                "measured_rank1_slowdown": m_rank1 / m_base,
                "measured_every_rank_chunk_us": m_both,
                "model_decode_us": r["decode_us"],
                "model_rank1_mocker_us": r["mocker_us"],  # lockstep: rank 1 waits for rank 0's mixed step
                "model_rank1_slowdown": r["mocker_us"] / r["decode_us"],
                "model_every_rank_one_pass_us": r["one_pass_us"],
                "model_vs_measured_rank1": r["mocker_us"] / m_rank1,
                "model_vs_measured_decode": r["decode_us"] / m_base,
                "model_one_pass_vs_measured_every_rank": r["one_pass_us"] / m_both,
            }
        )
    return rows


def main() -> None:
    rows, summary = mixed_step()
    locks = lockstep()
    (HERE / "model_compare.json").write_text(
        json.dumps({"about": __doc__, "mixed_step": rows, "summary": summary, "lockstep": locks}, indent=1)
    )
    print(
        "| chunk | after | batch | context | measured sum (us) | measured mixed (us) | measured mixed/sum "
        "| model mocker (us) | mocker / measured | model mocker mixed/sum | model one-pass (us) | one-pass / measured "
        "| one-pass mixed/sum | MXFP4 one-pass mixed/sum |"
    )
    print("|" + "---:|" * 14)
    for r in rows:
        print(
            f"| {r['chunk']} | {r['cached']} | {r['batch']} | {r['context']} | {r['measured_sum_us']:.0f} | "
            f"{r['measured_mixed_us']:.0f} | {r['measured_ratio']:.3f} | {r['model_mocker_us']:.0f} | "
            f"{r['mocker_vs_measured']:.2f} | {r['model_mocker_ratio']:.3f} | {r['model_one_pass_us']:.0f} | "
            f"{r['one_pass_vs_measured']:.2f} | {r['model_one_pass_ratio']:.3f} | {r['mxfp4_one_pass_ratio']:.3f} |"
        )
    print(json.dumps(summary, indent=1))
    if locks:
        print(
            "\n| chunk on rank 0 | batch per rank | measured rank 1, no chunk (us) "
            "| measured rank 1, rank 0 chunk (us) "
            "| measured slowdown | model decode (us) | model rank 1 (us) | model slowdown | model / measured rank 1 "
            "| measured every rank chunk (us) | model one-pass every rank (us) |"
        )
        print("|" + "---:|" * 11)
        for r in locks:
            print(
                f"| {r['chunk']} | {r['batch']} | {r['measured_rank1_no_chunk_us']:.0f} | "
                f"{r['measured_rank1_rank0_chunk_us']:.0f} | {r['measured_rank1_slowdown']:.2f}x | "
                f"{r['model_decode_us']:.0f} | {r['model_rank1_mocker_us']:.0f} | {r['model_rank1_slowdown']:.2f}x | "
                f"{r['model_vs_measured_rank1']:.2f} | {r['measured_every_rank_chunk_us']:.0f} | "
                f"{r['model_every_rank_one_pass_us']:.0f} |"
            )


if __name__ == "__main__":
    main()
