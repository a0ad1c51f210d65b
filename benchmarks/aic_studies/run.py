"""AIConfigurator beside the model on the 32k and agentic studies' layouts (issue 42, item 0).

The two studies rest on the performance model's step times; AIConfigurator 0.12.0 (NVIDIA's sizing tool,
TensorRT-LLM 1.3 kernels measured per GPU) gives its own. This sets them side by side where the studies'
answers are decided: one prefill pass of a long prompt (and of an agentic turn after its cached
conversation), and decode steps at long context, on one B200 and one H200 (TP1, FP8 KV, MXFP4 experts as
TensorRT-LLM runs them: W4A8 on Blackwell, W4A16 on Hopper), with the H200 measurement of
benchmarks/gpu/forward_step beside them where it has the same step; then the 32k study's layouts whole,
each tool's serving figures at the same concurrency.

    uv run python benchmarks/aic_studies/run.py --aic /tmp/aic/bin/python   # ask AIConfigurator again
    uv run python benchmarks/aic_studies/run.py                             # the tables from aic.json

AIConfigurator runs in its own environment (dynamo_oss/perf/aic.py says how to make one); its answers are
kept in aic.json here, so the tables need only this project.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from dynamo_oss.perf.aic import AIC_VERSION, AicEstimate, AicQuery, pool_fields, run_aic  # noqa: E402
from dynamo_oss.perf.costs import CostModel  # noqa: E402
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload  # noqa: E402
from dynamo_oss.perf.metrics import DEFINITIONS  # noqa: E402
from dynamo_oss.perf.replay import simulate  # noqa: E402

HERE = Path(__file__).resolve().parent
FP8 = Precision(kv_cache="fp8")
MEASURED = REPO / "benchmarks" / "gpu" / "forward_step" / "results.json"
# A prefill step: (label, prompt tokens, of them cached); a decode step: (label, batch, context).
PREFILLS = [
    ("8k prompt", 8192, 0),
    ("32k prompt", 32768, 0),
    ("64k prompt", 65536, 0),
    ("agentic turn: 5,400 new after 56,000 cached", 61400, 56000),
]
DECODES = [
    ("batch 1 at 32k", 1, 32768),
    ("batch 32 at 32k", 32, 32768),
    ("batch 128 at 32k", 128, 32768),
    ("agentic: batch 8 at 60k", 8, 60000),
    ("agentic: batch 32 at 60k", 32, 60000),
]
# The 32k study's layouts (benchmarks/isl32k: the aggregated recipe, the best aggregated layout and
# disaggregated splits near its front), 8 B200s, at two of its concurrencies, ISL 32k.
CONCURRENCIES = (64, 256)
OSLS = (256, 1024)


def one_gpu(hardware: str, role: str = "prefill") -> Layout:
    pools = {"prefill": PoolLayout(max_num_tokens=65536 + 1024), "decode": PoolLayout(max_batch=256)}
    return Layout(hardware=hardware, precision=FP8, pools=pools)


def study_layouts() -> dict[str, Layout]:
    agg = {
        "agg 8 x TP1": {"agg": PoolLayout(workers=8)},
        "agg recipe 2 x TP4/EP4/ADP": {
            "agg": PoolLayout(workers=2, tp=4, attention_dp=True, max_batch=256, max_num_tokens=16384)
        },
        "disagg 6P TP1 + 2D TP1": {
            "prefill": PoolLayout(workers=6, max_num_tokens=16384),
            "decode": PoolLayout(workers=2, max_batch=256),
        },
        "disagg 4P TP1 + 1D TP4/EP4/ADP": {
            "prefill": PoolLayout(workers=4, max_num_tokens=16384),
            "decode": PoolLayout(workers=1, tp=4, attention_dp=True, max_batch=256),
        },
    }
    return {name: Layout(hardware="b200", precision=FP8, pools=pools) for name, pools in agg.items()}


def step_queries() -> list[AicQuery]:
    queries = []
    for hardware in ("b200", "h200"):
        fields = pool_fields(one_gpu(hardware), "prefill")
        for label, isl, cached in PREFILLS:
            queries.append(
                AicQuery(
                    key=f"{hardware} prefill {label}",
                    mode="static_ctx",
                    **fields,
                    isl=isl,
                    osl=2,
                    prefix=cached,
                    batch_size=1,
                )
            )
        for label, batch, context in DECODES:
            queries.append(
                AicQuery(
                    key=f"{hardware} decode {label}", mode="static_gen", **fields, isl=context, osl=2, batch_size=batch
                )
            )
    return queries


def layout_queries() -> list[AicQuery]:
    queries = []
    for name, layout in study_layouts().items():
        for osl in OSLS:
            for concurrency in CONCURRENCIES:
                key = f"{name} osl {osl} c{concurrency}"
                if layout.mode == "agg":
                    pool = layout.pools["agg"]
                    batch = max(1, concurrency // (pool.workers * pool.ranks))
                    queries.append(
                        AicQuery(
                            key=key,
                            **pool_fields(layout, "agg"),
                            isl=32768,
                            osl=osl,
                            batch_size=batch,
                            ctx_tokens=pool.max_num_tokens,
                        )
                    )
                    continue
                prefill, decode = layout.pools["prefill"], layout.pools["decode"]
                p, d = pool_fields(layout, "prefill"), pool_fields(layout, "decode")
                queries.append(
                    AicQuery(
                        key=key,
                        mode="disagg",
                        **d,
                        isl=32768,
                        osl=osl,
                        batch_size=max(1, concurrency // (decode.workers * decode.ranks)),
                        prefill_tp_size=p["tp_size"],
                        prefill_attention_dp_size=p["attention_dp_size"],
                        prefill_moe_tp_size=p["moe_tp_size"],
                        prefill_moe_ep_size=p["moe_ep_size"],
                        prefill_batch_size=1,
                        prefill_num_workers=prefill.workers,
                        decode_tp_size=d["tp_size"],
                        decode_attention_dp_size=d["attention_dp_size"],
                        decode_moe_tp_size=d["moe_tp_size"],
                        decode_moe_ep_size=d["moe_ep_size"],
                        decode_batch_size=max(1, concurrency // (decode.workers * decode.ranks)),
                        decode_num_workers=decode.workers,
                    )
                )
    return queries


# ---- the model's side --------------------------------------------------------------------------


def model_steps() -> dict[str, float]:
    out = {}
    for hardware in ("b200", "h200"):
        prefill, decode = (CostModel.for_pool(one_gpu(hardware), role) for role in ("prefill", "decode"))
        for label, isl, cached in PREFILLS:
            out[f"{hardware} prefill {label}"] = prefill.prompt_ms(isl, cached)
        for label, batch, context in DECODES:
            out[f"{hardware} decode {label}"] = float(decode.decode_ms(batch, context))
    return out


def measured_steps() -> dict[str, float]:
    """benchmarks/gpu/forward_step's H200 times of the same steps (BF16 KV, PyTorch and triton_kernels)."""
    rows = json.loads(MEASURED.read_text())["rows"]
    found = {}
    for row in rows:
        if row["kind"] == "prefill" and row["batch"] == 1:
            label = {8192: "8k prompt", 32768: "32k prompt"}.get(row["context"])
            if label:
                found[f"h200 prefill {label}"] = row["time_ms"]
        if row["kind"] == "decode" and row["context"] == 32768 and row["batch"] in (1, 32):
            found[f"h200 decode batch {row['batch']} at 32k"] = row["time_ms"]
    return found


def model_layouts() -> dict[str, dict]:
    out = {}
    for name, layout in study_layouts().items():
        for osl in OSLS:
            points = simulate(layout, Workload(isl=32768, osl=osl), CONCURRENCIES)
            for concurrency, point in zip(CONCURRENCIES, points, strict=True):
                out[f"{name} osl {osl} c{concurrency}"] = point.model_dump()
    return out


# ---- the report ---------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _ratio(value: float | None, model: float) -> str:
    return "-" if value is None or not model else f"{value / model:.2f}x"


def markdown(saved: dict) -> str:
    steps, measured = saved["model_steps"], saved["measured_steps"]
    estimates = {e["key"]: AicEstimate.model_validate(e) for e in saved["aic"]["estimates"]}
    lines = [
        "# AIConfigurator beside the model on the studies' layouts",
        "",
        f"`uv run python benchmarks/aic_studies/run.py --aic PYTHON` (AIConfigurator {saved['aic']['aiconfigurator']},"
        " its TensorRT-LLM database as it ships; the model as committed).",
        "",
        "## Steps: one GPU, TP1, FP8 KV cache",
        "",
        "AIConfigurator: `cli_estimate` static_ctx (one prefill pass; `prefix` tokens of it cached) or static_gen "
        "(one decode step at that context: its TPOT at OSL 2), its MoE kernel named (W4A8 MXFP4 x MXFP8 on "
        "Blackwell, W4A16 on Hopper, as TensorRT-LLM runs them). Measured: benchmarks/gpu/forward_step on an H200 "
        "(BF16 KV, PyTorch flash / FlexAttention and triton_kernels experts, not TensorRT-LLM's kernels). In ms.",
        "",
        "| GPU | step | model | AIConfigurator | AIC / model | its attention, model / AIC | "
        "its experts, model / AIC | measured (H200) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, model in steps.items():
        hardware, _, label = key.split(" ", 2)
        estimate = estimates.get(key)
        aic = None
        if estimate and estimate.error is None:
            aic = estimate.ttft_ms if estimate.ttft_ms else estimate.tpot_ms
        split = saved["model_terms"].get(key, {})
        breakdown = (estimate.breakdown or {}) if estimate else {}
        attention = sum(v for k, v in breakdown.items() if k.endswith("attention"))
        experts = sum(v for k, v in breakdown.items() if k.endswith("_moe"))
        lines.append(
            f"| {hardware.upper()} | {label} | {_ms(model)} | {_ms(aic)} | {_ratio(aic, model)} | "
            f"{_ms(split.get('attention'))} / {_ms(attention or None)} | {_ms(split.get('experts'))} / "
            f"{_ms(experts or None)} | {_ms(measured.get(key))} |"
        )
    lines += [
        "",
        "## The 32k study's layouts: 8 x B200, ISL 32,768",
        "",
        "Model: Dynamo's offline replay at the model's speeds (benchmarks/isl32k's method), tok/s/user "
        f"{DEFINITIONS['tok_s_user']}. AIConfigurator: `cli_estimate` agg (one worker's in-flight batching at "
        "the concurrency's share of it) or disagg (its rate-matched prefill and decode workers), tok/s/user its "
        "1000 / TPOT (InferenceMAX's interactivity: the mean ITL's inverse, close to aiperf's at steady "
        "decode), tok/s/GPU its output tokens per second per GPU.",
        "",
        "| layout | OSL | concurrency | tok/s/user model / AIC | tok/s/GPU model / AIC | TTFT ms model (p50) / AIC |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, point in saved["model_layouts"].items():
        name, rest = key.split(" osl ")
        osl, concurrency = rest.split(" c")
        estimate = estimates.get(key)
        ok = estimate is not None and estimate.error is None
        aic_user = f"{estimate.tok_s_user:,.0f}" if ok and estimate.tok_s_user else "-"
        aic_gpu = f"{estimate.tok_s_gpu:,.0f}" if ok and estimate.tok_s_gpu else "-"
        aic_ttft = f"{estimate.ttft_ms:,.0f}" if ok and estimate.ttft_ms else "-"
        lines.append(
            f"| {name} | {osl} | {concurrency} | {point['tok_s_user']:,.0f} / {aic_user} | "
            f"{point['tok_s_gpu']:,.0f} / {aic_gpu} | {point['ttft_p50_ms']:,.0f} / {aic_ttft} |"
        )
    errors = [e for e in estimates.values() if e.error]
    if errors:
        lines += ["", "AIConfigurator gave no estimate for:", ""]
        lines += [f"- {e.key}: {e.error[:300]}" for e in errors]
    return "\n".join(lines) + "\n"


def model_terms() -> dict[str, dict[str, float]]:
    """The model's attention and expert time in each step (ms), to set beside AIConfigurator's operations."""
    from dynamo_oss.perf.costs import attention_spans

    out = {}
    for hardware in ("b200", "h200"):
        prefill, decode = (CostModel.for_pool(one_gpu(hardware), role) for role in ("prefill", "decode"))
        for label, isl, cached in PREFILLS:
            new = isl - cached
            full, win = attention_spans(float(cached), float(new), prefill.shape.sliding_window)
            terms = prefill.step_terms(
                prefill_tokens=new, prefill_full_span=full, prefill_window_span=win, prefill_seqs=1
            )
            out[f"{hardware} prefill {label}"] = {
                "attention": 1e3 * float(terms["prefill_attention"]),
                "experts": 1e3 * float(terms["experts"]),
            }
        for label, batch, context in DECODES:
            terms = decode.step_terms(decode_seqs=batch, decode_context=context)
            out[f"{hardware} decode {label}"] = {
                "attention": 1e3 * float(terms["decode_attention"]),
                "experts": 1e3 * float(terms["experts"]),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--aic", type=Path, metavar="PYTHON", help=f"ask AIConfigurator {AIC_VERSION} again with PYTHON"
    )
    args = parser.parse_args()
    path = HERE / "aic.json"
    if args.aic:
        reference = run_aic(args.aic, step_queries() + layout_queries())
        aic = reference.model_dump()
    elif path.exists():
        aic = json.loads(path.read_text())["aic"]
    else:
        parser.error("no aic.json here yet: run with --aic PYTHON first")
    saved = {
        "aic": aic,
        "model_steps": model_steps(),
        "model_terms": model_terms(),
        "measured_steps": measured_steps(),
        "model_layouts": model_layouts(),
    }
    path.write_text(json.dumps(saved, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(saved))
    print(f"wrote {HERE / 'results.md'} and {path.name}")


if __name__ == "__main__":
    main()
