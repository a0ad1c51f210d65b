"""What dynamo_oss.perf predicts for the measured mixed steps and attention-DP lockstep, like for like.

    uv run python benchmarks/gpu/mixed_step/model_compare.py

Reads benchmarks/gpu/mixed_step/results.json and benchmarks/gpu/adp_lockstep/results.json (the
H200 measurements) and writes model_compare.json beside this file; prints markdown tables.

Like for like: the measurements time one full-attention and one window layer; gpt-oss-120b
alternates them (18 of each), so a measured "layer pair" (full + window) is 1/18 of the layers of a
step. The model's steps are for all 36 layers; the per-pair model time is the step without its
output head and its host time per sequence (which the measured layers do not have), over 18. Same
precision as measured: BF16 experts and BF16 KV on an H200, TensorRT-LLM's fitted factors.

The model's two ways to time a step with a prefill chunk of C tokens beside B decodes at context X,
each read from the model's own code:
- `one_pass`: CostModel.step_terms with the chunk and the batch in one call (what
  search.steady_state and replay.check_step_times use);
- `mocker`: what `simulate` charges through Dynamo's mocker, which adds a step's prefill time to its
  decode time: the aggregated profile's prefill curve at C, built beside B decodes
  (profiles.prefill_curve_ms, as replay.batch_beside_chunk sets B), plus the decode step at B.
Attention DP (tp 2, EP 2): the mocker steps ranks together and a step lasts as long as its slowest
rank (tests/perf/test_lockstep.py), so rank 1's step beside rank 0's chunk is rank 0's `mocker` step
from the per-rank profile, which assumes every rank carries the same tokens (moe_tokens = tokens x
ranks).
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
from dynamo_oss.perf.profiles import prefill_curve_ms

HERE = Path(__file__).parent
LOCKSTEP = HERE.parent / "adp_lockstep"
HOST_TERMS = ("output_head", "sequence_overhead")  # what the measured layers do not have
PAIRS = GPT_OSS_120B.num_layers // 2
WITHIN = 0.15
MOCKER_COLUMNS = ("model_mocker_ratio", "mocker_ratio_vs_measured_ratio", "mxfp4_mocker_ratio")  # first chunks only


def model(pool: PoolLayout, experts: str = "bf16") -> CostModel:
    """An H200 pool of the model at the measured precision (BF16 KV; BF16 experts unless asked)."""
    precision = Precision(experts=experts, kv_cache="bf16")
    return CostModel(GPT_OSS_120B, HARDWARE["h200"], pool, precision, "trtllm", fitted_factors())


def _step(chunk: float, cached: float, batch: float, context: float) -> dict[str, float]:
    """step_terms' arguments for a prompt's chunk after `cached` tokens beside `batch` decodes."""
    full, window = attention_spans(cached, max(chunk, 1e-9), GPT_OSS_120B.sliding_window)
    return {
        "prefill_tokens": chunk,
        "prefill_full_span": full if chunk else 0.0,
        "prefill_window_span": window if chunk else 0.0,
        "prefill_seqs": 1.0 if chunk else 0.0,
        "decode_seqs": batch,
        "decode_context": context,
    }


def _host_us(cost: CostModel, chunk: float, cached: float, batch: float, context: float) -> float:
    terms = cost.step_terms(**_step(chunk, cached, batch, context))
    return float(sum(np.asarray(terms[k]) for k in HOST_TERMS)) * 1e6


def one_pass_us(cost: CostModel, chunk: float, cached: float, batch: float, context: float) -> float:
    """The model's step of one chunk beside a decode batch, in one call, per layer pair (us)."""
    step = 1e3 * float(cost.step_ms(**_step(chunk, cached, batch, context)))
    return (step - _host_us(cost, chunk, cached, batch, context)) / PAIRS


def mocker_us(cost: CostModel, chunk: int, batch: float, context: float) -> float:
    """What the mocker charges for a prompt's first chunk beside a decode batch, per layer pair (us)."""
    step = 1e3 * float(prefill_curve_ms(cost, "agg", chunk, chunk, batch) + cost.decode_ms(batch, context))
    return (step - _host_us(cost, chunk, 0, batch, context)) / PAIRS


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def mixed_step() -> tuple[list[dict], dict]:
    """Each measured case (a full + window layer pair) beside the model's, and spreads over the first chunks."""
    measured = json.loads((HERE / "results.json").read_text())["comparison"]
    by_key = {(c["layer"], c["chunk"], c["cached"], c["batch"], c["context"]): c for c in measured}
    tp1, tp1_fp4 = model(PoolLayout(tp=1)), model(PoolLayout(tp=1), "mxfp4")
    rows = []
    for (layer, chunk, cached, batch, context), full in by_key.items():
        window = by_key.get(("window", chunk, 0, batch, "any"))
        if layer != "full" or window is None:
            continue
        m_sum = full["sum_us"] + window["sum_us"]
        m_mixed = full["mixed_us"] + window["mixed_us"]
        row = {
            "chunk": chunk,
            "cached": cached,
            "batch": batch,
            "context": context,
            "measured_chunk_us": full["chunk_us"] + window["chunk_us"],
            "measured_decode_us": full["decode_us"] + window["decode_us"],
            "measured_sum_us": m_sum,
            "measured_mixed_us": m_mixed,
            "measured_ratio": m_mixed / m_sum,
        }
        for prefix, cost in (("model", tp1), ("mxfp4", tp1_fp4)):
            alone = one_pass_us(cost, chunk, cached, 0, 0) + one_pass_us(cost, 0, 0, batch, context)
            rules = {"one_pass": one_pass_us(cost, chunk, cached, batch, context)}
            if not cached:  # the mocker charges every chunk its whole prompt's mean attention span
                rules["mocker"] = mocker_us(cost, chunk, batch, context)
            if prefix == "model":
                row |= {
                    "model_chunk_us": one_pass_us(cost, chunk, cached, 0, 0),
                    "model_decode_us": one_pass_us(cost, 0, 0, batch, context),
                }
            for rule, us in rules.items():
                row[f"{prefix}_{rule}_ratio"] = us / alone
                if prefix == "model":
                    row[f"model_{rule}_us"] = us
                    row[f"{rule}_vs_measured"] = us / m_mixed
                    row[f"{rule}_ratio_vs_measured_ratio"] = row[f"model_{rule}_ratio"] / row["measured_ratio"]
        rows.append(row)

    first = [r for r in rows if r["cached"] == 0]
    keys = (
        "measured_ratio",
        "model_one_pass_ratio",
        "model_mocker_ratio",
        "one_pass_ratio_vs_measured_ratio",
        "mocker_ratio_vs_measured_ratio",
        "one_pass_vs_measured",
        "mocker_vs_measured",
        "mxfp4_one_pass_ratio",
        "mxfp4_mocker_ratio",
    )
    summary: dict = {key: _spread([r[key] for r in first]) for key in keys}
    summary["cases"] = len(first)
    for rule in ("one_pass", "mocker"):
        summary[f"{rule}_ratio_within_15pct"] = sum(
            abs(r[f"{rule}_ratio_vs_measured_ratio"] - 1) <= WITHIN for r in first
        )
    prefixed = [r for r in rows if r["cached"]]
    summary["prefixed_cases"] = len(prefixed)
    summary["prefixed_one_pass_ratio_vs_measured_ratio"] = _spread(
        [r["one_pass_ratio_vs_measured_ratio"] for r in prefixed]
    )
    return rows, summary


def lockstep() -> list[dict]:
    """Rank 1's measured step beside rank 0's chunk, and the model's under the lockstep the mocker applies."""
    doc = json.loads((LOCKSTEP / "results.json").read_text())
    measured = {(r["layer"], r["scenario"], r["chunk"], r["batch"]): r for r in doc["rows"]}
    context = doc["context"]
    adp = model(PoolLayout(tp=2, attention_dp=True))

    def pair(scenario: str, chunk: int, batch: int, rank: str) -> float:
        return sum(measured[(layer, scenario, chunk, batch)][f"{rank}_step_us"] for layer in ("full", "window"))

    rows = []
    for layer, scenario, chunk, batch in measured:
        if layer != "full" or scenario != "chunk0":
            continue
        m_base, m_rank1 = pair("decode", 0, batch, "rank1"), pair(scenario, chunk, batch, "rank1")
        decode = one_pass_us(adp, 0, 0, batch, context)
        rank1 = mocker_us(adp, chunk, batch, context)  # lockstep: rank 1 waits for rank 0's mixed step
        every = one_pass_us(adp, chunk, 0, batch, context)
        rows.append(
            {
                "chunk": chunk,
                "batch": batch,
                "context": context,
                "measured_rank0_us": pair(scenario, chunk, batch, "rank0"),
                "measured_rank1_no_chunk_us": m_base,
                "measured_rank1_rank0_chunk_us": m_rank1,
                "measured_rank1_slowdown": m_rank1 / m_base,
                "measured_every_rank_chunk_us": pair("chunk_all", chunk, batch, "rank1"),
                "model_decode_us": decode,
                "model_rank1_us": rank1,
                "model_rank1_slowdown": rank1 / decode,
                "model_every_rank_one_pass_us": every,
                "model_vs_measured_rank1": rank1 / m_rank1,
                "model_vs_measured_decode": decode / m_base,
                "model_vs_measured_slowdown": (rank1 / decode) / (m_rank1 / m_base),
                "model_one_pass_vs_measured_every_rank": every / pair("chunk_all", chunk, batch, "rank1"),
            }
        )
    return rows


def main() -> None:
    rows, summary = mixed_step()
    locks = lockstep()
    (HERE / "model_compare.json").write_text(
        json.dumps({"about": __doc__, "mixed_step": rows, "summary": summary, "lockstep": locks}, indent=1) + "\n"
    )
    print(
        "| chunk | after | batch | context | measured mixed/sum | model one-pass mixed/sum | one-pass / measured "
        "| model mocker mixed/sum | mocker / measured | MXFP4 one-pass | MXFP4 mocker |"
    )
    print("|" + "---:|" * 11)
    for r in rows:
        mocker = [f"{r[k]:.2f}" if k in r else "-" for k in MOCKER_COLUMNS]
        print(
            f"| {r['chunk']} | {r['cached']} | {r['batch']} | {r['context']} | {r['measured_ratio']:.2f} "
            f"| {r['model_one_pass_ratio']:.2f} | {r['one_pass_ratio_vs_measured_ratio']:.2f} | {mocker[0]} "
            f"| {mocker[1]} | {r['mxfp4_one_pass_ratio']:.2f} | {mocker[2]} |"
        )
    print(json.dumps(summary, indent=1))
    print(
        "\n| chunk on rank 0 | batch per rank | measured: rank 1, no chunk | measured: rank 1, rank 0 has a chunk "
        "| measured slowdown | model: decode step | model: rank 1 (lockstep, mocker rule) | model slowdown "
        "| model / measured, rank 1 with the chunk beside | model / measured, no chunk "
        "| model / measured slowdown |"
    )
    print("|" + "---:|" * 11)
    for r in locks:
        print(
            f"| {r['chunk']} | {r['batch']} | {r['measured_rank1_no_chunk_us']:.0f} "
            f"| {r['measured_rank1_rank0_chunk_us']:.0f} | {r['measured_rank1_slowdown']:.2f}x "
            f"| {r['model_decode_us']:.0f} | {r['model_rank1_us']:.0f} | {r['model_rank1_slowdown']:.2f}x "
            f"| {r['model_vs_measured_rank1']:.2f} | {r['model_vs_measured_decode']:.2f} "
            f"| {r['model_vs_measured_slowdown']:.2f} |"
        )


if __name__ == "__main__":
    main()
