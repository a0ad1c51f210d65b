"""What dynamo_oss.perf predicts for each measured whole step, and the ratio, same layout and precision.

    PYTHONPATH=. python benchmarks/gpu/forward_step/model_compare.py

Reads results.json beside this file (whole gpt-oss-120b steps on one H200) and writes
comparison.json / comparison.csv; prints the markdown table RESULTS.md holds. The model is the
project's CostModel for one H200, TP1, MXFP4 experts, BF16 KV, TensorRT-LLM's fitted factors,
max_num_tokens 20000 (the H200 prefill engine config the measurement chunks by). Decode rows are
`decode_ms(batch, context)`; prefill rows `prompt_ms(prompt)` (the model splits a prompt into equal
chunks: 32k as 2 x 16384 where the engine cuts 20000 + 12768; same count of chunks). The measured
steps are CUDA-graph replays with no host work, so beside the model's whole step stands its step
without `sequence_overhead` (host time per sequence: scheduling, sampling, streaming).

The model charges MXFP4 expert weight reads at the H200's expert_memory_mxfp4 (hopper_measured.json,
from ../mxfp4_experts); beside it stands the model as it was before that factor ("before": MXFP4
experts at expert_memory, the share BF16 grouped GEMMs reach), so the ratios show what it moved.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu.common.results import markdown_table, write_csv
from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.perf.costs import CostModel, Factors, attention_spans, fitted_factors
from dynamo_oss.perf.layout import PoolLayout, Precision

HERE = Path(__file__).parent
CHUNK = 20000
HOST = "sequence_overhead"


def cost_model(factors: Factors) -> CostModel:
    pool = PoolLayout(tp=1, max_num_tokens=CHUNK)
    precision = Precision(experts="mxfp4", kv_cache="bf16")
    return CostModel(GPT_OSS_120B, HARDWARE["h200"], pool, precision, "trtllm", factors)


def before_mxfp4_factor() -> Factors:
    """The committed factors with MXFP4 experts read at BF16's expert_memory, as before issue 27."""
    factors = fitted_factors()
    return factors.model_copy(update={"hopper": factors.hopper.model_copy(update={"expert_memory_mxfp4": None})})


def predicted_terms_ms(cost: CostModel, row: dict) -> dict[str, float]:
    """The model's terms for the row's step (ms), summed over a prompt's chunks for prefill."""
    if row["kind"] == "decode":
        terms = cost.step_terms(decode_seqs=row["batch"], decode_context=row["context"])
        return {name: 1e3 * float(value) for name, value in terms.items()}
    prompt = row["prompt"]
    chunks = -(-prompt // cost.pool.max_num_tokens)
    full, window = attention_spans(0, prompt, GPT_OSS_120B.sliding_window)
    terms = cost.step_terms(
        prefill_tokens=prompt / chunks, prefill_full_span=full, prefill_window_span=window, prefill_seqs=1 / chunks
    )  # prompt_ms's own arguments
    return {name: 1e3 * chunks * float(value) for name, value in terms.items()}


def compare(rows: list[dict]) -> list[dict]:
    """Each measured step beside the model's, now and before the MXFP4 factor; the measured experts' part
    is the step less its `_no_experts` twin."""
    models = {"model": cost_model(fitted_factors()), "before": cost_model(before_mxfp4_factor())}
    without = {
        (r["kind"].removesuffix("_no_experts"), r["batch"], r["context"]): r["time_ms"]
        for r in rows
        if r["kind"].endswith("_no_experts") and "time_ms" in r
    }
    out = []
    for row in rows:
        if "skipped" in row or row["kind"] not in ("decode", "prefill"):
            continue
        entry = {key: row[key] for key in ("kind", "batch", "context", "prompt", "time_ms")}
        rest = without.get((row["kind"], row["batch"], row["context"]))
        entry["measured_experts_ms"] = None if rest is None else row["time_ms"] - rest
        for prefix, cost in models.items():
            terms = predicted_terms_ms(cost, row)
            total = sum(terms.values())
            entry[f"{prefix}_ms"] = total
            entry[f"{prefix}_device_ms"] = total - terms[HOST]
            entry[f"{prefix}_over_measured"] = total / row["time_ms"]
            entry[f"{prefix}_device_over_measured"] = (total - terms[HOST]) / row["time_ms"]
            measured_experts = entry["measured_experts_ms"]
            entry[f"{prefix}_experts_over_measured"] = (
                None if measured_experts is None else (terms["experts"] / measured_experts)
            )
            entry[f"{prefix}_terms_ms"] = terms
        out.append(entry)
    return out


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(rows: list[dict]) -> str:
    headers = [
        "step",
        "batch",
        "context / prompt",
        "measured (ms)",
        "model (ms)",
        "model / measured",
        "model without host (ms)",
        "without host / measured",
        "before: without host / measured",
        "measured experts (ms)",
        "model experts (ms)",
        "model / measured experts",
        "before: model experts (ms)",
        "before: model / measured experts",
    ]
    cells = []
    for r in rows:
        cells.append(
            [
                r["kind"],
                r["batch"],
                r["context"],
                f"{r['time_ms']:.2f}",
                f"{r['model_ms']:.2f}",
                f"{r['model_over_measured']:.2f}",
                f"{r['model_device_ms']:.2f}",
                f"{r['model_device_over_measured']:.2f}",
                f"{r['before_device_over_measured']:.2f}",
                "-" if r["measured_experts_ms"] is None else f"{r['measured_experts_ms']:.2f}",
                f"{r['model_terms_ms']['experts']:.2f}",
                _ratio(r["model_experts_over_measured"]),
                f"{r['before_terms_ms']['experts']:.2f}",
                _ratio(r["before_experts_over_measured"]),
            ]
        )
    return markdown_table(headers, cells)


def main() -> None:
    measured = json.loads((HERE / "results.json").read_text())
    rows = compare(measured["rows"])
    efficiencies = {"model": fitted_factors().hopper, "before": before_mxfp4_factor().hopper}
    document = {
        "about": __doc__,
        "measured_on": measured["device"],
        "hopper": {name: e.model_dump() for name, e in efficiencies.items()},
        "rows": rows,
    }
    (HERE / "comparison.json").write_text(json.dumps(document, indent=1) + "\n")
    write_csv(HERE / "comparison.csv", [{k: v for k, v in r.items() if not k.endswith("terms_ms")} for r in rows])
    print(table(rows))


if __name__ == "__main__":
    main()
