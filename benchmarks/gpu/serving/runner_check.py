"""The gptoss engine's GPU model runner on one GPU, checked (issue 44, step 3a and 3b of the GPU brief).

    python -m benchmarks.gpu.serving.runner_check --out DIR

(triton_kernels on PYTHONPATH: benchmarks/gpu/mxfp4_experts/vendor.py.) Three checks, each printed and
written to DIR/runner_check.json:
1. paged against contiguous, on gpt-oss-120b's shapes and random weights: requests of different lengths
   (past the 128-token window, one reusing another's cached prefix) go through the engine's scheduler
   (chunked prefill beside decodes in a small token budget) and the runner's paged KV; the tokens fed
   back are fixed in advance (teacher forcing), so every sampled row's logits can be compared with the
   engine's forward pass over a contiguous cache (benchmarks/gpu/forward_step: FlexAttention over the
   whole sequence at once), position by position;
2. the engine core on the GPU: requests from Dynamo's request format (greedy and temperature, seeded and
   not, a stop token, different lengths) through EngineCore's step loop on its own thread; each must
   finish where its stop rule says, with its tokens in the vocabulary, and two identical seeded requests
   must draw the same tokens;
3. the checkpoint loader's output on the GPU: a two-layer checkpoint of gpt-oss-20b's shapes written in
   the published format (safetensors, BF16, MXFP4 blocks and E8M0 scales) with random values, opened by
   the engine's loader and run: its experts against the float32 dequantised reference, its logits finite.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from safetensors import TensorSpec, serialize_file

from benchmarks.gpu.common.checks import relative_error
from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.forward_step.model import chunk_steps, forward
from benchmarks.gpu.mxfp4_experts import reference
from dynamo_oss.assets.config import model_config
from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B, ModelShape
from dynamo_oss.engines.gptoss.block_manager import KvCacheManager
from dynamo_oss.engines.gptoss.capacity import plan_kv_blocks
from dynamo_oss.engines.gptoss.checkpoint import INDEX, expected_tensors, open_checkpoint
from dynamo_oss.engines.gptoss.config import GptOssArgs
from dynamo_oss.engines.gptoss.engine_core import Emitted, EngineCore
from dynamo_oss.engines.gptoss.forward import experts as mxfp4_experts
from dynamo_oss.engines.gptoss.forward.mxfp4 import CheckpointExperts, Mxfp4Weight
from dynamo_oss.engines.gptoss.gpu_runner import GpuModelRunner
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import BatchRow, RunnerSetup, StepBatch, step_batch
from dynamo_oss.engines.gptoss.request import RequestLimits, read_request
from dynamo_oss.engines.gptoss.sampling import SamplingParams
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from dynamo_oss.engines.gptoss.sequence import Sequence, StopRule

ARGS = GptOssArgs.model_validate(
    {
        "max_batch_size": 16,
        "max_num_tokens": 1024,
        "max_seq_len": 4096,
        "kv_cache_config": {"max_tokens": 65536},
        "cuda_graph_config": {"batch_sizes": [1, 16]},
    }
)
STEP_BUDGET = 192  # the scheduler's token budget in check 1: prompts in chunks beside the decodes
PROMPTS = {"a": 300, "b": 77, "c": 520, "d": 190}  # past the 128-token window, and across 32-token blocks
SHARED = ("e", "a", 256, 61)  # e: a's first 256 tokens (8 cached blocks), then 61 of its own
DECODED = 24  # tokens fed back to each request after its prompt
LOGIT_TOLERANCE = 5e-2  # BF16 through 36 layers, two attention kernels, routing near-ties: see RESULTS.md
DEADLINE_S = 300.0


def runner_for(m: ModelShape, args: GptOssArgs, checkpoint=None) -> tuple[GpuModelRunner, dict]:
    pools = kv_pools(m, args.kv_cache_config.tokens_per_block)
    runner = GpuModelRunner(RunnerSetup(m, args, pools, checkpoint))
    blocks = plan_kv_blocks(m, pools, args, runner.free_kv_bytes(), args.max_seq_len or m.max_context)
    runner.allocate_kv(blocks)
    return runner, {"pools": pools, "blocks": blocks, "free_kv_gib": runner.free_kv_bytes() / 2**30}


def paged_against_contiguous(m: ModelShape, runner: GpuModelRunner, layout: dict) -> dict:
    """Check 1: each sampled row's logits, paged, against the contiguous forward pass of the whole sequence."""
    rng = np.random.default_rng(5)
    full = {name: rng.integers(0, m.vocab_size, length + DECODED).tolist() for name, length in PROMPTS.items()}
    name, source, shared, own = SHARED
    full[name] = full[source][:shared] + rng.integers(0, m.vocab_size, own + DECODED).tolist()
    prompt_len = {**PROMPTS, name: shared + own}
    kv = KvCacheManager(layout["pools"], layout["blocks"], reuse=True)
    scheduler = Scheduler(Limits(ARGS.max_batch_size, STEP_BUDGET), kv)

    def sequence(request: str) -> Sequence:
        stop = StopRule(max_tokens=DECODED, stop_tokens=frozenset())
        prompt = full[request][: prompt_len[request]]
        return Sequence(request, prompt, len(prompt), SamplingParams(0), stop, ARGS.max_seq_len or m.max_context)

    for request in PROMPTS:
        scheduler.add(sequence(request))
    paged: dict[str, dict[int, torch.Tensor]] = {request: {} for request in full}
    steps, mixed, added, cached = 0, 0, False, 0
    while scheduler.has_work:
        step = scheduler.schedule()
        batch = step_batch(step)
        rows = [i for i, row in enumerate(batch.rows) if row.sampling is not None]
        logits = runner.logits(batch, rows)
        fed = []
        for row_index, i in enumerate(rows):
            row = batch.rows[i]
            position = row.start + len(row.token_ids) - 1
            paged[row.request_id][position] = logits[row_index].cpu()
            fed.append(full[row.request_id][position + 1])
        mixed += any(len(r.token_ids) > 1 for r in batch.rows) and any(len(r.token_ids) == 1 for r in batch.rows)
        scheduler.postprocess(step, fed)
        steps += 1
        if not added and all(seq.request_id != source or not seq.is_prefilling for seq in scheduler.running):
            scheduler.add(sequence(name))  # once a's prompt is cached
            added = True
        cached = max(cached, max((seq.num_cached for seq in scheduler.running), default=0))
    length = max(len(tokens) for tokens in full.values())
    length += -length % 128
    errors, agree, worst, itself = {}, {}, {}, {}
    for request, tokens in full.items():
        positions = sorted(paged[request])
        refs = []
        for padding in (length, length + 128):  # the same logits, but for rounding: the model's own spread
            padded = torch.tensor(tokens + [0] * (padding - len(tokens)), device="cuda")
            with torch.no_grad():
                contiguous = chunk_steps(runner.model, None, padding, 0, "cuda")
                refs.append(forward(runner.model, padded, contiguous, slice(None))[positions].float())
        ref = torch.zeros(max(positions) + 1, refs[0].shape[1], device="cuda")
        ref[positions] = refs[0]
        itself[request] = relative_error(refs[1], refs[0])
        got = torch.stack([paged[request][p] for p in positions]).cuda()
        want = ref[positions].float()
        errors[request] = relative_error(got, want)
        worst[request] = max(relative_error(got[i], want[i]) for i in range(len(positions)))
        agree[request] = float((got.argmax(-1) == want.argmax(-1)).float().mean())
    return {
        "requests": {r: {"prompt": prompt_len[r], "sampled_rows": len(paged[r])} for r in full},
        "steps": steps,
        "mixed_steps": mixed,
        "prefix_hit_tokens": cached,
        "logits_relative_error": errors,
        "worst_row_relative_error": worst,
        "argmax_agreement": agree,
        "reference_against_itself_padded_otherwise": itself,
        "logits_finite": all(bool(torch.isfinite(t).all()) for rows in paged.values() for t in rows.values()),
        "layers": m.num_layers,
        "pass": all(e < LOGIT_TOLERANCE for e in errors.values()) and cached == 256,
    }


def engine_core_on_gpu(m: ModelShape, runner: GpuModelRunner, layout: dict) -> dict:
    """Check 2: requests as Dynamo's frontend sends them, through the engine's step loop."""
    rng = np.random.default_rng(11)
    limits = RequestLimits(m.vocab_size, ARGS.max_seq_len or m.max_context)

    def request(length: int, max_tokens: int, **sampling: object) -> dict:
        stop = {"max_tokens": max_tokens}
        return {
            "token_ids": rng.integers(0, m.vocab_size, length).tolist(),
            "stop_conditions": stop,
            "sampling_options": sampling,
        }

    requests = {
        "greedy-long": request(700, 20, temperature=0),
        "greedy-short": request(9, 33, temperature=0),
        "hot-unseeded": request(150, 17, temperature=0.8),
        "seeded-1": request(64, 25, temperature=1.0, seed=7),
    }
    requests["seeded-2"] = {**requests["seeded-1"]}
    requests["greedy-stop"] = {**requests["greedy-short"]}  # its stop token from greedy-short's answer
    kv = KvCacheManager(layout["pools"], layout["blocks"], reuse=True)
    core = EngineCore(Scheduler(Limits(ARGS.max_batch_size, 256), kv), runner, m)
    core.start()
    outputs: dict[str, list[Emitted]] = {}
    done: dict[str, threading.Event] = {}
    sequences: dict[str, Sequence] = {}

    def submit(name: str) -> None:
        seq = read_request(requests[name], name, limits)
        sequences[name], outputs[name], done[name] = seq, [], threading.Event()

        def sink(emitted: Emitted, name: str = name) -> None:
            outputs[name].append(emitted)
            if emitted.finish_reason is not None or emitted.error is not None:
                done[name].set()

        core.submit(seq, sink)

    started = time.perf_counter()
    try:
        # Alone, then alone again with a stop token from its first answer: the same steps, so the same
        # tokens until the stop; then everything else together.
        for name in ("greedy-short", "greedy-stop", *[n for n in requests if n not in ("greedy-short", "greedy-stop")]):
            if name == "greedy-stop":
                stop_token = [e.token for e in outputs["greedy-short"]][10]
                requests[name]["stop_conditions"] = {"max_tokens": 33, "stop_token_ids_hidden": [stop_token]}
            submit(name)
            if name in ("greedy-short", "greedy-stop") and not done[name].wait(DEADLINE_S):
                raise TimeoutError(f"{name} did not finish in {DEADLINE_S:.0f} s")
        for name in list(done):
            if not done[name].wait(DEADLINE_S):
                raise TimeoutError(f"{name} did not finish in {DEADLINE_S:.0f} s")
    finally:
        core.stop()
    wall = time.perf_counter() - started
    report, ok = {}, True
    for name, emitted in outputs.items():
        tokens = [e.token for e in emitted if e.token is not None]
        seq, last = sequences[name], emitted[-1]
        expected = next(
            (i + 1 for i in range(len(tokens)) if seq.stop.finish_reason(tokens[: i + 1]) is not None), None
        )
        good = last.error is None and expected == len(tokens) and last.finish_reason in ("stop", "length")
        good &= all(0 <= t < m.vocab_size for t in tokens)
        ok &= good
        report[name] = {
            "prompt": seq.prompt_len,
            "max_tokens": seq.stop.max_tokens,
            "tokens": len(tokens),
            "finish_reason": last.finish_reason,
            "error": last.error,
            "first_tokens": tokens[:8],
            "ok": good,
        }
    seeded_equal = report["seeded-1"]["first_tokens"] == report["seeded-2"]["first_tokens"] and [
        e.token for e in outputs["seeded-1"]
    ] == [e.token for e in outputs["seeded-2"]]
    stopped = [e.token for e in outputs["greedy-stop"]]
    alone = [e.token for e in outputs["greedy-short"]]
    stop_hit = report["greedy-stop"]["finish_reason"] == "stop" and stopped[-1] == stop_token
    stop_hit &= stopped == alone[: alone.index(stop_token) + 1]
    return {
        "requests": report,
        "wall_s": wall,
        "seeded_requests_equal": seeded_equal,
        "stop_token": stop_token,
        "stop_token_ended_greedy_stop": stop_hit,
        "pass": ok and seeded_equal and stop_hit,
    }


def write_small_checkpoint(folder: Path, m: ModelShape) -> None:
    """Every tensor of `m` in the published format, random: BF16 normal values, FP4 codes, scales 2^-9..2^-5."""
    rng = np.random.default_rng(3)
    dtypes = {"BF16": "bfloat16", "U8": "uint8"}
    arrays, specs = {}, {}
    for name, spec in expected_tensors(m).items():
        if spec.dtype == "BF16":
            scale = 0.02 if name.endswith(("bias", "_proj.weight", "router.weight")) else 1.0
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                values = 1 + 0.1 * rng.standard_normal(spec.shape, dtype=np.float32)
            else:
                values = scale * rng.standard_normal(spec.shape, dtype=np.float32)
            array = (values.view(np.uint32) >> 16).astype(np.uint16)
        elif name.endswith("_scales"):
            array = rng.integers(118, 124, size=spec.shape, dtype=np.uint8)
        else:
            array = rng.integers(0, 256, size=spec.shape, dtype=np.uint8)
        arrays[name] = np.ascontiguousarray(array)
        specs[name] = TensorSpec(
            dtype=dtypes[spec.dtype], shape=array.shape, data_ptr=arrays[name].ctypes.data, data_len=arrays[name].nbytes
        )
    folder.mkdir(parents=True, exist_ok=True)
    serialize_file(specs, str(folder / "model-00001-of-00001.safetensors"))
    (folder / INDEX).write_text(
        json.dumps({"weight_map": {name: "model-00001-of-00001.safetensors" for name in specs}})
    )
    (folder / "config.json").write_text(json.dumps(model_config(m)))


def checkpoint_on_gpu(folder: Path) -> dict:
    """Check 3: the loader's checkpoint through the runner."""
    m = GPT_OSS_20B.model_copy(update={"num_layers": 2})
    started = time.perf_counter()
    write_small_checkpoint(folder, m)
    written = time.perf_counter() - started
    checkpoint = open_checkpoint(folder, m)
    runner, layout = runner_for(m, ARGS.model_copy(update={"max_num_tokens": 256}), checkpoint)
    layer_experts = {
        name: (
            Mxfp4Weight(
                *(
                    torch.from_numpy(
                        np.ascontiguousarray(checkpoint.array(f"model.layers.1.mlp.experts.{name}_{part}"))
                    ).cuda()
                    for part in ("blocks", "scales")
                )
            ),
            torch.from_numpy(checkpoint.float32(f"model.layers.1.mlp.experts.{name}_bias")).cuda(),
        )
        for name in ("gate_up_proj", "down_proj")
    }
    ckpt = CheckpointExperts(*layer_experts["gate_up_proj"], *layer_experts["down_proj"])
    x = torch.randn(64, m.hidden_size, device="cuda", dtype=torch.bfloat16)
    weights = runner.model.layers[1]
    logits = weights.router(x)
    with torch.no_grad():
        got = mxfp4_experts.moe_block(
            x, weights.router.weight, weights.router.bias, runner.model.experts[1], m.experts_per_token
        )
        want = reference.moe_block(x, logits, ckpt, m.experts_per_token)
    embedding_exact = bool(
        torch.equal(
            runner.model.embedding[:4].float().cpu(),
            torch.from_numpy(checkpoint.float32("model.embed_tokens.weight")[:4]),
        )
    )
    tables = {name: (0, list(range(pool.blocks_for(40)))) for name, pool in layout["pools"].items()}
    batch = StepBatch([BatchRow("ckpt", list(range(1000, 1040)), 0, tables, SamplingParams(0))])
    out = runner.logits(batch, [0])
    token = runner.execute(batch)
    runner.close()
    error = relative_error(got, want)
    return {
        "shape": "gpt-oss-20b with 2 layers",
        "write_s": written,
        "experts_vs_float32_reference": error,
        "embedding_exact": embedding_exact,
        "logits_finite": bool(torch.isfinite(out).all()),
        "token": token,
        "pass": error < 2e-2 and embedding_exact and bool(torch.isfinite(out).all()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {**device_header(), "engine_args": ARGS.model_dump()}
    started = time.perf_counter()
    few = GPT_OSS_120B.model_copy(update={"num_layers": 4})  # 120b's layers, too few to amplify rounding
    runner, layout = runner_for(few, ARGS)
    try:
        report["paged_against_contiguous_4_layers"] = paged_against_contiguous(few, runner, layout)
    except Exception:  # noqa: BLE001
        report["paged_against_contiguous_4_layers"] = {"pass": False, "error": traceback.format_exc(limit=6)}
    print("4 layers", json.dumps(report["paged_against_contiguous_4_layers"], indent=1, default=str), flush=True)
    runner.close()
    m = GPT_OSS_120B
    runner, layout = runner_for(m, ARGS)
    report["attention_check"] = runner.attention_check
    report["gpt-oss-120b"] = {
        "load_s": time.perf_counter() - started,
        "free_kv_gib": layout["free_kv_gib"],
        "blocks": layout["blocks"],
    }
    print(json.dumps(report, indent=1), flush=True)
    for name, check in (("paged_against_contiguous", paged_against_contiguous), ("engine_core", engine_core_on_gpu)):
        try:
            report[name] = check(m, runner, layout)
        except Exception as error:  # noqa: BLE001 - every check reports, the next one runs
            report[name] = {"pass": False, "error": traceback.format_exc(limit=6)}
            print(f"{name} failed: {error}", flush=True)
        print(name, json.dumps(report[name], indent=1, default=str), flush=True)
    runner.close()
    del runner
    torch.cuda.empty_cache()
    try:
        report["checkpoint"] = checkpoint_on_gpu(Path("/tmp/gptoss-small-checkpoint"))
    except Exception:  # noqa: BLE001
        report["checkpoint"] = {"pass": False, "error": traceback.format_exc(limit=6)}
    print("checkpoint", json.dumps(report["checkpoint"], indent=1, default=str), flush=True)
    report["total_s"] = time.perf_counter() - started
    (args.out / "runner_check.json").write_text(json.dumps(report, indent=1, default=str))
    names = ("paged_against_contiguous_4_layers", "paged_against_contiguous", "engine_core", "checkpoint")
    print({k: report[k].get("pass") for k in names})


if __name__ == "__main__":
    main()
