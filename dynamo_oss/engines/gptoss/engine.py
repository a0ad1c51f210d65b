"""The gptoss engine as the rest of the tree sees it: its shape, whether this host can run it, and
the command line and environment of one worker (`python -m dynamo_oss.engines.gptoss.worker`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from dynamo_oss.catalog.models import REASONING_PARSER, TOOL_CALL_PARSER
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.engines import EngineArgsError, EngineShape, PlannedFile, WorkerContext
from dynamo_oss.engines.gptoss.config import read_engine_args
from dynamo_oss.engines.host_gpus import gpu_shortfall

READY_TIMEOUT_S = 1200.0  # reading 61 GB of checkpoint, then capturing the decode CUDA graphs
WORKER_MODULE = "dynamo_oss.engines.gptoss.worker"
GPU_RUNNER_MODULE = "dynamo_oss.engines.gptoss.gpu_runner"
NIXL_MODULES = ("nixl_cu13._api", "nixl_cu12._api", "nixl._api")  # NIXL wheels' modules, newest CUDA first
EXPERT_KERNELS = "triton_kernels"  # matmul_ogs, the MXFP4 experts' kernels
HANDOFF_ROLES: frozenset[PoolRole] = frozenset({"prefill", "decode"})  # their KV moves through NIXL


class GptOssEngine:
    name: Literal["gptoss"] = "gptoss"
    ready_timeout_s: float = READY_TIMEOUT_S
    # Dynamo's planner knows vllm, sglang, trtllm and mocker, by their components' names: the gptoss
    # workers register as TensorRT-LLM's do (prefill, backend) and publish forward-pass metrics alike.
    planner_backend: str = "trtllm"

    def read_shape(self, engine_args: Path | None, gpus_per_worker: int) -> EngineShape:
        if engine_args is None:
            raise EngineArgsError("engine gptoss needs engine_args: a gptoss engine arguments YAML")
        return read_engine_args(engine_args).shape()

    def planner_namespace(self, namespace: str) -> str:
        return namespace  # its workers publish forward-pass metrics where they serve

    def unavailable_reason(self, gpus_needed: int, roles: frozenset[PoolRole]) -> str | None:
        reasons = [shortfall] if (shortfall := gpu_shortfall(gpus_needed)) else []
        if importlib.util.find_spec("torch") is None:
            reasons.append("PyTorch is not installed (import torch fails), and the engine's forward pass is torch's")
        if importlib.util.find_spec(EXPERT_KERNELS) is None:
            reasons.append(
                f"{EXPERT_KERNELS} is not importable, and the MXFP4 experts run through it "
                "(benchmarks/gpu/mxfp4_experts/vendor.py takes it out of vLLM's wheel)"
            )
        if roles & HANDOFF_ROLES and not any(_importable(module) for module in NIXL_MODULES):
            waiting = " and ".join(sorted(roles & HANDOFF_ROLES))
            reasons.append(
                f"NIXL is not importable ({', '.join(NIXL_MODULES)}), and its {waiting} workers hand KV over through "
                "it: install NIXL's wheel (nixl-cu13, which ai-dynamo depends on) or serve the model aggregated"
            )
        return "; ".join(reasons) or None

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        assert ctx.engine_args_file is not None, "read_shape refuses gptoss without engine_args"
        flags = {
            "--engine-args": str(ctx.engine_args_file),
            "--model-folder": str(ctx.model_folder),
            "--served-model-name": ctx.served_name,
            "--endpoint": ctx.endpoint,
            "--disaggregation-mode": ctx.role,
            # The frontend renders prompts with our harmony template and parses answers with gpt-oss's parsers.
            "--custom-jinja-template": str(ctx.model_folder / "chat_template.jinja"),
            "--dyn-reasoning-parser": REASONING_PARSER,
            "--dyn-tool-call-parser": TOOL_CALL_PARSER,
        }
        if Path(ctx.model_path).is_absolute():  # the graph's model.path: a local checkout (a hub name never is)
            flags["--checkpoint"] = ctx.model_path
        return ["-m", WORKER_MODULE, *[part for flag in flags.items() for part in flag]]

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        return {}

    def worker_files(self, ctx: WorkerContext) -> list[PlannedFile]:
        return []

    def across_nodes(self, command: list[str], hosts: list[tuple[str, int]], env: list[str]) -> list[str] | None:
        return None  # one GPU per worker


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


ENGINE = GptOssEngine()
