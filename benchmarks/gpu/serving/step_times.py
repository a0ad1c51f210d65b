"""The gptoss engine's own forward steps timed on one GPU as its runner serves them, beside the
performance model's step for the same batch: the engine's step profile, which the two-GPU study's
predictions are to be calibrated on (issue 44, item 4), as TensorRT-LLM's were on published figures.

    python -m benchmarks.gpu.serving.step_times --out DIR

Each case is one `GpuModelRunner.execute` of a StepBatch laid out as the scheduler lays one out (block
tables of both pools, every row sampling greedily), timed as the median wall time of REPEATS calls after
WARMUP; execute returns the sampled tokens to the host, so each call waits for its step. That is what a
step costs the engine in serving, host work included (building the step's index, launches, sampling):
a CUDA-graph replay where the runner has one for the step, eager otherwise (each row says which).
Random weights of gpt-oss-120b's shapes, KV pools zeroed (a timing run reads no cache it did not write
a value into, so NaN logits are not a concern, but zeros keep the sampling's work ordinary).

The model's step is dynamo_oss.perf's CostModel for one H200, TP1, MXFP4 experts, BF16 KV,
TensorRT-LLM's fitted factors, this engine file's token budget: its whole step (with
`sequence_overhead`, the host time per sequence it charges TensorRT-LLM), since the measurement
includes the engine's host time too. Writes DIR/step_times.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.gpu.common.results import markdown_table
from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.capacity import plan_kv_blocks
from dynamo_oss.engines.gptoss.config import read_engine_args
from dynamo_oss.engines.gptoss.gpu_runner import GpuModelRunner
from dynamo_oss.engines.gptoss.graph_inputs import decode_inputs
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import BatchRow, RunnerSetup, StepBatch
from dynamo_oss.engines.gptoss.sampling import SamplingParams
from dynamo_oss.perf.costs import CostModel, attention_spans, fitted_factors
from dynamo_oss.perf.layout import PoolLayout, Precision

REPO = Path(__file__).resolve().parents[3]
ENGINE_FILE = REPO / "graphs" / "gptoss" / "engines" / "gpt-oss-120b-h200-agg.yaml"
WARMUP, REPEATS = 2, 5
DECODE = [(batch, context) for context in (1024, 8192, 32768) for batch in (1, 8, 32, 64, 128, 256)]
PREFILL = [(tokens, prefix) for prefix in (0, 16384) for tokens in (512, 2048, 8192)]
GREEDY = SamplingParams(temperature=0.0)


class Blocks:
    """Hands out each pool's blocks in order, so every row of a case has its own."""

    def __init__(self) -> None:
        self.next = {"full": 0, "window": 0}

    def table(self, name: str, first: int, end: int) -> tuple[int, list[int]]:
        start = self.next[name]
        self.next[name] += end - first
        return first, list(range(start, start + end - first))


def row(request_id: str, pools: dict, blocks: Blocks, start: int, tokens: int) -> BatchRow:
    """A row computing positions start..start+tokens-1, its tables holding what those read."""
    tables = {name: blocks.table(name, *_span(pool.blocks_read(start, start + tokens))) for name, pool in pools.items()}
    return BatchRow(request_id, [0] * tokens, start, tables, GREEDY)


def _span(blocks: range) -> tuple[int, int]:
    return blocks.start, blocks.stop


def fits(pools: dict, capacity: dict[str, int], rows: int, start: int, tokens: int) -> bool:
    return all(rows * len(pool.blocks_read(start, start + tokens)) <= capacity[name] for name, pool in pools.items())


def timed(runner: GpuModelRunner, batch: StepBatch) -> list[float]:
    for _ in range(WARMUP):
        runner.execute(batch)
    walls = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        runner.execute(batch)
        walls.append((time.perf_counter() - started) * 1e3)
    return walls


def model_ms(cost: CostModel, kind: str, batch: int, context: int, tokens: int) -> float:
    if kind == "decode":
        terms = cost.step_terms(decode_seqs=batch, decode_context=context)
    else:
        full, window = attention_spans(context, tokens, GPT_OSS_120B.sliding_window)
        terms = cost.step_terms(
            prefill_tokens=tokens, prefill_full_span=full, prefill_window_span=window, prefill_seqs=1
        )
    return 1e3 * sum(float(value) for value in terms.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shape, engine_args = GPT_OSS_120B, read_engine_args(ENGINE_FILE)
    pools = kv_pools(shape, engine_args.kv_cache_config.tokens_per_block)
    started = time.monotonic()
    runner = GpuModelRunner(RunnerSetup(shape, engine_args, pools, None))
    capacity = plan_kv_blocks(shape, pools, engine_args, runner.free_kv_bytes(), runner.max_seq_len)
    runner.allocate_kv(capacity)
    for pool in runner.kv.values():
        pool.zero_()
    cost = CostModel(
        shape,
        HARDWARE["h200"],
        PoolLayout(tp=1, max_num_tokens=engine_args.max_num_tokens),
        Precision(experts="mxfp4", kv_cache="bf16"),
        "trtllm",
        fitted_factors(),
    )
    report: dict = {
        "device": torch.cuda.get_device_name(),
        "engine_file": str(ENGINE_FILE.relative_to(REPO)),
        "kv_blocks": capacity,
        "start_s": round(time.monotonic() - started, 1),
        "warmup": WARMUP,
        "repeats": REPEATS,
        "rows": [],
    }
    cases = [("decode", batch, context, 1) for batch, context in DECODE]
    cases += [("prefill", 1, prefix, tokens) for tokens, prefix in PREFILL]
    for kind, batch, context, tokens in cases:
        if not fits(pools, capacity, batch, context, tokens) or batch > engine_args.max_batch_size:
            report["rows"].append({"kind": kind, "batch": batch, "context": context, "tokens": tokens, "skipped": "KV"})
            continue
        blocks = Blocks()
        step = StepBatch([row(f"r{i}", pools, blocks, context, tokens) for i in range(batch)])
        walls = timed(runner, step)
        measured = statistics.median(walls)
        predicted = model_ms(cost, kind, batch, context, tokens)
        report["rows"].append(
            {
                "kind": kind,
                "batch": batch,
                "context": context,
                "tokens": tokens,
                "graphed": runner.graphs is not None and decode_inputs(step.rows, runner.graphs.layout) is not None,
                "measured_ms": round(measured, 3),
                "walls_ms": [round(wall, 3) for wall in walls],
                "model_ms": round(predicted, 3),
                "measured_over_model": round(measured / predicted, 3),
            }
        )
        print(json.dumps(report["rows"][-1]), flush=True)
    runner.close()
    (args.out / "step_times.json").write_text(json.dumps(report, indent=1))
    done = [r for r in report["rows"] if "skipped" not in r]
    cells = [
        (
            r["kind"],
            r["batch"],
            r["context"],
            r["tokens"],
            r["graphed"],
            r["measured_ms"],
            r["model_ms"],
            r["measured_over_model"],
        )
        for r in done
    ]
    headers = ["step", "batch", "context", "new tokens", "graph", "engine ms", "model ms", "engine / model"]
    print(markdown_table(headers, cells))


if __name__ == "__main__":
    main()
