"""Dynamo's mocker: the worker contract with a simulated engine, so a graph runs without GPUs.

For a built-in gpt-oss model the mocker runs at the modelled speed of the graph's hardware
and layout: the performance model (dynamo_oss.perf) writes its timing profile, KV capacity,
batch limits and KV-transfer cost, and an attention-DP worker gets one scheduler per rank.
Otherwise it copies the TensorRT-LLM engine configuration's limits and keeps the mocker's
default timing.
"""

from __future__ import annotations

from typing import Literal

from dynamo_oss.engines import WorkerContext
from dynamo_oss.models import BUILTIN_MODELS
from dynamo_oss.perf.profiles import mocker_flags, write_mocker_profile

TRTLLM_DEFAULT_BLOCK_SIZE = 32  # tokens per KV block in TensorRT-LLM


class MockerEngine:
    name: Literal["mocker"] = "mocker"

    def unavailable_reason(self, gpus_needed: int) -> str | None:
        return None  # it runs anywhere Dynamo imports

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        argv = [
            "-m", "dynamo_oss.launch.mocker_worker",
            "--model-path", str(ctx.model_folder),
            "--model-name", ctx.served_name,
            "--endpoint", ctx.endpoint,
        ]  # fmt: skip
        if ctx.layout is not None:
            profile = write_mocker_profile(ctx.run_dir / "profiles" / f"{ctx.role}.npz", ctx.layout, ctx.role)
            argv += mocker_flags(ctx.layout, ctx.role, profile)
        else:
            argv += ["--engine-type", "trtllm", "--disaggregation-mode", ctx.role]
            argv += _engine_limits(ctx.engine_args, ctx.gpus_per_worker)
        shape = BUILTIN_MODELS.get(ctx.builtin_model or "")
        max_len = ctx.engine_args.get("max_seq_len") or (shape.max_context if shape else None)
        if max_len:
            # The context length goes on the model card, where the frontend checks prompts against it.
            argv += ["--max-model-len", str(max_len)]
        if ctx.response_trace is not None:
            argv += ["--response-replay-trace-path", str(ctx.response_trace)]
        return argv

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        return {}


def _engine_limits(engine_args: dict, gpus_per_worker: int) -> list[str]:
    """TensorRT-LLM's KV block size and batch limits as mocker flags; with attention DP each
    rank batches on its own."""
    block_size = engine_args.get("kv_cache_config", {}).get("tokens_per_block", TRTLLM_DEFAULT_BLOCK_SIZE)
    flags = ["--block-size", str(block_size)]
    if "max_batch_size" in engine_args:
        ranks = gpus_per_worker if engine_args.get("enable_attention_dp") else 1
        flags += ["--max-num-seqs", str(int(engine_args["max_batch_size"]) * ranks)]
    if "max_num_tokens" in engine_args:
        flags += ["--max-num-batched-tokens", str(int(engine_args["max_num_tokens"]))]
    return flags
