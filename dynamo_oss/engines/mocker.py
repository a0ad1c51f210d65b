"""Dynamo's mocker: the worker contract with a simulated engine, so a graph runs without GPUs.

The mocker stands in for TensorRT-LLM, so a pool's engine_args file is read as TensorRT-LLM's.
With a `SimulatedTiming` from the performance model (built-in gpt-oss models), the mocker runs
at the modelled speed of the graph's hardware and layout: its timing profile, KV capacity,
batch limits and KV-transfer cost, with one scheduler per attention-DP rank. Without one it
copies the engine configuration's limits and keeps the mocker's default timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.engines import EngineShape, PlannedFile, SimulatedTiming, WorkerContext, flags
from dynamo_oss.engines.trtllm import DEFAULT_TOKENS_PER_BLOCK, read_llm_args

READY_TIMEOUT_S = 120.0
WORKER_TYPE: dict[PoolRole, str] = {"agg": "aggregated", "prefill": "prefill", "decode": "decode"}
STANDS_IN_FOR = "trtllm"  # the mocker's --engine-type (whose scheduling it copies) for a graph's pools
# mocker_worker runs the engine itself in a namespace of its own, which no frontend watches.
CORE_NAMESPACE_PREFIX = "mocker-core-"


class MockerEngine:
    name: Literal["mocker"] = "mocker"
    ready_timeout_s: float = READY_TIMEOUT_S
    planner_backend: str = "mocker"

    def read_shape(self, engine_args: Path | None, gpus_per_worker: int) -> EngineShape:
        if engine_args is None:
            return EngineShape(tensor_parallel=gpus_per_worker, kv_block_size=DEFAULT_TOKENS_PER_BLOCK)
        return read_llm_args(engine_args)

    def unavailable_reason(self, gpus_needed: int, roles: frozenset[PoolRole]) -> str | None:
        return None  # it runs anywhere Dynamo imports

    def planner_namespace(self, namespace: str) -> str:
        # The engine publishes its forward-pass metrics, and registers, in the core namespace.
        return f"{CORE_NAMESPACE_PREFIX}{namespace}"

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        argv = ["-m", "dynamo_oss.engines.mocker_worker"]
        argv += flags(
            {
                "--model-path": str(ctx.model_folder),
                "--model-name": ctx.served_name,
                "--endpoint": ctx.endpoint,
                "--engine-type": ctx.timing.imitates if ctx.timing else STANDS_IN_FOR,
                "--disaggregation-mode": ctx.role,
            }
        )
        argv += _timing_flags(ctx.timing) if ctx.timing else _shape_flags(ctx.shape)
        max_len = ctx.shape.max_seq_len or ctx.max_context
        if max_len:
            # The context length goes on the model card, where the frontend checks prompts against it.
            argv += ["--max-model-len", str(max_len)]
        if ctx.response_trace is not None:
            argv += ["--response-replay-trace-path", str(ctx.response_trace)]
        return argv

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        return {}

    def worker_files(self, ctx: WorkerContext) -> list[PlannedFile]:
        return [ctx.timing.profile] if ctx.timing else []

    def across_nodes(self, command: list[str], hosts: list[tuple[str, int]], env: list[str]) -> list[str] | None:
        return None  # one process simulates a whole worker; there are no ranks to spread


ENGINE = MockerEngine()


def replay_engine_args(timing: SimulatedTiming, role: PoolRole, tensor_parallel: int) -> dict[str, Any]:
    """The mocker's engine configuration for one worker, as Dynamo's offline replay takes it
    (the same settings `worker_argv` passes as flags)."""
    engine: dict[str, Any] = {
        "worker_type": WORKER_TYPE[role],
        "backend": timing.imitates,
        "block_size": timing.block_size,
        "num_gpu_blocks": timing.num_gpu_blocks,
        "max_num_seqs": timing.max_num_seqs,
        "max_num_batched_tokens": timing.max_num_batched_tokens,
        "timing_model": {
            "type": "external",
            "provider": "dynamo_profile",
            "config": {"path": str(timing.profile.path)},
        },
    }
    if timing.kv_transfer_gbps is not None:
        engine["kv_transfer_bandwidth"] = timing.kv_transfer_gbps
    if timing.kv_bytes_per_token is not None:
        engine["kv_transfer_bytes_per_token"] = timing.kv_bytes_per_token
    if timing.accept_rates:
        engine["aic_nextn"] = len(timing.accept_rates)
        engine["aic_nextn_accept_rates"] = _rates(timing.accept_rates)
    return {
        "tensor_parallel_size": 1 if timing.attention_ranks > 1 else tensor_parallel,
        "dp_size": timing.attention_ranks,
        "engine": engine,
    }


def _timing_flags(timing: SimulatedTiming) -> list[str]:
    """The profile is per attention rank, so an attention-DP worker runs one scheduler per rank
    (--data-parallel-size), each with its own KV blocks and max_num_seqs."""
    argv = flags(
        {
            "--planner-profile-data": str(timing.profile.path),
            "--data-parallel-size": str(timing.attention_ranks),
            "--block-size": str(timing.block_size),
            "--num-gpu-blocks-override": str(timing.num_gpu_blocks),
            "--max-num-seqs": str(timing.max_num_seqs),
            "--max-num-batched-tokens": str(timing.max_num_batched_tokens),
        }
    )
    if timing.kv_transfer_gbps is not None:
        # The handoff delay is bytes over bandwidth, outside the speedup ratio: scale it here.
        argv += ["--kv-transfer-bandwidth", f"{timing.kv_transfer_gbps / timing.time_scale:g}"]
    if timing.kv_bytes_per_token is not None:
        argv += ["--kv-bytes-per-token", str(timing.kv_bytes_per_token)]
    if timing.time_scale != 1.0:
        argv += ["--speedup-ratio", f"{1 / timing.time_scale:g}"]
    if timing.accept_rates:
        # Dynamo's mocker draws each step's accepted drafts from these rates and emits them at once; it
        # charges the step the profile's time, which for a speculative pool is the drafting and verifying step.
        argv += ["--aic-nextn", str(len(timing.accept_rates)), "--aic-nextn-accept-rates", _rates(timing.accept_rates)]
    return argv


def _rates(rates: tuple[float, ...]) -> str:
    """The mocker's --aic-nextn-accept-rates: comma-separated, in draft order."""
    return ",".join(f"{rate:.4g}" for rate in rates)


def _shape_flags(shape: EngineShape) -> list[str]:
    """The engine configuration's KV block size and batch limits; with attention DP each rank
    batches on its own, so one scheduler gets all ranks' sequences."""
    argv = ["--block-size", str(shape.kv_block_size)]
    if shape.max_batch_size is not None:
        argv += ["--max-num-seqs", str(shape.max_batch_size * shape.attention_ranks)]
    if shape.max_num_tokens is not None:
        argv += ["--max-num-batched-tokens", str(shape.max_num_tokens)]
    return argv
