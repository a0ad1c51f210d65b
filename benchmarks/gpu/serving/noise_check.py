"""How far random-weight gpt-oss-120b amplifies rounding, and whether the paged runner adds more than that.

    python -m benchmarks.gpu.serving.noise_check --out DIR

runner_check's paged-against-contiguous check compares two attention kernels (the runner's varlen flash over
gathered K/V, the benchmarks' FlexAttention over the contiguous sequence), each within 3.3e-3 of float32.
Whether its disagreement is a bug or rounding amplified through random layers (top-4 routing flips on
near-ties) is settled here by a control: one sequence, one forward pass each, through the same model with
three correct attention kernels (FlexAttention, varlen flash, float32 masked), at 1, 2, 4, 8 and 36 layers.
If the correct kernels disagree among themselves as much as the runner does with the reference, the
runner's difference is the model's amplification; then the runner is checked against a reference of its
own kernel (runner_check with the varlen kernel on the contiguous side), where only the paging, chunking
and batching differ. Writes DIR/noise_check.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.gpu.common.checks import relative_error
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.serving.routing_gaps import with_routing_gaps
from benchmarks.gpu.forward_step.model import chunk_steps, forward
from benchmarks.gpu.serving import runner_check
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.block_manager import KvCacheManager
from dynamo_oss.engines.gptoss.model_runner import step_batch
from dynamo_oss.engines.gptoss.sampling import SamplingParams
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from dynamo_oss.engines.gptoss.sequence import Sequence, StopRule
from dynamo_oss.engines.gptoss.forward import attention, layer
from dynamo_oss.engines.gptoss.forward.model import Model

LAYERS = [1, 2, 4, 8, 36]
TOKENS = 300


def truncated(model: Model, layers: int) -> Model:
    m = model.m.model_copy(update={"num_layers": layers})
    kept = (model.layers[:layers], model.experts[:layers])
    return Model(m, *kept, model.embedding, model.final_norm, model.head, model.cos, model.sin)


def one_row(kernel: str, model: Model, tokens: int):  # noqa: ANN201 - an AttendFor
    cu = torch.tensor([0, tokens], device="cuda", dtype=torch.int32)
    rows = [(0, tokens, 0, tokens)]

    def attend_for(index: int) -> layer.Attend:
        window, sinks = model.window(index), model.layers[index].sinks

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if kernel == "masked":
                return attention.masked_paged_attention(q, k, v, rows, window, sinks)
            return attention.paged_attention(q, k, v, cu, cu, rows, window, sinks)

        return attend

    return attend_for


def kernels_against_each_other(model: Model) -> dict:
    tokens = torch.randint(
        0, model.m.vocab_size, (TOKENS,), device="cuda", generator=torch.Generator("cuda").manual_seed(9)
    )
    positions = torch.arange(TOKENS, device="cuda")
    out = {}
    for layers in LAYERS:
        few = truncated(model, layers)
        with torch.no_grad():
            flex = forward(few, tokens, chunk_steps(few, None, TOKENS, 0, "cuda"), slice(None)).float()
            varlen = few.forward(tokens, positions, one_row("varlen", few, TOKENS), slice(None)).float()
            masked = few.forward(tokens, positions, one_row("masked", few, TOKENS), slice(None)).float()
        out[str(layers)] = {
            "flex_vs_masked": relative_error(flex, masked),
            "varlen_vs_masked": relative_error(varlen, masked),
            "flex_vs_varlen": relative_error(flex, varlen),
            "argmax_flex_vs_masked": float((flex.argmax(-1) == masked.argmax(-1)).float().mean()),
        }
        print(layers, out[str(layers)], flush=True)
    return out


def paged_against_own_kernel(layers: int) -> dict:
    """runner_check's paged check with the contiguous side on the runner's own varlen kernel."""

    def whole(model: Model, padded: torch.Tensor, steps: int, rows: slice) -> torch.Tensor:
        positions = torch.arange(len(padded), device="cuda")
        return model.forward(padded, positions, one_row("varlen", model, len(padded)), rows)

    flex = (runner_check.chunk_steps, runner_check.forward)
    runner_check.chunk_steps = lambda model, caches, padding, cached, device: padding
    runner_check.forward = whole
    few = GPT_OSS_120B.model_copy(update={"num_layers": layers})
    runner, layout = runner_check.runner_for(few, runner_check.ARGS)
    try:
        checked = runner_check.paged_against_contiguous(few, runner, layout)
    finally:
        runner_check.chunk_steps, runner_check.forward = flex
        runner.close()
    keep = ("logits_relative_error", "worst_row_relative_error", "argmax_agreement", "prefix_hit_tokens", "pass")
    print("paged vs varlen,", layers, "layers", {k: checked[k] for k in keep}, flush=True)
    return {k: checked[k] for k in keep}


def localized(layers: int) -> dict:
    """runner_check's requests through the scheduler, each sampled row's error against the runner's own kernel
    over the whole sequence, with the step it was in: the rows past rounding, to find what they share. Then
    each request alone, unbatched and without reuse."""
    few = GPT_OSS_120B.model_copy(update={"num_layers": layers})
    runner, layout = runner_check.runner_for(few, runner_check.ARGS)
    rng = np.random.default_rng(5)
    full = {
        name: rng.integers(0, few.vocab_size, n + runner_check.DECODED).tolist()
        for name, n in runner_check.PROMPTS.items()
    }
    name, source, shared, own = runner_check.SHARED
    full[name] = full[source][:shared] + rng.integers(0, few.vocab_size, own + runner_check.DECODED).tolist()
    prompt_len = {**runner_check.PROMPTS, name: shared + own}

    def sequence(request: str) -> Sequence:
        stop = StopRule(max_tokens=runner_check.DECODED, stop_tokens=frozenset())
        prompt = full[request][: prompt_len[request]]
        return Sequence(request, prompt, len(prompt), SamplingParams(0), stop, 4096)

    def run(requests: list[str], reuse: bool, late: str | None) -> list[dict]:
        kv = KvCacheManager(layout["pools"], layout["blocks"], reuse=reuse)
        scheduler = Scheduler(Limits(runner_check.ARGS.max_batch_size, runner_check.STEP_BUDGET), kv)
        for request in requests:
            scheduler.add(sequence(request))
        out, step_number, added = [], 0, late is None
        while scheduler.has_work:
            step = scheduler.schedule()
            batch = step_batch(step)
            rows = [i for i, row in enumerate(batch.rows) if row.sampling is not None]
            logits = runner.logits(batch, rows)
            shape = [(r.request_id, r.start, len(r.token_ids)) for r in batch.rows]
            fed = []
            for k, i in enumerate(rows):
                row = batch.rows[i]
                position = row.start + len(row.token_ids) - 1
                fed.append(full[row.request_id][position + 1])
                out.append(
                    {
                        "request": row.request_id,
                        "position": position,
                        "step": step_number,
                        "row": i,
                        "logits": logits[k],
                        "tables": {n: (t[0], list(t[1])) for n, t in row.tables.items()},
                        "shape": shape,
                    }
                )
            scheduler.postprocess(step, fed)
            step_number += 1
            if not added and all(seq.request_id != source or not seq.is_prefilling for seq in scheduler.running):
                scheduler.add(sequence(late))
                added = True
        return out

    references = {}
    for request, tokens in full.items():
        ids = torch.tensor(tokens, device="cuda")
        with torch.no_grad():
            references[request] = runner.model.forward(
                ids, torch.arange(len(ids), device="cuda"), one_row("varlen", runner.model, len(ids)), slice(None)
            ).float()

    def judged(rows: list[dict]) -> list[dict]:
        for row in rows:
            row["error"] = relative_error(row.pop("logits"), references[row["request"]][row["position"]])
        return rows

    def routing_gaps(request: str) -> torch.Tensor:
        """[layers, positions]: each token's gap between its 4th and 5th router logit, in the reference pass
        (a near-tie is where rounding elsewhere can flip one of its experts)."""
        ids = torch.tensor(full[request], device="cuda")
        positions = torch.arange(len(ids), device="cuda")
        with torch.no_grad():
            _, gaps = with_routing_gaps(
                lambda: runner.model.forward(ids, positions, one_row("varlen", runner.model, len(ids)), slice(-1, None))
            )
        return gaps

    batched = judged(run(list(runner_check.PROMPTS), True, name))
    alone = {request: max(r["error"] for r in judged(run([request], False, None))) for request in full}
    gaps = {request: routing_gaps(request) for request in full}
    runner.close()
    for row in batched:
        row["smallest_routing_gap"] = float(gaps[row["request"]][:, row["position"]].min())
    every = torch.cat([g.flatten() for g in gaps.values()])
    bad = [row for row in batched if row["error"] > 0.02]
    for row in bad[:12]:
        print(row, flush=True)
    good_gaps = [row["smallest_routing_gap"] for row in batched if row["error"] <= 0.02]
    return {
        "rows": len(batched),
        "bad_rows": bad,
        "routing_gap_median": float(every.median()),
        "routing_gap_smallest_of_good_rows": min(good_gaps),
        "alone_worst_error": alone,
        "batched_worst_error": {r: max(x["error"] for x in batched if x["request"] == r) for r in full},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--paged-only", action="store_true", help="only the paged check on the runner's own kernel")
    parser.add_argument("--localize", action="store_true", help="each sampled row's error, with its step")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report: dict = {**device_header()}
    if args.localize:
        report["localized"] = localized(2)
        (args.out / "noise_check.json").write_text(json.dumps(report, indent=1, default=str))
        print({k: v for k, v in report["localized"].items() if k != "bad_rows"}, flush=True)
        return
    if not args.paged_only:
        runner, _ = runner_check.runner_for(GPT_OSS_120B, runner_check.ARGS)
        report["kernels_against_each_other"] = kernels_against_each_other(runner.model)
        runner.close()
        del runner
        torch.cuda.empty_cache()
    # From 2 layers: the first is a window layer, and a model without a full-attention layer has no full pool.
    report["paged_against_own_kernel"] = {str(n): paged_against_own_kernel(n) for n in (2, 4, 36)}
    report["total_s"] = time.perf_counter() - started
    (args.out / "noise_check.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
