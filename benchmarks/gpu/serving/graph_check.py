"""The gptoss runner's decode steps replayed from CUDA graphs against the same steps run eagerly (issue 44).

    python -m benchmarks.gpu.serving.graph_check --out DIR

(pydantic and triton_kernels on PYTHONPATH: .whl and .whl/vendor, as runner_check.) Random weights of
gpt-oss-120b's shapes, with 4 layers and then all 36, the runner's graphs captured for 1..64 rows. Each
case is one decode step of `batch` rows over a pool of random K/V (the rows' blocks scattered, the slots
past each row's context NaN), run eagerly (runner.logits: varlen flash over the
gathered K/V) and replayed (runner.graphs.logits: the paged decode kernel), and checked:
- logits: each row's relative error and argmax; on random weights a row is within rounding unless a top-4
  routing near-tie flips one of its experts (RESULTS.md), so each row past 2e-2 is shown with its smallest
  gap between 4th and 5th router logit over the layers (from the eager pass);
- K/V writes: the written slots are set to NaN before the replay, which must fill them (layer 0's, before
  any routing, within 2e-2 of the eager step's), and no block changes but the rows' and the scratch block
  (padding rows');
- execute(): a decode-only step's greedy tokens are the replay's argmax; a step with a 2-token row runs
  eagerly.
Cases: batch 1, 8, 64 at 1k and 8k context, and 5 and 50 rows of mixed contexts (padded to 8 and 64).
With 36 layers each timed case reports the step's wall time as the engine sees it (host work, copies and
the GPU, synchronised) eagerly and replayed, and the replay's device time (CUDA events). Writes
DIR/graph_check.json. Pass: every logit finite, every write check, and at 4 layers every row within 2e-2
or on a near-tie. At 36 layers rows are reported, not judged: near-ties compound over the layers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.serving.routing_gaps import with_routing_gaps
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.capacity import plan_kv_blocks
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.forward import experts as mxfp4_experts
from dynamo_oss.engines.gptoss.gpu_runner import GpuModelRunner
from dynamo_oss.engines.gptoss.kv_index import step_index
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import BatchRow, RunnerSetup, StepBatch
from dynamo_oss.engines.gptoss.sampling import SamplingParams

LARGEST = 64
ARGS = GptOssArgs.model_validate(
    {
        "max_batch_size": LARGEST,
        "max_num_tokens": 1024,
        "kv_cache_config": {"max_tokens": LARGEST * 8192 + 8192},
        "cuda_graph_config": {"batch_sizes": [1, 2, 4, 8, 16, 32, 64]},
    }
)
TIMED = [(1, 1024), (8, 1024), (64, 1024), (1, 8192), (8, 8192), (64, 8192)]
MIXED_CONTEXTS = [1, 31, 129, 300, 1000, 4000, 8192]
PADDED = [5, 50]  # rows of mixed contexts: replayed by the graphs of 8 and 64
TOLERANCE = 2e-2
NEAR_TIE = 0.03  # a 4th-to-5th router logit gap within about three BF16 steps (median gap: 0.078, RESULTS.md)
EAGER_REPEATS, REPLAY_REPEATS = 8, 30


def decode_rows(contexts: list[int], pools: dict, blocks: dict, rng: np.random.Generator) -> list[BatchRow]:
    """One decode row a context (its new token at position context - 1), each pool's blocks drawn at random."""
    free = {name: rng.permutation(count).tolist() for name, count in blocks.items()}
    rows = []
    for i, context in enumerate(contexts):
        tables = {}
        for name, pool in pools.items():
            first = pool.first_block_read(context - 1)
            tables[name] = (first, [free[name].pop() for _ in range(pool.blocks_for(context) - first)])
        token = int(rng.integers(0, GPT_OSS_120B.vocab_size))
        rows.append(BatchRow(f"r{i}", [token], context - 1, tables, SamplingParams(0)))
    return rows


def fill_pools(runner: GpuModelRunner, rows: list[BatchRow]) -> None:
    """Random K/V everywhere, then NaN past each row's last key (its new token's slot included, which the step
    writes). Not before a window: the eager path reads its table's whole first block and masks in the kernel
    (the graphs' kernel never reads there: decode_kernel_check poisons it)."""
    for tensor in runner.kv.values():
        tensor.normal_()
    for row in rows:
        for name, (_, blocks) in row.tables.items():
            offset = row.start % runner.setup.pools[name].block_tokens
            runner.kv[name][blocks[-1], :, :, offset:] = float("nan")


def block_checksums(tensor: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Each block's bits summed: a block that changed almost surely sums otherwise."""
    sums = []
    for start in range(0, tensor.shape[0], chunk):
        bits = tensor[start : start + chunk].reshape(min(chunk, tensor.shape[0] - start), -1).view(torch.int16)
        sums.append(bits.sum(dim=1, dtype=torch.int64))
    return torch.cat(sums)


def written_slots(runner: GpuModelRunner, rows: list[BatchRow]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each pool's (block, offset) the rows' new tokens write, from the eager path's index."""
    index = step_index(rows, runner.setup.pools)
    return {
        name: (torch.from_numpy(p.write_blocks).cuda(), torch.from_numpy(p.write_offsets).cuda())
        for name, p in index.pools.items()
    }


def check_case(runner: GpuModelRunner, rows: list[BatchRow]) -> dict:
    """One decode step eagerly and replayed: logits row by row, and where each wrote."""
    assert runner.graphs is not None, "the runner captured no graphs (its decode kernel check failed?)"
    fill_pools(runner, rows)
    sampling = list(range(len(rows)))
    batch = StepBatch(rows)
    slots = written_slots(runner, rows)
    before = {name: block_checksums(t) for name, t in runner.kv.items()}
    with torch.no_grad():
        eager, gaps = with_routing_gaps(lambda: runner.logits(batch, sampling))
        gaps = gaps.min(dim=0).values  # each token's closest tie over the layers
    eager_kv = {name: runner.kv[name][b, :, :, o].clone() for name, (b, o) in slots.items()}
    after_eager = {name: block_checksums(t) for name, t in runner.kv.items()}
    for name, (b, o) in slots.items():
        runner.kv[name][b, :, :, o] = float("nan")  # the replay must write them again
    poisoned = {name: block_checksums(t) for name, t in runner.kv.items()}
    replayed = runner.graphs.logits(rows, sampling)
    torch.cuda.synchronize()
    after_replay = {name: block_checksums(t) for name, t in runner.kv.items()}
    writes = {}
    for name, (b, o) in slots.items():
        allowed = set(b.tolist())
        scratch = runner.graphs.layout.scratch[name]
        by_eager = set(torch.nonzero(after_eager[name] != before[name]).flatten().tolist())
        by_replay = set(torch.nonzero(after_replay[name] != poisoned[name]).flatten().tolist())
        graph_kv, want = runner.kv[name][b, :, :, o].float(), eager_kv[name].float()
        layers = runner.setup.pools[name].layers
        writes[name] = {
            "eager_wrote_only_its_rows_blocks": by_eager <= allowed,
            "replay_wrote_only_its_rows_blocks_and_scratch": by_replay <= allowed | {scratch},
            "replay_filled_every_written_slot": bool(torch.isfinite(graph_kv).all()),
            "first_layer": layers[0],  # layer 0 (the window pool's) is before any routing: rounding only
            "first_layer_kv_relative_error": float((graph_kv[:, 0] - want[:, 0]).norm() / want[:, 0].norm()),
        }
    errors = ((replayed - eager).norm(dim=1) / eager.norm(dim=1)).tolist()
    agree = (replayed.argmax(1) == eager.argmax(1)).tolist()
    past = [
        {"row": i, "context": rows[i].start + 1, "error": errors[i], "argmax_equal": agree[i], "gap": float(gaps[i])}
        for i in range(len(rows))
        if not errors[i] < TOLERANCE
    ]
    tokens = runner.execute(batch)  # decode-only: replayed
    mixed = StepBatch([BatchRow("two", [rows[0].token_ids[0]] * 2, rows[0].start - 1, rows[0].tables, None)])
    mixed_ok = rows[0].start < 1 or runner.execute(mixed) == []  # a 2-token row that samples nothing: eager
    return {
        "rows": len(rows),
        "replayed_size": runner.graphs.layout.size_for(len(rows)),
        "contexts": sorted({row.start + 1 for row in rows}),
        "logits_finite": bool(torch.isfinite(eager).all() and torch.isfinite(replayed).all()),
        "median_row_error": statistics.median(errors),
        "rows_within_2e-2": sum(e < TOLERANCE for e in errors),
        "argmax_agreement": sum(agree) / len(agree),
        "rows_past_2e-2": past,
        "rows_past_2e-2_without_near_tie": [r["row"] for r in past if r["gap"] >= NEAR_TIE],
        "writes": writes,
        "execute_replays": tokens == replayed.argmax(1).tolist(),
        "mixed_step_eager": mixed_ok,
    }


def timed_case(runner: GpuModelRunner, rows: list[BatchRow]) -> dict:
    """The step's wall time eagerly and replayed (host work and GPU, synchronised), and the replay's device time."""
    assert runner.graphs is not None
    batch, sampling = StepBatch(rows), list(range(len(rows)))

    def wall(step, repeats: int) -> list[float]:  # noqa: ANN001
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        return times

    with torch.no_grad():
        eager = wall(lambda: runner.logits(batch, sampling), EAGER_REPEATS)
    replay = wall(lambda: runner.graphs.logits(rows, sampling), REPLAY_REPEATS)
    graph = runner.graphs.graphs[runner.graphs.layout.size_for(len(rows))]
    device = []
    for _ in range(REPLAY_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        device.append(start.elapsed_time(end) / 1e3)
    eager_ms, replay_ms = statistics.median(eager) * 1e3, statistics.median(replay) * 1e3
    return {
        "batch": len(rows),
        "context": rows[0].start + 1,
        "eager_wall_ms": eager_ms,
        "replay_wall_ms": replay_ms,
        "replay_device_ms": statistics.median(device) * 1e3,
        "speedup": eager_ms / replay_ms,
    }


def run_model(m: ModelShape, timing: bool) -> dict:
    started = time.perf_counter()
    pools = kv_pools(m, ARGS.kv_cache_config.tokens_per_block)
    runner = GpuModelRunner(RunnerSetup(m, ARGS, pools, None))
    blocks = plan_kv_blocks(m, pools, ARGS, runner.free_kv_bytes(), m.max_context)
    runner.allocate_kv(blocks)
    report: dict = {
        "layers": m.num_layers,
        "start_s": time.perf_counter() - started,
        "blocks": blocks,
        "free_kv_gib": runner.free_kv_bytes() / 2**30,
        "decode_kernel_check": runner.decode_check,
        "graphs": None if runner.graphs is None else list(runner.graphs.graphs),
        "cases": [],
        "timing": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "decode_kernel_check"}), flush=True)
    if runner.graphs is None:
        print("no graphs captured: the decode kernel failed its check", runner.decode_check, flush=True)
    rng = np.random.default_rng(m.num_layers)
    cases = [[context] * batch for batch, context in TIMED]
    cases += [rng.choice(MIXED_CONTEXTS, size=n).tolist() for n in PADDED]
    for contexts in cases if runner.graphs is not None else []:
        rows = decode_rows(contexts, pools, blocks, rng)
        case = check_case(runner, rows)
        report["cases"].append(case)
        print({k: v for k, v in case.items() if k != "rows_past_2e-2"}, flush=True)
        if timing and len(set(contexts)) == 1:
            report["timing"].append(timed_case(runner, rows))
            print(report["timing"][-1], flush=True)
    runner.close()
    del runner
    torch.cuda.empty_cache()
    report["total_s"] = time.perf_counter() - started
    return report


def passes(report: dict, judge_rows: bool) -> bool:
    ok = report["graphs"] is not None
    for case in report["cases"]:
        ok &= case["logits_finite"] and case["execute_replays"] and case["mixed_step_eager"]
        for writes in case["writes"].values():
            ok &= writes["eager_wrote_only_its_rows_blocks"] and writes["replay_wrote_only_its_rows_blocks_and_scratch"]
            ok &= writes["replay_filled_every_written_slot"]
            ok &= writes["first_layer"] != 0 or writes["first_layer_kv_relative_error"] < TOLERANCE
        if judge_rows:
            ok &= not case["rows_past_2e-2_without_near_tie"]
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", default="4,36", help="which models: 4 layers (judged row by row), 36 (timed)")
    args = parser.parse_args()
    layer_counts = [int(n) for n in args.layers.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    mxfp4_experts.pin_hopper_options()
    report: dict = {**device_header(), "engine_args": ARGS.model_dump()}
    verdicts = []
    for layers in layer_counts:
        m = GPT_OSS_120B.model_copy(update={"num_layers": layers})
        report[f"{layers}_layers"] = run_model(m, timing=layers == GPT_OSS_120B.num_layers)
        verdicts.append(passes(report[f"{layers}_layers"], judge_rows=layers < GPT_OSS_120B.num_layers))
        (args.out / "graph_check.json").write_text(json.dumps(report, indent=1, default=str))
    report["pass"] = all(verdicts)
    report["total_s"] = time.perf_counter() - started
    (args.out / "graph_check.json").write_text(json.dumps(report, indent=1, default=str))
    for layers in layer_counts:
        for row in report[f"{layers}_layers"]["timing"]:
            print(row)
    print({"pass": report["pass"], "total_s": round(report["total_s"])})


if __name__ == "__main__":
    main()
