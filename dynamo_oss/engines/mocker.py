"""Dynamo's mocker: the worker contract with a simulated engine, so a graph runs without GPUs.

The mocker mirrors the TensorRT-LLM engine configuration it stands in for (batch limits,
token budget, KV block size and precision) so the router and KV accounting see the same
shapes a real pool would.
"""

from __future__ import annotations

from typing import Literal

from dynamo_oss.engines import WorkerContext
from dynamo_oss.models import BUILTIN_MODELS

TRTLLM_DEFAULT_BLOCK_SIZE = 32  # tokens per KV block in TensorRT-LLM
KV_DTYPE_BYTES = {"fp8": 1.0, "auto": 2.0, "bfloat16": 2.0, "float16": 2.0}


class MockerEngine:
    name: Literal["mocker"] = "mocker"

    def unavailable_reason(self, gpus_needed: int) -> str | None:
        return None  # it runs anywhere Dynamo imports

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        argv = [
            "-m", "dynamo_oss.launch.mocker_worker",
            "--model-path", str(ctx.model_folder),
            "--model-name", ctx.served_name,
            "--engine-type", "trtllm",  # schedule like the TensorRT-LLM engine it stands in for
            "--disaggregation-mode", ctx.role,
            "--endpoint", ctx.endpoint,
            "--block-size", str(mocker_block_size(ctx.engine_args)),
        ]  # fmt: skip
        for flag, value in mocker_limits(ctx.engine_args, ctx.gpus_per_worker).items():
            argv += [flag, str(value)]
        if ctx.response_trace is not None:
            argv += ["--response-replay-trace-path", str(ctx.response_trace)]
        shape = BUILTIN_MODELS.get(ctx.builtin_model or "")
        max_len = ctx.engine_args.get("max_seq_len") or (shape.max_context if shape else None)
        if max_len:
            # The context length goes on the model card, where the frontend checks prompts against it.
            argv += ["--max-model-len", str(max_len)]
        if shape is not None:
            kv_dtype = ctx.engine_args.get("kv_cache_config", {}).get("dtype", "auto")
            bytes_per_token = shape.kv_bytes_per_context_token(KV_DTYPE_BYTES.get(kv_dtype, 2.0))
            argv += ["--kv-bytes-per-token", str(int(bytes_per_token))]
        return argv

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        return {}


def mocker_block_size(engine_args: dict) -> int:
    return int(engine_args.get("kv_cache_config", {}).get("tokens_per_block", TRTLLM_DEFAULT_BLOCK_SIZE))


def mocker_limits(engine_args: dict, gpus_per_worker: int) -> dict[str, int]:
    """TensorRT-LLM batch limits as mocker flags; with attention DP each rank has its own batch."""
    limits = {}
    if "max_batch_size" in engine_args:
        ranks = gpus_per_worker if engine_args.get("enable_attention_dp") else 1
        limits["--max-num-seqs"] = int(engine_args["max_batch_size"]) * ranks
    if "max_num_tokens" in engine_args:
        limits["--max-num-batched-tokens"] = int(engine_args["max_num_tokens"])
    return limits
